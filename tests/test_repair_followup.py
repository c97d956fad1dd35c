"""The follow-up of a mark, end to end: a worker clears the mark without fixing the copy, twice."""

from __future__ import annotations

import json
import sys

import pytest
from prometheus_client import REGISTRY

from corpus import CORPUS, bookie_id, scan_args
from scanner.checks.findings import Category, Finding
from scanner.cli import main
from scanner.commands.status import repair_lines
from scanner.metadata.zookeeper import ZooKeeperStore
from scanner.repair.backoff import escalate_now, retry_seconds
from scanner.repair.escalation_command import expand_command
from scanner.repair.filer import MarkFiler
from scanner.repair.followup import FollowUp
from scanner.repair.followup_state import STATE_FILE, Stage
from scanner.repair.marks import UnderreplicationMarks, mark_path
from scanner.repair.move_outcome import Outcome
from scanner.scan.targeted import LedgerScanner
from scanner.statefile import read_json
from scanner.storage.bookie import open_bookie
from scanner.storage.layout import discover_layout

LEDGER = 123456789  # entry 8 has a flipped payload byte on bookie1's damaged copy: readable, digest fails
COPY = CORPUS / "corrupted" / "bookie1-corrupted" / "ledgers"
RECORDER = """\
import json, sys
with open(sys.argv[1], "a") as out:
    out.write(json.dumps(sys.argv[2:]) + "\\n")
"""


def escalations() -> float:
    return REGISTRY.get_sample_value("bookie_scanner_repair_escalations_total") or 0.0


@pytest.fixture
def cluster(zookeeper, zk_load_dump):
    chroot = zk_load_dump(CORPUS / "zk-dump.json")
    store = ZooKeeperStore(zookeeper.connect_string, f"{chroot}/ledgers")
    yield chroot, store
    store.close()


@pytest.fixture
def scanner(cluster):
    _, store = cluster
    layout = discover_layout(CORPUS / "bookie-configs" / "bookie1.conf", ledger_dirs=(COPY,))
    with open_bookie(layout) as storage, LedgerScanner(storage, store, layout.bookie_id) as scanner:
        yield scanner


def test_cleared_marks_lead_to_unrepaired_then_one_escalation(capsys, zookeeper, zk_client, cluster, scanner,
                                                                tmp_path):
    chroot, store = cluster
    me = bookie_id("bookie1")
    state_dir, calls = tmp_path / "state", tmp_path / "calls.jsonl"
    (tmp_path / "recorder.py").write_text(RECORDER)
    status = main(["scan", "--full-speed", *scan_args("bookie1", COPY), "--ledger", str(LEDGER), "--mark", "--state-dir",
                   str(state_dir), "--metadata", f"zk://{zookeeper.connect_string}{chroot}/ledgers"])
    assert status == 1 and "marked" in capsys.readouterr().out
    marks = UnderreplicationMarks(zk_client, f"{chroot}/ledgers")
    path = mark_path(f"{chroot}/ledgers", LEDGER)
    assert marks.get(LEDGER).replicas == (me,)

    command = [sys.executable, str(tmp_path / "recorder.py"), str(calls), "recover", "{ledger}", "--bookie", "{bookie}"]
    follow = FollowUp(state_dir, MarkFiler(marks, me, marks_per_second=None), repair_command=command)
    reverify = lambda ledger_id: scanner.scan_ledger(ledger_id, verify_digests=True)  # noqa: E731
    baseline = escalations()

    first = follow.run_cycle(store, reverify)
    assert first.pending == [LEDGER] and first.findings == []

    zk_client.delete(path)  # a ReplicationWorker read two entries fine and cleared the mark
    second = follow.run_cycle(store, reverify)
    (unrepaired,) = second.findings
    assert unrepaired.category is Category.UNREPAIRED and unrepaired.ledger_id == LEDGER
    assert unrepaired.entries == ((8, 8),)
    assert second.remarked == [LEDGER] and marks.get(LEDGER).replicas == (me,)
    assert not calls.exists() and escalations() == baseline

    zk_client.delete(path)
    third = follow.run_cycle(store, reverify)
    assert third.escalated == [LEDGER] and [f.category for f in third.findings] == [Category.UNREPAIRED]
    assert escalations() == baseline + 1
    assert calls.read_text().splitlines() == [json.dumps(["recover", str(LEDGER), "--bookie", me])]
    assert marks.get(LEDGER) is None  # no third mark: the worker would clear it again

    # Later cycles keep reporting the copy but never run the command again; the state survives a restart.
    again = FollowUp(state_dir, MarkFiler(marks, me, marks_per_second=None), repair_command=command)
    assert again.tracked[LEDGER].stage is Stage.ESCALATED
    assert again.tracked[LEDGER].escalation.exit_status == 0
    fourth = again.run_cycle(store, reverify)
    assert [f.category for f in fourth.findings] == [Category.UNREPAIRED] and fourth.escalated == []
    assert len(calls.read_text().splitlines()) == 1 and escalations() == baseline + 1

    # Deleting the ledger ends the follow-up.
    s = f"{LEDGER:010d}"
    zk_client.delete(f"{chroot}/ledgers/{s[:2]}/{s[2:6]}/L{s[6:]}")
    fifth = again.run_cycle(store, reverify)
    assert fifth.ended == {LEDGER: "ledger deleted"}
    assert read_json(state_dir / STATE_FILE)["marks"] == []


def test_a_mark_gone_with_the_damage_gone_ends_quietly(zk_client, cluster, tmp_path):
    chroot, store = cluster
    me = bookie_id("bookie1")
    marks = UnderreplicationMarks(zk_client, f"{chroot}/ledgers")
    from scanner.repair.planner import Action, LedgerPlan

    follow = FollowUp(tmp_path, MarkFiler(marks, me, marks_per_second=None))
    follow.file([LedgerPlan(LEDGER, Action.MARK, ((8, 8),), (Category.CORRUPT_ENTRY,), "test")])
    zk_client.delete(mark_path(f"{chroot}/ledgers", LEDGER))
    cycle = follow.run_cycle(store, lambda ledger_id: [])  # a re-verification that finds the copy healthy
    assert cycle.ended == {LEDGER: "no damage left on this bookie: repaired"} and cycle.findings == []
    assert marks.get(LEDGER) is None


def test_deferred_mark_is_filed_once_the_ledger_closes(zk_client, cluster, tmp_path):
    from dataclasses import replace

    from scanner.checks.findings import Finding
    from scanner.metadata.ledger import LedgerState, parse_ledger_metadata, serialize_ledger_metadata
    from scanner.repair.planner import plan_repairs

    chroot, store = cluster
    me = bookie_id("bookie1")
    marks = UnderreplicationMarks(zk_client, f"{chroot}/ledgers")
    s = f"{LEDGER:010d}"
    znode = f"{chroot}/ledgers/{s[:2]}/{s[2:6]}/L{s[6:]}"
    closed = parse_ledger_metadata(LEDGER, zk_client.get(znode)[0])
    zk_client.set(znode, serialize_ledger_metadata(replace(closed, state=LedgerState.OPEN, last_entry_id=-1, length=0)))
    damage = [Finding(Category.CORRUPT_ENTRY, LEDGER, ((8, 8),), 0, 406576, "digest mismatch")]
    follow = FollowUp(tmp_path, MarkFiler(marks, me, marks_per_second=None))
    report, _ = follow.file(plan_repairs(damage, {LEDGER: store.ledger(LEDGER)}, me))
    assert [p.ledger_id for p in report.deferred] == [LEDGER] and marks.get(LEDGER) is None

    still_open = follow.run_cycle(store, lambda ledger_id: damage)
    assert still_open.waiting == [LEDGER] and marks.get(LEDGER) is None
    zk_client.set(znode, serialize_ledger_metadata(closed))
    closed_now = follow.run_cycle(store, lambda ledger_id: damage)
    assert closed_now.filed == [LEDGER] and marks.get(LEDGER).replicas == (me,)
    assert follow.tracked[LEDGER].stage is Stage.MARKED


def test_fragment_moved_away_ends_the_follow_up(zk_client, cluster, tmp_path):
    from dataclasses import replace

    from scanner.metadata.ledger import parse_ledger_metadata, serialize_ledger_metadata
    from scanner.repair.planner import Action, LedgerPlan

    chroot, store = cluster
    me = bookie_id("bookie1")
    marks = UnderreplicationMarks(zk_client, f"{chroot}/ledgers")
    follow = FollowUp(tmp_path, MarkFiler(marks, me, marks_per_second=None))
    follow.file([LedgerPlan(LEDGER, Action.MARK, ((8, 8),), (Category.CORRUPT_ENTRY,), "test")])
    s = f"{LEDGER:010d}"
    znode = f"{chroot}/ledgers/{s[:2]}/{s[2:6]}/L{s[6:]}"
    meta = parse_ledger_metadata(LEDGER, zk_client.get(znode)[0])
    moved = tuple((first, tuple("127.0.0.1:3999" if b == me else b for b in bookies)) for first, bookies in meta.segments)
    zk_client.set(znode, serialize_ledger_metadata(replace(meta, segments=moved)))
    zk_client.delete(mark_path(f"{chroot}/ledgers", LEDGER))
    cycle = follow.run_cycle(store, lambda ledger_id: pytest.fail("a moved fragment needs no re-verification"))
    assert "no longer holds" in cycle.ended[LEDGER]


def test_command_template_is_filled_word_by_word_without_a_shell():
    assert expand_command(["bk", "shell", "recover", "-l", "{ledger}", "{bookie}", "x{ledger}y"], 7, "h:1") == [
        "bk", "shell", "recover", "-l", "7", "h:1", "x7y"]


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def moving_follow_up(zk_client, store, chroot, state_dir, clock, command=None, **settings):
    from scanner.repair.rereplicate import Rereplicator

    marks = UnderreplicationMarks(zk_client, f"{chroot}/ledgers")
    me = bookie_id("bookie1")
    mover = Rereplicator(store, me, timeout=1.0, clock=clock)
    return FollowUp(state_dir, MarkFiler(marks, me, marks_per_second=None), rereplicator=mover,
                    repair_command=command, clock=clock, **settings), marks


def corrupt_at_8(ledger_id):
    return [Finding(Category.CORRUPT_ENTRY, ledger_id, ((8, 8),), 0, 406576, "digest mismatch")]


def test_no_good_copy_is_for_the_operator_at_once_no_bookie_to_go_to_and_failures_when_they_last():
    assert escalate_now(Outcome.NO_GOOD_COPY, 1)  # waiting will not bring a verified copy
    for outcome in (Outcome.NO_TARGET, Outcome.FAILED):  # a bookie restarting, a ZooKeeper election
        assert [escalate_now(outcome, n) for n in (1, 2, 3, 4)] == [False, False, True, True]


def test_a_move_with_no_bookie_to_go_to_is_escalated_on_its_third_try_and_tried_again_later(zk_client, cluster,
                                                                                           tmp_path):
    from scanner.repair.planner import plan_repairs

    chroot, store = cluster
    clock = Clock()
    state_dir, calls = tmp_path / "state", tmp_path / "calls.jsonl"
    (tmp_path / "recorder.py").write_text(RECORDER)
    follow, marks = moving_follow_up(zk_client, store, chroot, state_dir, clock,
                                     [sys.executable, str(tmp_path / "recorder.py"), str(calls), "{ledger}"])
    follow.file(plan_repairs(corrupt_at_8(LEDGER), {LEDGER: store.ledger(LEDGER)}, follow.bookie_id))
    # No bookie is registered at all: nowhere to move the fragment to.
    baseline = escalations()
    first = follow.run_cycle(store, corrupt_at_8)
    assert first.escalated == [] and first.findings == [] and not calls.exists()  # not yet: a bookie may be restarting
    assert marks.get(LEDGER).replicas == (follow.bookie_id,)  # left marked: the cluster is under-replicated
    record = follow.tracked[LEDGER]
    assert record.stage is Stage.MARKED and record.failures == 1
    assert [e.what for e in record.events] == ["found", "marked", "failed"]
    assert "no writable bookie outside the ensemble" in record.events[-1].detail

    assert follow.run_cycle(store, corrupt_at_8).to_json()["findings"] == []  # not due yet: nothing tried
    clock.now += 31
    assert follow.run_cycle(store, corrupt_at_8).escalated == [] and follow.tracked[LEDGER].failures == 2
    clock.now += 61
    third = follow.run_cycle(store, corrupt_at_8)
    assert third.escalated == [LEDGER] and [f.category for f in third.findings] == [Category.UNREPAIRED]
    assert "no writable bookie outside the ensemble" in third.findings[0].detail
    assert escalations() == baseline + 1 and calls.read_text().splitlines() == [json.dumps([str(LEDGER)])]
    assert [e.what for e in follow.tracked[LEDGER].events][-3:] == ["failed", "escalated", "command"]
    clock.now += 121
    again = follow.run_cycle(store, corrupt_at_8)
    assert again.escalated == [] and follow.tracked[LEDGER].failures == 4  # tried, told the operator once only
    assert len(calls.read_text().splitlines()) == 1 and escalations() == baseline + 1
    assert follow.tracked[LEDGER].next_try_ms == int(clock.now * 1000) + 240_000  # backing off

    report = follow.report()
    (row,) = report["following"]
    assert (row["ledger_id"], row["stage"], row["failures"]) == (LEDGER, "escalated", 4)
    assert row["since_ms"] == 1_800_000_000_000 and row["stage_since_ms"] == int(clock.now * 1000)
    shown = repair_lines(report)  # what `status` prints of it
    assert shown[0] == "  repairing      1 damaged ledgers"
    assert shown[1].startswith(f"    ledger {LEDGER} (corrupt_entry): ESCALATED for ") and "found " in shown[1]

    # The ledger deleted: the follow-up ends, the mark goes, the history stays in the report a while.
    s = f"{LEDGER:010d}"
    zk_client.delete(f"{chroot}/ledgers/{s[:2]}/{s[2:6]}/L{s[6:]}")
    clock.now += 241
    ended = follow.run_cycle(store, corrupt_at_8)
    assert ended.ended == {LEDGER: "ledger deleted"} and marks.get(LEDGER) is None
    reloaded = FollowUp(state_dir, follow.filer, rereplicator=follow.rereplicator, clock=clock)
    assert reloaded.tracked == {} and [e["ledger_id"] for e in reloaded.report()["ended"]] == [LEDGER]
    assert reloaded.report()["ended"][0]["events"][-1]["what"] == "ended"
    assert repair_lines(reloaded.report())[-2:] == [
        "  repaired       1 lately", f"    ledger {LEDGER}: ended 00:00:00 ago, 00:07:34 after it was found: ledger deleted"]


def test_failed_moves_are_tried_again_after_the_configured_delay_doubling_up_to_ten_minutes(zk_client, cluster,
                                                                                             tmp_path):
    assert [retry_seconds(n) for n in range(1, 7)] == [30, 60, 120, 240, 480, 600]  # the default
    assert [retry_seconds(n, 5) for n in range(1, 5)] == [5, 10, 20, 40]
    from scanner.repair.planner import plan_repairs

    chroot, store = cluster
    clock = Clock()
    follow, _ = moving_follow_up(zk_client, store, chroot, tmp_path, clock, first_retry_seconds=5)
    follow.file(plan_repairs(corrupt_at_8(LEDGER), {LEDGER: store.ledger(LEDGER)}, follow.bookie_id))
    tries = []
    for _ in range(3):  # no bookie registered: nowhere to move to
        cycle = follow.run_cycle(store, corrupt_at_8)
        record = follow.tracked[LEDGER]
        tries.append((record.failures, (record.next_try_ms - int(clock.now * 1000)) / 1000, cycle.escalated))
        clock.now = record.next_try_ms / 1000
    assert tries == [(1, 5, []), (2, 10, []), (3, 20, [LEDGER])]  # the third try, 15 s after the first, escalates


def test_failed_moves_are_escalated_after_three_tries(zk_client, cluster, tmp_path):
    from scanner.repair.planner import plan_repairs

    chroot, store = cluster
    for bookie in ("127.0.0.1:9", "127.0.0.1:7"):  # registered, nothing listens: no copy can be read
        zk_client.create(f"{chroot}/ledgers/available/{bookie}", ephemeral=True)
    clock = Clock()
    follow, _ = moving_follow_up(zk_client, store, chroot, tmp_path, clock)
    follow.file(plan_repairs(corrupt_at_8(LEDGER), {LEDGER: store.ledger(LEDGER)}, follow.bookie_id))
    outcomes = []
    for _ in range(3):
        cycle = follow.run_cycle(store, corrupt_at_8)
        outcomes.append((bool(cycle.findings), cycle.escalated))
        clock.now += 600
    assert outcomes == [(False, []), (False, []), (True, [LEDGER])]
    assert follow.tracked[LEDGER].stage is Stage.ESCALATED


@pytest.mark.parametrize("retry_seconds, asked_again_after", [(30, 10), (3, 3)])
def test_another_repairers_lock_leaves_the_ledger_pending(zk_client, zookeeper, cluster, tmp_path, retry_seconds,
                                                         asked_again_after):
    from kazoo.client import KazooClient

    from scanner.repair.ledger_lock import LedgerLock
    from scanner.repair.planner import plan_repairs

    chroot, store = cluster
    clock = Clock()
    follow, _ = moving_follow_up(zk_client, store, chroot, tmp_path, clock, first_retry_seconds=retry_seconds)
    follow.file(plan_repairs(corrupt_at_8(LEDGER), {LEDGER: store.ledger(LEDGER)}, follow.bookie_id))
    worker = KazooClient(hosts=zookeeper.connect_string)
    worker.start()
    try:
        LedgerLock(worker, f"{chroot}/ledgers", LEDGER, "replication-worker-1").acquire()
        assert follow.run_cycle(store, corrupt_at_8).pending == [LEDGER]
        clock.now += asked_again_after - 0.5
        assert follow.run_cycle(store, corrupt_at_8).pending == []  # asked again only after a while
        clock.now += 1
        assert follow.run_cycle(store, corrupt_at_8).pending == [LEDGER]
        busy = [e for e in follow.tracked[LEDGER].events if e.what == "busy"]
        assert len(busy) == 1 and "replication-worker-1" in busy[0].detail  # said once, not every cycle
    finally:
        worker.stop()
        worker.close()
