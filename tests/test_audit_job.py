"""`audit` on local Spark: BP-34's contract over the four corpus bookies, the dump and a real ZooKeeper."""

from __future__ import annotations

import json
import shutil

import pytest

from audit_exports import DUMP, DUMP_LIVE, clean_exports, damaged_exports  # noqa: F401 (fixtures)
from corpus import bookie_id, corruption_report, deleted_ledgers, manifest
from scanner.cli import main
from scanner.metadata.snapshot import SnapshotStore
from scanner.metadata.zookeeper import ZooKeeperStore
from scanner.repair.marks import UnderreplicationMarks
from spark_session import spark  # noqa: F401 (fixture)

pytestmark = pytest.mark.spark

BOOKIE3 = "127.0.0.1:3183"
ORPHANS = [("orphan_ledger", 6, [[0, 37]]), ("orphan_ledger", 17, [[0, 176]])]


def audit(capsys, *args):
    status = main(["audit", *args, "--format", "json"])
    captured = capsys.readouterr()
    return status, json.loads(captured.out)


def entry_ids(groups):
    """The entries a violation's JSON sequence groups stand for."""
    return {start + offset for g in groups
            for start in range(g["first_sequence_start"], g["last_sequence_start"] + 1, g["sequence_period"] or 1)
            for offset in range(g["sequence_size"])}


def runs(groups):
    ids = sorted(entry_ids(groups))
    out = []
    for e in ids:
        if out and out[-1][1] == e - 1:
            out[-1][1] = e
        else:
            out.append([e, e])
    return out


def categories(report):
    return [(v["category"], v["ledger_id"], runs(v["entries"])) for v in report["violations"]]


def assert_corpus_truth(status, report):
    assert status == 1
    assert categories(report) == [*ORPHANS, ("under_replicated_entry", 46, [[45, 45]])]
    under = report["violations"][-1]
    assert (under["bookies"], under["copies"]) == ([BOOKIE3], 2)
    summary = report["summary"]
    assert summary["ledgers_checked"] == 51 and summary["bookies"] == 4
    assert summary["violations"] == {"under_replicated_entry": 1, "extra_copy": 0, "placement_violation": 0,
                                     "orphan_ledger": 2, "long_under_replicated": 0, "unavailable_bookie": 0}


def test_corpus_against_the_dump(spark, clean_exports, capsys):
    status, report = audit(capsys, "--exports", str(clean_exports), "--metadata", f"file:{DUMP}")
    assert_corpus_truth(status, report)
    assert report["summary"]["registered_bookies"] == []  # exported bookies count as available anyway


def test_open_ledgers_are_not_judged_on_their_last_fragment(spark, clean_exports, capsys):
    # the exports hold 78 and 55 entries of the OPEN ledgers 47 and 48, all beyond their metadata's
    # lastEntryId of -1: judged like closed ledgers, every copy would be an extra one
    open_ledgers = {l["ledger_id"] for l in manifest()["ledgers"] if l["status"] == "OPEN"}
    assert open_ledgers == {47, 48}
    rows = spark.read.parquet(str(clean_exports)).where("ledger_id in (47, 48)").collect()
    assert sum(row.entry_count for row in rows) > 0
    status, report = audit(capsys, "--exports", str(clean_exports), "--metadata", f"file:{DUMP}")
    assert not {v["ledger_id"] for v in report["violations"]} & open_ledgers


def test_corpus_against_a_real_zookeeper(spark, clean_exports, zookeeper, zk_load_dump, capsys):
    chroot = zk_load_dump(DUMP_LIVE)
    status, report = audit(capsys, "--exports", str(clean_exports),
                           "--metadata", f"zk://{zookeeper.connect_string}{chroot}/ledgers")
    assert_corpus_truth(status, report)
    assert report["summary"]["registered_bookies"] == sorted(bookie_id(f"bookie{n}") for n in range(1, 5))


def test_a_bookie_neither_registered_nor_exported_is_unavailable(spark, clean_exports, tmp_path, capsys):
    three = tmp_path / "exports"
    for partition in clean_exports.iterdir():
        if partition.name.startswith("bookie_id=") and "3184" not in partition.name:
            shutil.copytree(partition, three / partition.name)
    on_bookie4 = {l["ledger_id"] for l in manifest()["ledgers"]
                  if l["ensembles"] and any("127.0.0.1:3184" in e["bookies"] for e in l["ensembles"])}
    status, report = audit(capsys, "--exports", str(three), "--metadata", f"file:{DUMP}")
    unavailable = {v["ledger_id"]: v["bookies"] for v in report["violations"] if v["category"] == "unavailable_bookie"}
    assert unavailable == {ledger_id: ["127.0.0.1:3184"] for ledger_id in on_bookie4}
    assert report["summary"]["bookies"] == 3
    status, report = audit(capsys, "--exports", str(three), "--metadata", f"file:{DUMP_LIVE}")
    assert report["summary"]["violations"]["unavailable_bookie"] == 0  # registered: up, just not exported


def _damaged_copy_entries():
    """(ledger, entry, bookie) of every damaged copy in the corrupted bookie dirs that the metadata relies on."""
    damaged = set()
    for experiment in corruption_report()["experiments"]:
        bookie = bookie_id(experiment["copy_dir"].rsplit("/", 1)[-1].removesuffix("-corrupted"))
        for fault in experiment["faults"]:
            if fault["kind"] == "payload_byte_flip":
                damaged.add((fault["ledger_id"], fault["entry_id"], bookie))
            elif fault["kind"] == "entry_log_truncated":
                damaged |= {(e["ledger_id"], e["entry_id"], bookie)
                            for e in fault["entries_whose_record_is_incomplete_or_gone"]}
            elif fault["kind"] == "index_file_deleted":
                damaged |= {(fault["ledger_id"], e, bookie) for e in fault["entries_it_indexed"]}
    return {(l, e, b) for l, e, b in damaged if l not in deleted_ledgers()}


def _striped(store, ledger_id, entry_id, bookie):
    """Whether a judged (closed) fragment of the ledger places ``entry_id`` on ``bookie``."""
    for fragment in store.ledger(ledger_id).fragments():
        if fragment.last_entry_id is not None and fragment.first_entry_id <= entry_id <= fragment.last_entry_id:
            index = fragment.bookie_index(bookie)
            return index is not None and fragment.holds(index, entry_id)
    return False


def test_every_damaged_copy_is_an_under_replicated_entry(spark, damaged_exports, capsys):
    status, report = audit(capsys, "--exports", str(damaged_exports), "--metadata", f"file:{DUMP}")
    assert status == 1
    by_category = {}
    for v in report["violations"]:
        by_category.setdefault(v["category"], []).append(v)
    assert [(v["ledger_id"], runs(v["entries"])) for v in by_category.pop("orphan_ledger")] == [
        (ledger_id, entries) for _, ledger_id, entries in ORPHANS]
    under = by_category.pop("under_replicated_entry")
    assert by_category == {}
    with SnapshotStore(DUMP) as store:
        expected = {(l, e, b) for l, e, b in _damaged_copy_entries() if _striped(store, l, e, b)}
        # a violation names the bookies some of its entries lack: which bookie, the write set says
        reported = {(v["ledger_id"], e, b) for v in under for e in entry_ids(v["entries"]) for b in v["bookies"]
                    if _striped(store, v["ledger_id"], e, b)}
    assert len(expected) > 300 and (5, 0, "127.0.0.1:3181") in expected and (123456789, 8, "127.0.0.1:3181") in expected
    assert reported == expected | {(46, 45, BOOKIE3)}
    # the entries are exact: their union is the damaged entries, no entry in between
    listed = [(v["ledger_id"], e) for v in under for e in entry_ids(v["entries"])]
    assert len(listed) == len(set(listed)) == sum(v["entry_count"] for v in under)
    assert set(listed) == {(l, e) for l, e, _ in expected} | {(46, 45)}
    assert any("damaged copies on" in v["detail"] for v in under)


def test_marks_age_skip_and_filing_on_a_real_zookeeper(spark, clean_exports, zookeeper, zk_client, zk_load_dump,
                                                       capsys):
    chroot = zk_load_dump(DUMP)
    uri = f"zk://{zookeeper.connect_string}{chroot}/ledgers"
    marks = UnderreplicationMarks(zk_client, f"{chroot}/ledgers")
    status, report = audit(capsys, "--exports", str(clean_exports), "--metadata", uri, "--mark")
    assert report["repair"][BOOKIE3]["marked"] == [46]
    assert marks.get(46).replicas == (BOOKIE3,)
    # marked now: left to re-replication, judged only on its age
    status, report = audit(capsys, "--exports", str(clean_exports), "--metadata", uri,
                           "--max-under-replicated-age", "1h")
    assert categories(report) == ORPHANS and status == 1
    assert report["summary"]["ledgers_not_judged"]["marked"] == 1
    status, report = audit(capsys, "--exports", str(clean_exports), "--metadata", uri,
                           "--max-under-replicated-age", "0s")
    assert [(v["category"], v["ledger_id"]) for v in report["violations"]][-1] == ("long_under_replicated", 46)


def test_racks_and_parquet_output(spark, clean_exports, tmp_path, capsys):
    racks = tmp_path / "racks"
    racks.write_text("# one rack for all\n" + "".join(f"127.0.0.1:318{n} rack-a\n" for n in range(1, 5)))
    status, report = audit(capsys, "--exports", str(clean_exports), "--metadata", f"file:{DUMP}",
                           "--racks", str(racks), "--output", str(tmp_path / "violations"))
    placement = {v["ledger_id"] for v in report["violations"] if v["category"] == "placement_violation"}
    closed = {l["ledger_id"] for l in manifest()["ledgers"] if l["status"] == "CLOSED"}
    assert placement == closed
    written = spark.read.parquet(str(tmp_path / "violations")).collect()
    assert len(written) == len(report["violations"])
    assert {(row.category, row.ledger_id) for row in written} == {
        (v["category"], v["ledger_id"]) for v in report["violations"]}
    status, report = audit(capsys, "--exports", str(clean_exports), "--metadata", f"file:{DUMP}",
                           "--racks", str(racks), "--min-racks", "1")
    assert report["summary"]["violations"]["placement_violation"] == 0


def test_text_report(spark, clean_exports, capsys):
    assert main(["audit", "--exports", str(clean_exports), "--metadata", f"file:{DUMP}"]) == 1
    out = capsys.readouterr().out
    assert "violations: under_replicated_entry 1, orphan_ledger 2" in out
    assert "under_replicated_entry  ledger 46 entries 45 bookies 127.0.0.1:3183" in out


@pytest.mark.parametrize("args, message", [
    (["--metadata", f"file:{DUMP}", "--mark"], "--mark needs ZooKeeper metadata"),
    (["--metadata", f"file:{DUMP}", "--max-under-replicated-age", "soon"], "--max-under-replicated-age 'soon'"),
    (["--metadata", f"file:{DUMP}", "--min-racks", "0"], "--min-racks must be at least 1"),
    ([], "no metadata service"),
])
def test_usage_errors_exit_2_with_one_line(spark, clean_exports, capsys, args, message):
    assert main(["audit", "--exports", str(clean_exports), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("bookie-scanner audit: ") and message in err[0], err


def test_missing_exports_and_missing_java_exit_2(spark, tmp_path, capsys, monkeypatch):
    assert main(["audit", "--exports", str(tmp_path / "nowhere"), "--metadata", f"file:{DUMP}"]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["audit", "--exports", str(tmp_path / "empty"), "--metadata", f"file:{DUMP}"]) == 2
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert main(["audit", "--exports", str(tmp_path / "empty"), "--metadata", f"file:{DUMP}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("bookie-scanner audit: ") for line in err), err
    assert "nowhere: no such directory" in err[0] and "no bookie exports" in err[1] and "Java" in err[2]


def test_a_violation_is_judged_again_when_its_metadata_changed(spark, clean_exports, zookeeper, zk_client,
                                                               zk_load_dump):
    # what the executors run on the ledgers they judge one by one: ledger 46 (an entry under-replicated)
    # deleted in ZooKeeper after its metadata was read, and ledger 5 left alone
    from pyspark.sql import Row

    from scanner.audit.job import judge_rows
    from scanner.audit.judging import AuditContext, Status
    from scanner.audit.metadata_source import zookeeper_source

    chroot = zk_load_dump(DUMP)
    with ZooKeeperStore(zookeeper.connect_string, f"{chroot}/ledgers") as store:
        source = zookeeper_source(store)
        rows = []
        for ledger_id in (5, 46):
            path = f"{chroot}/ledgers/00/0000/L{ledger_id:04d}"
            data, stat = zk_client.get(path)
            listings = spark.read.parquet(str(clean_exports)).where(f"ledger_id = {ledger_id}").select(
                "bookie_id", "entries", "damaged").collect()
            rows.append(Row(ledger_id=ledger_id, path=path, data=data, ctime=stat.ctime,
                            mzxid=stat.mzxid, listings=listings))
        context = AuditContext(frozenset(), frozenset(bookie_id(f"bookie{n}") for n in range(1, 5)), frozenset())
        broadcast = type("Broadcast", (), {"value": context})()
        judged = list(judge_rows(broadcast, source, rows))
        assert [(o.ledger_id, [v.category.value for v in o.violations], o.rejudged) for o in judged] == [
            (5, [], False), (46, ["under_replicated_entry"], False)]
        zk_client.delete(f"{chroot}/ledgers/00/0000/L0046")
        judged = list(judge_rows(broadcast, source, rows))
    assert [(o.ledger_id, o.status, [v.category.value for v in o.violations], o.rejudged) for o in judged] == [
        (5, Status.JUDGED, [], False), (46, Status.JUDGED, ["orphan_ledger"], True)]
    assert judged[1].mzxid is None
