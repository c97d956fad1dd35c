"""Moving a damaged fragment, on a real ZooKeeper: the lock, the mark and the metadata around the copy.

The copy itself needs real bookies (tests/live/); here every way a move stops before, or instead
of, copying is checked against the corpus cluster's metadata loaded into ZooKeeper, and the
ZooKeeper side of a move (the lock, the mark, the compare-and-set of the ensemble) on its own.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from kazoo.client import KazooClient

from corpus import CORPUS, bookie_id
from scanner.metadata.ledger import LedgerState, parse_ledger_metadata, serialize_ledger_metadata
from scanner.metadata.ledger_paths import ledger_path
from scanner.metadata.zookeeper import ZooKeeperStore
from scanner.repair.ledger_lock import LedgerLock, LockBusy
from scanner.repair.marks import MarkOutcome, UnderreplicationMarks, lock_path, mark_path
from scanner.repair.move_outcome import Outcome
from scanner.repair.rereplicate import Rereplicator

LEDGER = 123456789  # bookie1 is in its only ensemble; entry 8 is one of bookie1's
ME = bookie_id("bookie1")


@pytest.fixture
def cluster(zookeeper, zk_load_dump):
    chroot = zk_load_dump(CORPUS / "zk-dump.json")
    store = ZooKeeperStore(zookeeper.connect_string, f"{chroot}/ledgers")
    yield store
    store.close()


def znode(store, ledger_id=LEDGER) -> str:
    return ledger_path(store.manager, store.root, ledger_id)


def metadata(store, ledger_id=LEDGER):
    raw, _ = store.client.get(znode(store, ledger_id))
    return parse_ledger_metadata(ledger_id, raw)


def register(store, *bookies: str) -> None:
    for bookie in bookies:
        store.client.create(f"{store.root}/available/{bookie}", ephemeral=True)


def attempt(store, damaged=((8, 8),), mark_zxid=None):
    return Rereplicator(store, ME, timeout=1.0).rereplicate(LEDGER, damaged, mark_zxid=mark_zxid)


def our_mark(marks, ledger_id=LEDGER) -> int:
    """File the mark as the agent does; the creation zxid that makes it ours."""
    created = {}
    marks.mark(ledger_id, [ME], created)
    return created[ledger_id]


def test_another_repairers_lock_means_later_and_is_left_alone(cluster, zookeeper):
    other = KazooClient(hosts=zookeeper.connect_string)
    other.start()
    try:
        LedgerLock(other, cluster.root, LEDGER, "worker-host").acquire()
        result = attempt(cluster)
        assert result.outcome is Outcome.BUSY and "worker-host" in result.detail
        assert cluster.client.exists(lock_path(cluster.root, LEDGER)).ephemeralOwner == other.client_id[0]
        assert UnderreplicationMarks(cluster.client, cluster.root).get(LEDGER) is None  # not marked either
    finally:
        other.stop()
        other.close()


def test_a_deleted_ledger_needs_nothing_and_its_mark_goes(cluster):
    marks = UnderreplicationMarks(cluster.client, cluster.root)
    zxid = our_mark(marks)
    cluster.client.delete(znode(cluster))
    result = attempt(cluster, mark_zxid=zxid)
    assert (result.outcome, result.detail) == (Outcome.NOT_NEEDED, "ledger deleted")
    assert marks.get(LEDGER) is None
    assert cluster.client.exists(lock_path(cluster.root, LEDGER)) is None


def test_a_ledger_that_moved_on_needs_nothing_and_other_bookies_stay_on_its_mark(cluster):
    marks = UnderreplicationMarks(cluster.client, cluster.root)
    marks.mark(LEDGER, ["10.9.9.9:3181", ME])
    meta = metadata(cluster)
    (first, bookies), = meta.segments
    moved = tuple("10.9.9.8:3181" if b == ME else b for b in bookies)
    cluster.client.set(znode(cluster), serialize_ledger_metadata(replace(meta, segments=((first, moved),))))
    result = attempt(cluster)
    assert result.outcome is Outcome.NOT_NEEDED and "no longer holds" in result.detail
    assert marks.get(LEDGER).replicas == ("10.9.9.9:3181",)


def test_damage_in_an_open_ledgers_last_fragment_waits_unmarked(cluster):
    meta = metadata(cluster)
    cluster.client.set(znode(cluster), serialize_ledger_metadata(
        replace(meta, state=LedgerState.OPEN, last_entry_id=-1, length=0)))
    result = attempt(cluster)
    assert result.outcome is Outcome.DEFERRED and "last fragment" in result.detail
    assert UnderreplicationMarks(cluster.client, cluster.root).get(LEDGER) is None
    assert cluster.client.exists(lock_path(cluster.root, LEDGER)) is None


def test_nothing_moves_while_auto_recovery_is_disabled(cluster):
    cluster.client.create(f"{cluster.root}/underreplication/disable", makepath=True)
    result = attempt(cluster)
    assert result.outcome is Outcome.DEFERRED and "disabled" in result.detail
    assert UnderreplicationMarks(cluster.client, cluster.root).get(LEDGER) is None


def test_no_bookie_outside_the_ensemble_is_reported_and_the_ledger_stays_marked(cluster):
    meta = metadata(cluster)
    register(cluster, *meta.segments[0][1])  # every writable bookie is already in the ensemble
    before = cluster.client.get(znode(cluster))[0]
    result = attempt(cluster)
    assert result.outcome is Outcome.NO_TARGET and "no writable bookie outside the ensemble" in result.detail
    assert result.remarked and UnderreplicationMarks(cluster.client, cluster.root).get(LEDGER).replicas == (ME,)
    assert cluster.client.get(znode(cluster))[0] == before


def test_unreachable_bookies_fail_the_move_and_change_no_metadata(cluster):
    # Nothing listens on these: the peers cannot give a copy, so no new bookie is ever written to.
    meta = metadata(cluster)
    register(cluster, "127.0.0.1:9", "127.0.0.1:7")
    before = cluster.client.get(znode(cluster))[0]
    result = attempt(cluster)
    assert result.outcome is Outcome.FAILED and "no verifying copy read" in result.detail, result
    # what each peer answered for the damaged entry, kept for the operator (repairs.jsonl, the report)
    ((entry_id, copies),) = result.answers
    peers = [b for b in meta.segments[0][1] if b != ME]
    assert entry_id == 8 and {c.bookie_id for c in copies} <= set(peers) and copies
    assert all(c.state.value == "no_answer" for c in copies)
    assert result.to_json()["answers"][0]["copies"][0]["state"] == "no_answer"
    assert cluster.client.get(znode(cluster))[0] == before and meta.segments[0][1].count(ME) == 1
    assert UnderreplicationMarks(cluster.client, cluster.root).get(LEDGER).replicas == (ME,)
    assert cluster.client.exists(lock_path(cluster.root, LEDGER)) is None


def test_a_lock_is_ours_only_while_our_session_holds_it(cluster, zookeeper):
    lock = LedgerLock(cluster.client, cluster.root, LEDGER, "bookie-scanner on me")
    lock.acquire()
    assert lock.still_held()
    with pytest.raises(LockBusy, match="bookie-scanner on me"):
        LedgerLock(cluster.client, cluster.root, LEDGER, "again").acquire()
    cluster.client.delete(lock.path)  # as when the session expired during an outage
    other = KazooClient(hosts=zookeeper.connect_string)
    other.start()
    try:
        LedgerLock(other, cluster.root, LEDGER, "worker").acquire()
        assert not lock.still_held()
        lock.release()  # not ours: left alone
        assert cluster.client.exists(lock.path).ephemeralOwner == other.client_id[0]
    finally:
        other.stop()
        other.close()


def test_releasing_a_mark_takes_back_only_this_bookies_request_and_then_the_empty_levels(cluster):
    marks = UnderreplicationMarks(cluster.client, cluster.root)
    neighbour = LEDGER + 1  # shares the first three hex levels with LEDGER
    marks.mark(LEDGER, [ME, "10.9.9.9:3181"])
    neighbours_zxid = our_mark(marks, neighbour)
    assert marks.release(LEDGER, ME, created_zxid=None, bookie_lost=False)
    assert marks.get(LEDGER).replicas == ("10.9.9.9:3181",)
    assert marks.release(LEDGER, "10.9.9.9:3181", created_zxid=None, bookie_lost=False)
    # Not created by us: emptied, not deleted (a worker still checks the ledger before removing it).
    assert marks.get(LEDGER).replicas == ()
    own, shared = mark_path(cluster.root, LEDGER).rsplit("/", 2)[:2]
    cluster.client.delete(f"{own}/{shared}", recursive=True)  # a worker removed it
    level = own  # the neighbour's mark is still under it
    assert marks.release(neighbour, ME, created_zxid=neighbours_zxid, bookie_lost=False)
    assert marks.get(neighbour) is None and cluster.client.exists(level) is None
    assert cluster.client.exists(f"{cluster.root}/underreplication/ledgers") is not None
    assert marks.release(neighbour, ME, created_zxid=neighbours_zxid, bookie_lost=False)  # nothing left: fine


def test_a_placement_mark_merged_with_this_bookie_is_left_as_it_was(cluster):
    marks = UnderreplicationMarks(cluster.client, cluster.root)
    marks.mark(LEDGER, [])  # the Auditor's placement-policy mark names no bookie
    assert marks.mark(LEDGER, [ME], {}) is MarkOutcome.MERGED
    assert marks.release(LEDGER, ME, created_zxid=None, bookie_lost=False)
    assert marks.get(LEDGER).replicas == ()


def test_the_auditors_mark_of_a_lost_bookie_stays_when_one_of_its_fragments_moved(cluster):
    # The bookie's process is dead (not registered) while its agent still scans its disk: the Auditor
    # marked its ledgers naming it. A fragment moved away (here: by anyone) ends this bookie's damage
    # there, but its other fragments on the dead bookie are still the mark's request.
    meta = metadata(cluster)
    (first, bookies), = meta.segments
    moved = tuple("10.9.9.8:3181" if b == ME else b for b in bookies)
    cluster.client.set(znode(cluster), serialize_ledger_metadata(
        replace(meta, segments=((first, moved), (50, bookies)))))
    auditor = UnderreplicationMarks(cluster.client, cluster.root)
    auditor.mark(LEDGER, [ME])
    register(cluster, "10.9.9.8:3181")  # ME is not registered: lost
    result = attempt(cluster)
    assert result.outcome is Outcome.NOT_NEEDED
    assert auditor.get(LEDGER).replicas == (ME,)
    # Registered again (back, or never gone): this bookie's request is taken back, the mark not deleted.
    register(cluster, ME)
    assert Rereplicator(cluster, ME).release_mark(LEDGER, mark_zxid=None)
    assert auditor.get(LEDGER).replicas == ()


def test_a_metadata_write_under_a_lock_lost_and_taken_by_another_fails_in_one_multi(cluster, zookeeper):
    lock = LedgerLock(cluster.client, cluster.root, LEDGER, "bookie-scanner on me")
    lock.acquire()
    before = cluster.client.get(znode(cluster))
    writing = cluster.client.transaction()
    lock.guard(writing)
    writing.set_data(znode(cluster), before[0], before[1].version)
    assert writing.commit()[0] is True  # ours: the write goes through
    cluster.client.delete(lock.path)  # our session lost it, and a worker took it
    other = KazooClient(hosts=zookeeper.connect_string)
    other.start()
    try:
        other.create(lock.path, b'bookieId: "worker"\n', ephemeral=True)  # as a ReplicationWorker locks
        raw, stat = cluster.client.get(znode(cluster))
        writing = cluster.client.transaction()
        lock.guard(writing)
        writing.set_data(znode(cluster), raw, stat.version)
        results = writing.commit()
        assert isinstance(results[0], Exception) and isinstance(results[1], Exception)
        assert cluster.client.get(znode(cluster))[1].version == stat.version  # nothing written
    finally:
        other.stop()
        other.close()


def test_repairing_a_ledger_no_one_has_is_a_usage_error(capsys, zookeeper, zk_load_dump):
    from corpus import scan_args
    from scanner.cli import main

    chroot = zk_load_dump(CORPUS / "zk-dump.json")
    status = main(["repair", *scan_args("bookie1"), "--metadata", f"zk://{zookeeper.connect_string}{chroot}/ledgers",
                   "--ledger", "987654321"])
    err = capsys.readouterr().err
    assert status == 2 and "neither in this bookie's index nor in the metadata" in err


def test_a_format_1_ledger_is_refused_with_its_own_reason_and_changes_nothing(cluster):
    meta = metadata(cluster)
    cluster.client.set(znode(cluster), serialize_ledger_metadata(meta, 1))
    before = cluster.client.get(znode(cluster))[0]
    result = attempt(cluster)
    assert result.outcome is Outcome.REFUSED and "metadata format 1" in result.detail, result
    assert cluster.client.get(znode(cluster))[0] == before
    assert cluster.client.exists(lock_path(cluster.root, LEDGER)) is None


def test_a_cluster_whose_bookies_authenticate_their_clients_is_refused_before_anything_is_copied(cluster):
    register(cluster, "127.0.0.1:9")
    mover = Rereplicator(cluster, ME, timeout=1.0,
                         conf={"bookieAuthProviderFactoryClass": "org.example.SaslBookieAuthProviderFactory"})
    result = mover.rereplicate(LEDGER, ((8, 8),))
    assert result.outcome is Outcome.REFUSED and "authenticate their clients" in result.detail, result
    assert result.moves == ()
