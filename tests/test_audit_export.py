"""`export`: each corpus bookie's listing as BookKeeper would answer GetListOfEntriesOfLedger, plus scan damage."""

from __future__ import annotations

import os
import tempfile

import pytest

from audit_exports import DUMP, clean_exports, corpus_layout, damaged_exports, export_bookie, ledger_dir  # noqa: F401 (fixtures)
from corpus import BOOKIES, CORPUS, bookie_id, corruption_report, deleted_ledgers, manifest, scan_args
from scanner.audit.availability import EntryAvailability
from scanner.audit.export import LedgerListing, export_schema, write_export
from scanner.cli import main
from scanner.storage.bookie import open_bookie
from spark_session import spark  # noqa: F401 (fixture)
from test_availability import encoded

pytestmark = pytest.mark.spark


def exported_rows(spark, output, name):
    rows = spark.read.schema(export_schema()).parquet(str(output)).where(f"bookie_id = '{bookie_id(name)}'").collect()
    return {row.ledger_id: row for row in rows}


def maximal_runs(entry_ids):
    runs = []
    for entry_id in entry_ids:
        if runs and runs[-1][1] + 1 == entry_id:
            runs[-1][1] = entry_id
        else:
            runs.append([entry_id, entry_id])
    return runs


@pytest.mark.parametrize("name", BOOKIES)
def test_listing_is_the_index_in_bookkeepers_bytes(spark, clean_exports, name):
    rows = exported_rows(spark, clean_exports, name)
    with tempfile.TemporaryDirectory() as work_dir, open_bookie(corpus_layout(name), work_dir=work_dir) as storage:
        assert set(rows) == set(storage.ledger_ids())
        for ledger_id, row in rows.items():
            indexed = [entry_id for entry_id, _ in storage.locations(ledger_id)]
            # BookKeeper's builder: one period-0 group per maximal run of consecutive ids, written field by field
            assert bytes(row.entries) == encoded(*[(first, first, last - first + 1, 0)
                                                   for first, last in maximal_runs(indexed)])
            decoded = EntryAvailability.decode(bytes(row.entries))
            assert [e for first, last in decoded.runs() for e in range(first, last + 1)] == indexed
            assert [tuple(group) for group in row.entry_groups] == [
                (g.first_sequence_start, g.last_sequence_start, g.sequence_size, g.sequence_period)
                for g in decoded.groups]
            assert row.entry_count == len(indexed)
            assert (bytes(row.damaged), row.damaged_groups, row.damaged_count) == (bytes(64), [], 0)
            assert row.index_problem is None and row.storage == corpus_layout(name).storage


@pytest.mark.parametrize("name", BOOKIES)
def test_listing_equals_what_the_real_bookie_stores(spark, clean_exports, name):
    rows = exported_rows(spark, clean_exports, name)
    stored = {ledger["ledger_id"]: ledger["stored_on"][bookie_id(name)] for ledger in manifest()["ledgers"]
              if ledger["stored_on"].get(bookie_id(name))}
    assert {ledger_id: sorted(e for first, last in EntryAvailability.decode(bytes(row.entries)).runs()
                              for e in range(first, last + 1))
            for ledger_id, row in rows.items() if row.entry_count} == {k: sorted(v) for k, v in stored.items()}


def _experiment(copy_name):
    return next(e for e in corruption_report()["experiments"] if e["copy_dir"].endswith(copy_name))


@pytest.mark.parametrize("name, copy_name", [("bookie1", "bookie1-corrupted"), ("bookie3", "bookie3-corrupted")])
def test_damaged_copies_are_flagged_and_a_lost_index_lists_nothing(spark, damaged_exports, name, copy_name):
    rows = exported_rows(spark, damaged_exports, name)
    faults = {fault["kind"]: fault for fault in _experiment(copy_name)["faults"]}
    flip = faults["payload_byte_flip"]
    cut = faults["entry_log_truncated"]["entries_whose_record_is_incomplete_or_gone"]
    expected = {(flip["ledger_id"], flip["entry_id"])} | {
        (e["ledger_id"], e["entry_id"]) for e in cut if e["ledger_id"] not in deleted_ledgers()}
    flagged = {(ledger_id, e) for ledger_id, row in rows.items()
               for first, last in EntryAvailability.decode(bytes(row.damaged)).runs() for e in range(first, last + 1)}
    assert flagged == expected
    for ledger_id, row in rows.items():
        listed = EntryAvailability.decode(bytes(row.entries))
        assert all(e in listed for l, e in flagged if l == ledger_id)  # damaged copies are still indexed
        assert row.damaged_count == sum(1 for l, _ in flagged if l == ledger_id)
    if "index_file_deleted" in faults:
        assert faults["index_file_deleted"]["ledger_id"] not in rows


def test_re_export_replaces_only_that_bookies_partition(spark, tmp_path):
    export_bookie(spark, "bookie2", tmp_path)
    export_bookie(spark, "bookie4", tmp_path)
    summary = write_export(spark, [LedgerListing(7, EntryAvailability.from_entry_ids([0, 1, 2]), EntryAvailability())],
                           bookie_id("bookie4"), "db", str(tmp_path))
    assert (summary.ledgers, summary.entries, summary.damaged) == (1, 3, 0)
    assert list(exported_rows(spark, tmp_path, "bookie4")) == [7]
    assert len(exported_rows(spark, tmp_path, "bookie2")) == 42
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bookie_id=127.0.0.1%3A3182", "bookie_id=127.0.0.1%3A3184"]


def _tree_state(root):
    return {(path, os.stat(os.path.join(path, f)).st_size, os.stat(os.path.join(path, f)).st_mtime_ns)
            for path, _, files in os.walk(root) for f in files}


def test_export_command_writes_the_partition_and_leaves_the_bookie_untouched(spark, tmp_path, capsys):
    before = _tree_state(CORPUS / "bookie3")
    status = main(["export", *scan_args("bookie3"), "--metadata", f"file:{DUMP}", "--output", str(tmp_path / "x")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert out.startswith("exported 37 ledgers of bookie 127.0.0.1:3183 to ") and "0 damaged" in out
    assert len(exported_rows(spark, tmp_path / "x", "bookie3")) == 37
    assert _tree_state(CORPUS / "bookie3") == before
    assert spark.sparkContext._jsc is not None  # a session the command did not start is left running


def test_export_from_a_saved_scan_report(spark, tmp_path, capsys):
    copy = ledger_dir("bookie1", damaged=True)
    assert main(["scan", *scan_args("bookie1", copy), "--metadata", f"file:{DUMP}", "--format", "json"]) == 1
    (tmp_path / "scan.json").write_text(capsys.readouterr().out)
    status = main(["export", *scan_args("bookie1", copy), "--findings", str(tmp_path / "scan.json"),
                   "--output", str(tmp_path / "x")])
    assert status == 0
    rows = exported_rows(spark, tmp_path / "x", "bookie1")
    assert rows[123456789].damaged_count == 1


def test_export_usage_errors_are_one_line(spark, tmp_path, capsys):
    (tmp_path / "scan.json").write_text('{"bookie_id": "127.0.0.1:3182", "findings": []}')
    (tmp_path / "not-a-dir").write_text("")
    assert main(["export", *scan_args("bookie1"), "--findings", str(tmp_path / "scan.json"),
                 "--output", str(tmp_path / "x")]) == 2
    assert main(["export", *scan_args("bookie1"), "--metadata", f"file:{DUMP}",
                 "--output", str(tmp_path / "not-a-dir")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("bookie-scanner export: ") for line in err), err
    assert "a scan report of bookie '127.0.0.1:3182'" in err[0]
    assert "cannot write" in err[1]
