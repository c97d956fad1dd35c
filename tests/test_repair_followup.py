"""The follow-up of a mark, end to end: a worker clears the mark without fixing the copy, twice."""

from __future__ import annotations

import json
import sys

import pytest
from prometheus_client import REGISTRY

from corpus import CORPUS, bookie_id, scan_args
from scanner.bookie_scan import BookieScanner
from scanner.checks.findings import Category
from scanner.cli import main
from scanner.metadata.zookeeper import ZooKeeperStore
from scanner.repair.filer import MarkFiler
from scanner.repair.followup import STATE_FILE, FollowUp, Stage, expand_command
from scanner.repair.marks import UnderreplicationMarks, mark_path
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
    with open_bookie(layout) as storage, BookieScanner(storage, store, layout.bookie_id) as scanner:
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
