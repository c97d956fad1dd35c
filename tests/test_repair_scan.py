"""``scan --mark`` and ``marks`` on the corpus's damaged bookie copies against a real ZooKeeper."""

from __future__ import annotations

import json

import pytest

from corpus import CORPUS, bookie_id, deleted_ledgers, scan_args
from scanner.cli import main
from scanner.metadata.ledger import LedgerState, parse_ledger_metadata, serialize_ledger_metadata
from scanner.repair.marks import UnderreplicationMarks

# Ledgers whose copies the injected damage (and, for 46, the real ensemble change) broke on each copy.
DAMAGED = {
    "bookie1": {5, 19, 21, 22, 23, 24, 123456789},
    "bookie3": {10, 36, 37, 38, 39, 40, 41, 42, 46},
}


def run_json(capsys, argv):
    status = main(argv)
    out = capsys.readouterr().out
    return status, json.loads(out)


def scan_mark(capsys, connect, chroot, name, *extra):
    copy = CORPUS / "corrupted" / f"{name}-corrupted" / "ledgers"
    return run_json(capsys, ["scan", "--full-speed", *scan_args(name, copy), "--metadata", f"zk://{connect}{chroot}/ledgers",
                             "--format", "json", "--mark", "--marks-per-second", "0", *extra])


def ledger_path(chroot, ledger_id):
    s = f"{ledger_id:010d}"
    return f"{chroot}/ledgers/{s[:2]}/{s[2:6]}/L{s[6:]}"


@pytest.mark.parametrize("name", ["bookie1", "bookie3"])
def test_scan_mark_marks_exactly_the_damaged_ledgers(capsys, zookeeper, zk_client, zk_load_dump, name, tmp_path):
    chroot = zk_load_dump(CORPUS / "zk-dump.json")
    status, report = scan_mark(capsys, zookeeper.connect_string, chroot, name, "--state-dir", str(tmp_path))
    assert status == 1
    damaged = {f["ledger_id"] for f in report["findings"]
               if f["category"] in ("lost_entry", "corrupt_entry", "missing_ledger", "missing_entry")}
    assert damaged == DAMAGED[name]
    marks = UnderreplicationMarks(zk_client, f"{chroot}/ledgers")
    assert set(marks.marked_ledgers()) == DAMAGED[name]
    assert all(m.replicas == (bookie_id(name),) for m in marks.list_marks())
    assert not deleted_ledgers() & set(marks.marked_ledgers())  # 17's damaged log never leads to a mark
    assert sorted(report["repair"]["marked"]) == sorted(DAMAGED[name])
    # A second run changes nothing in ZooKeeper: the follow-up owns these marks now.
    mzxids = {l: zk_client.exists(_mark(chroot, l)).mzxid for l in DAMAGED[name]}
    status, again = scan_mark(capsys, zookeeper.connect_string, chroot, name, "--state-dir", str(tmp_path))
    assert again["repair"]["marked"] == [] and sorted(again["repair"]["following_up"]) == sorted(DAMAGED[name])
    assert {l: zk_client.exists(_mark(chroot, l)).mzxid for l in DAMAGED[name]} == mzxids


def _mark(chroot, ledger_id):
    from scanner.repair.marks import mark_path

    return mark_path(f"{chroot}/ledgers", ledger_id)


def test_open_deleted_and_moved_ledgers_are_not_marked(capsys, zookeeper, zk_client, zk_load_dump):
    chroot = zk_load_dump(CORPUS / "zk-dump.json")
    me = bookie_id("bookie1")

    def rewrite(ledger_id, **changes):
        path = ledger_path(chroot, ledger_id)
        data, stat = zk_client.get(path)
        meta = parse_ledger_metadata(ledger_id, data)
        from dataclasses import replace

        zk_client.set(path, serialize_ledger_metadata(replace(meta, **changes)), stat.version)
        return meta

    # 19: reopened (OPEN, one ensemble) -> its damage lies in the open last fragment: deferred.
    rewrite(19, state=LedgerState.OPEN, last_entry_id=-1, length=0)
    # 22: deleted.
    zk_client.delete(ledger_path(chroot, 22))
    # 21: this bookie replaced in every ensemble, as re-replication would leave it.
    meta21 = parse_ledger_metadata(21, zk_client.get(ledger_path(chroot, 21))[0])
    spare = "127.0.0.1:3999"
    rewrite(21, segments=tuple((first, tuple(spare if b == me else b for b in bookies))
                               for first, bookies in meta21.segments))
    # The ledgers rewritten here are judged at once, not 15 s after their change: what is under test is how they are
    # judged (tests/test_just_closed_ledgers.py tests the wait).
    status, report = scan_mark(capsys, zookeeper.connect_string, chroot, "bookie1", "--settle-seconds", "0")
    marked = set(UnderreplicationMarks(zk_client, f"{chroot}/ledgers").marked_ledgers())
    assert marked == DAMAGED["bookie1"] - {19, 21, 22}
    repair = report["repair"]
    assert [p["ledger_id"] for p in repair["deferred"]] == [19]
    assert "OPEN" in repair["deferred"][0]["reason"]
    assert repair["followed"] is False


def test_mark_needs_zookeeper_metadata(capsys):
    copy = CORPUS / "corrupted" / "bookie1-corrupted" / "ledgers"
    status = main(["scan", "--full-speed", *scan_args("bookie1", copy), "--metadata", f"file:{CORPUS / 'zk-dump.json'}", "--mark"])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1 and "--mark needs ZooKeeper metadata" in err


def test_marks_command_lists_like_listunderreplicated(capsys, zookeeper, zk_client, zk_load_dump):
    chroot = zk_load_dump(CORPUS / "zk-dump.json")
    root = f"{chroot}/ledgers"
    UnderreplicationMarks(zk_client, root, clock=lambda: 1_000_000.0).mark_many([5, 4294967311], ["a:1"])
    UnderreplicationMarks(zk_client, root).mark(5, ["b:2"])
    status, listing = run_json(capsys, ["marks", "--metadata", f"zk://{zookeeper.connect_string}{root}", "--format", "json"])
    assert status == 0 and listing["replication_enabled"] is True and listing["count"] == 2
    first, second = listing["ledgers"]
    assert (first["ledger_id"], first["replicas"], first["lock_holder"]) == (5, ["a:1", "b:2"], None)
    assert (second["ledger_id"], second["replicas"]) == (4294967311, ["a:1"])
    assert second["ctime"] == 1_000_000_000 and second["age_ms"] > first["age_ms"] >= 0
    status = main(["marks", "--metadata", f"zk://{zookeeper.connect_string}{root}"])
    text = capsys.readouterr().out
    assert "ledger 4294967311  replicas a:1" in text and text.rstrip().endswith("2 under-replicated ledgers")


def test_scan_mark_on_a_secured_cluster_without_a_sasl_identity_marks_nothing(capsys, zookeeper, zk_client,
                                                                             zk_load_dump, tmp_path):
    """zkEnableSecurity=true: BookKeeper's znodes are creator-only under its SASL identity; a session without one
    is refused before the scan, with that reason, rather than filing marks open to anyone."""
    chroot = zk_load_dump(CORPUS / "zk-dump.json")
    conf = tmp_path / "bookie1.conf"
    conf.write_text((CORPUS / "bookie-configs" / "bookie1.conf").read_text() + "\nzkEnableSecurity=true\n")
    status = main(["scan", "--bookie-conf", str(conf), "--ledger-dirs", str(CORPUS / "bookie1" / "ledgers"),
                   "--metadata", f"zk://{zookeeper.connect_string}{chroot}/ledgers", "--mark"])
    err = capsys.readouterr().err
    assert status == 2 and "zkEnableSecurity=true" in err and "SASL" in err
    assert UnderreplicationMarks(zk_client, f"{chroot}/ledgers").marked_ledgers() == []
