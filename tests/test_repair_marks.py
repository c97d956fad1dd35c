"""Under-replication marks on a real ZooKeeper: paths, bytes, merging, races, locks, disable, pacing."""

from __future__ import annotations

import threading

import pytest
from google.protobuf import text_format
from kazoo.client import KazooClient

from scanner.metadata.proto.data_formats_pb2 import LockDataFormat, UnderreplicatedLedgerFormat
from scanner.repair.filer import MarkFiler
from scanner.repair.marks import (
    DamagedMark,
    MarkData,
    MarkOutcome,
    UnderreplicationMarks,
    encode_mark,
    lock_path,
    mark_path,
)
from scanner.repair.planner import Action, LedgerPlan
from throttle import ManualClock, TokenBucket

NOW_S = 1_700_000_000.0
NOW_MS = 1_700_000_000_000
ME = "127.0.0.1:3181"
OTHER = "bookie-3.example:3181"


@pytest.fixture
def root(zk_chroot):
    return f"{zk_chroot}/ledgers"


@pytest.fixture
def marks(zk_client, root):
    return UnderreplicationMarks(zk_client, root, clock=lambda: NOW_S)


def tree(client, path):
    """Every znode under ``path`` with its data and modification zxid."""
    nodes = {}
    stack = [path]
    while stack:
        node = stack.pop()
        data, stat = client.get(node)
        nodes[node] = (data, stat.mzxid)
        stack.extend(f"{node}/{c}" for c in client.get_children(node))
    return nodes


def mark_plan(ledger_id):
    return LedgerPlan(ledger_id, Action.MARK, ((0, 0),), (), "test")


@pytest.mark.parametrize("ledger_id, hex_levels, leaf", [
    (1, "0000/0000/0000/0001", "urL0000000001"),
    (123456789, "0000/0000/075b/cd15", "urL0123456789"),
    (4294967311, "0000/0001/0000/000f", "urL4294967311"),
])
def test_mark_sits_at_the_auditors_path_with_the_auditors_bytes(zk_client, marks, root, ledger_id, hex_levels, leaf):
    assert marks.mark(ledger_id, [ME]) is MarkOutcome.CREATED
    path = f"{root}/underreplication/ledgers/{hex_levels}/{leaf}"
    assert mark_path(root, ledger_id) == path
    data, stat = zk_client.get(path)
    assert stat.ephemeralOwner == 0
    assert data == f'replica: "{ME}"\nctime: {NOW_MS}\n'.encode()
    parsed = text_format.Parse(data.decode(), UnderreplicatedLedgerFormat())
    assert list(parsed.replica) == [ME] and parsed.ctime == NOW_MS
    # Parents are plain persistent nodes with no data, as asyncCreateFullPathOptimistic leaves them.
    parent = path.rsplit("/", 1)[0]
    while parent != f"{root}/underreplication":
        data, stat = zk_client.get(parent)
        assert data == b"" and stat.ephemeralOwner == 0
        parent = parent.rsplit("/", 1)[0]
    assert marks.marked_ledgers() == [ledger_id]


def test_two_replicas_are_byte_identical_to_the_documented_auditor_output(zk_client, marks, root):
    marks.mark(7, ["10.0.0.2:3181", OTHER])
    data, _ = zk_client.get(mark_path(root, 7))
    assert data == b'replica: "10.0.0.2:3181"\nreplica: "bookie-3.example:3181"\nctime: 1700000000000\n'


def test_merge_keeps_the_other_bookie_first_and_renews_ctime(zk_client, marks, root):
    path = mark_path(root, 42)
    zk_client.create(path, encode_mark(MarkData((OTHER,), 1000)), makepath=True)
    assert marks.mark(42, [ME]) is MarkOutcome.MERGED
    data, stat = zk_client.get(path)
    assert data == f'replica: "{OTHER}"\nreplica: "{ME}"\nctime: {NOW_MS}\n'.encode()
    # Already named: nothing is written, the old ctime stays.
    later = UnderreplicationMarks(zk_client, root, clock=lambda: NOW_S + 3600)
    assert later.mark(42, [OTHER, ME]) is MarkOutcome.UNCHANGED
    assert zk_client.get(path)[1].version == stat.version


def test_a_mark_without_ctime_stays_without_one_when_ctime_is_off(zk_client, root):
    marks = UnderreplicationMarks(zk_client, root, store_ctime=False)
    marks.mark(5, [ME])
    assert zk_client.get(mark_path(root, 5))[0] == f'replica: "{ME}"\n'.encode()
    assert marks.get(5) == MarkData((ME,), None)


def test_unparsable_mark_is_a_typed_error_and_left_alone(zk_client, marks, root):
    path = mark_path(root, 9)
    zk_client.create(path, b"\x00garbage{", makepath=True)
    with pytest.raises(DamagedMark, match="urL0000000009"):
        marks.mark(9, [ME])
    assert zk_client.get(path)[0] == b"\x00garbage{"
    # Others in the same batch are still marked.
    outcomes = marks.mark_many([9, 10], [ME])
    assert isinstance(outcomes[9], DamagedMark) and outcomes[10] is MarkOutcome.CREATED
    listed = {m.ledger_id: m for m in marks.list_marks()}
    assert listed[9].problem is not None and listed[10].replicas == (ME,)


def test_concurrent_markers_on_two_sessions_lose_nothing(zookeeper, zk_client, root):
    ledger_ids = list(range(1000, 1150))
    clients = [KazooClient(hosts=zookeeper.connect_string, timeout=30) for _ in range(2)]
    errors = []
    try:
        for client in clients:
            client.start(timeout=30)
        bookies = ["127.0.0.1:3181", "127.0.0.1:3183"]
        start = threading.Barrier(2)

        def run(client, bookie):
            try:
                start.wait()
                for i in range(0, len(ledger_ids), 10):  # small batches: many interleavings
                    outcomes = UnderreplicationMarks(client, root).mark_many(ledger_ids[i:i + 10], [bookie])
                    errors.extend(o for o in outcomes.values() if isinstance(o, Exception))
            except Exception as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(c, b)) for c, b in zip(clients, bookies)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        for client in clients:
            client.stop()
            client.close()
    assert errors == []
    listed = UnderreplicationMarks(zk_client, root).list_marks()
    assert [m.ledger_id for m in listed] == ledger_ids
    assert all(sorted(m.replicas) == sorted(bookies) for m in listed)


def test_a_workers_lock_is_never_touched_and_is_listed(zk_client, marks, root):
    lock = lock_path(root, 77)
    lock_data = text_format.MessageToString(LockDataFormat(bookieId="worker-host")).encode()
    zk_client.create(lock, lock_data, makepath=True, ephemeral=True)
    before = zk_client.get(lock)[1]
    zk_client.create(mark_path(root, 77), encode_mark(MarkData((OTHER,), 1)), makepath=True)
    assert marks.mark(77, [ME]) is MarkOutcome.MERGED
    data, stat = zk_client.get(lock)
    assert data == lock_data and stat.mzxid == before.mzxid and stat.version == before.version
    assert zk_client.get_children(f"{root}/underreplication/locks") == ["urL0000000077"]
    (listed,) = marks.list_marks()
    assert (listed.ledger_id, listed.replicas, listed.ctime, listed.age_ms, listed.lock_holder) == (
        77, (OTHER, ME), NOW_MS, 0, "worker-host")


def test_filer_is_idempotent(zk_client, marks, root):
    filer = MarkFiler(marks, ME, marks_per_second=None)
    first = filer.file_marks([mark_plan(i) for i in (3, 4, 5)])
    assert first.marked == [3, 4, 5]
    snapshot = tree(zk_client, f"{root}/underreplication")
    second = filer.file_marks([mark_plan(i) for i in (3, 4, 5)])
    assert second.marked == [] and second.already_marked == [3, 4, 5]
    assert tree(zk_client, f"{root}/underreplication") == snapshot


def test_filer_respects_disable(zk_client, marks, root):
    zk_client.create(f"{root}/underreplication/disable", makepath=True)
    assert not marks.replication_enabled()
    skip = LedgerPlan(8, Action.SKIP, ((0, 0),), (), "deleted")
    report = MarkFiler(marks, ME, marks_per_second=None).file_marks([mark_plan(3), mark_plan(4), skip])
    assert report.disabled == [3, 4] and report.marked == [] and report.skipped == [skip]
    assert not zk_client.exists(f"{root}/underreplication/ledgers")


def test_filer_charges_one_token_per_mark_in_batches(marks):
    bucket = TokenBucket(1.0, burst=1000, clock=ManualClock())
    report = MarkFiler(marks, ME, batch=7, bucket=bucket).file_marks([mark_plan(i) for i in range(30)])
    assert report.marked == list(range(30))
    assert bucket.available() == pytest.approx(970)
