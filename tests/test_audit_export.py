"""`export`: each corpus bookie's listing as BookKeeper would answer GetListOfEntriesOfLedger, plus scan damage.

Exports are written and read here with pyarrow alone; the tests marked ``spark`` prove the audit's Spark
reads them as it expects.
"""

from __future__ import annotations

import os
import tempfile
from types import SimpleNamespace

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from audit_exports import DUMP, clean_exports, corpus_layout, damaged_exports, export_bookie, ledger_dir  # noqa: F401 (fixtures)
from corpus import BOOKIES, CORPUS, bookie_id, corruption_report, deleted_ledgers, manifest, scan_args
from scanner.audit.availability import EntryAvailability
from scanner.audit.export import PARQUET_SCHEMA, LedgerListing, export_schema, exports_filesystem, write_export
from scanner.cli import main
from scanner.storage.bookie import open_bookie
from spark_session import spark  # noqa: F401 (fixture)
from test_availability import encoded


def exported_rows(output, name):
    """The rows of one bookie's partition, read as any Hive-partitioned Parquet reader reads them."""
    exports = ds.dataset(str(output), format="parquet", partitioning="hive")
    rows = exports.to_table(filter=ds.field("bookie_id") == bookie_id(name)).to_pylist()
    return {row["ledger_id"]: SimpleNamespace(**row) for row in rows}


def group_tuples(groups):
    return [(g["first_sequence_start"], g["last_sequence_start"], g["sequence_size"], g["sequence_period"])
            for g in groups]


def maximal_runs(entry_ids):
    runs = []
    for entry_id in entry_ids:
        if runs and runs[-1][1] + 1 == entry_id:
            runs[-1][1] = entry_id
        else:
            runs.append([entry_id, entry_id])
    return runs


@pytest.mark.parametrize("name", BOOKIES)
def test_listing_is_the_index_in_bookkeepers_bytes(clean_exports, name):
    rows = exported_rows(clean_exports, name)
    with tempfile.TemporaryDirectory() as work_dir, open_bookie(corpus_layout(name), work_dir=work_dir) as storage:
        assert set(rows) == set(storage.ledger_ids())
        for ledger_id, row in rows.items():
            indexed = [entry_id for entry_id, _ in storage.locations(ledger_id)]
            # BookKeeper's builder: one period-0 group per maximal run of consecutive ids, written field by field
            assert bytes(row.entries) == encoded(*[(first, first, last - first + 1, 0)
                                                   for first, last in maximal_runs(indexed)])
            decoded = EntryAvailability.decode(bytes(row.entries))
            assert [e for first, last in decoded.runs() for e in range(first, last + 1)] == indexed
            assert group_tuples(row.entry_groups) == [
                (g.first_sequence_start, g.last_sequence_start, g.sequence_size, g.sequence_period)
                for g in decoded.groups]
            assert row.entry_count == len(indexed)
            assert (bytes(row.damaged), row.damaged_groups, row.damaged_count) == (bytes(64), [], 0)
            assert row.index_problem is None and row.storage == corpus_layout(name).storage


@pytest.mark.parametrize("name", BOOKIES)
def test_listing_equals_what_the_real_bookie_stores(clean_exports, name):
    rows = exported_rows(clean_exports, name)
    stored = {ledger["ledger_id"]: ledger["stored_on"][bookie_id(name)] for ledger in manifest()["ledgers"]
              if ledger["stored_on"].get(bookie_id(name))}
    assert {ledger_id: sorted(e for first, last in EntryAvailability.decode(bytes(row.entries)).runs()
                              for e in range(first, last + 1))
            for ledger_id, row in rows.items() if row.entry_count} == {k: sorted(v) for k, v in stored.items()}


def _experiment(copy_name):
    return next(e for e in corruption_report()["experiments"] if e["copy_dir"].endswith(copy_name))


@pytest.mark.parametrize("name, copy_name", [("bookie1", "bookie1-corrupted"), ("bookie3", "bookie3-corrupted")])
def test_damaged_copies_are_flagged_and_a_lost_index_lists_nothing(damaged_exports, name, copy_name):
    rows = exported_rows(damaged_exports, name)
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


def test_re_export_replaces_only_that_bookies_partition(tmp_path):
    export_bookie("bookie2", tmp_path)
    export_bookie("bookie4", tmp_path)
    summary = write_export([LedgerListing(7, EntryAvailability.from_entry_ids([0, 1, 2]), EntryAvailability())],
                           bookie_id("bookie4"), "db", str(tmp_path))
    assert (summary.ledgers, summary.entries, summary.damaged) == (1, 3, 0)
    assert list(exported_rows(tmp_path, "bookie4")) == [7]
    assert len(exported_rows(tmp_path, "bookie2")) == 42
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bookie_id=127.0.0.1%3A3182", "bookie_id=127.0.0.1%3A3184"]
    assert [p.name for p in (tmp_path / "bookie_id=127.0.0.1%3A3184").iterdir()] == ["part-00000.parquet"]


def test_a_partition_streams_in_row_groups_and_an_empty_bookie_still_has_one(tmp_path):
    listings = [LedgerListing(ledger_id, EntryAvailability.from_entry_ids(range(ledger_id)), EntryAvailability())
                for ledger_id in range(1, 8)]
    summary = write_export(iter(listings), "bk-1.example.com:3181", "interleaved", str(tmp_path), rows_per_batch=3)
    assert (summary.ledgers, summary.entries) == (7, sum(range(1, 8)))
    assert summary.path == f"{tmp_path}/bookie_id=bk-1.example.com%3A3181"
    parquet = pq.ParquetFile(tmp_path / "bookie_id=bk-1.example.com%3A3181" / "part-00000.parquet")
    assert [parquet.metadata.row_group(i).num_rows for i in range(parquet.num_row_groups)] == [3, 3, 1]
    write_export([], "bk-2:3181", "db", str(tmp_path))
    assert pq.ParquetFile(tmp_path / "bookie_id=bk-2%3A3181" / "part-00000.parquet").schema_arrow == PARQUET_SCHEMA
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("_")]  # no staging left behind


def test_exports_go_to_local_paths_and_pyarrows_filesystems_with_spark_s3a_taken_as_s3(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    local, path = exports_filesystem("exports/")
    assert (local.type_name, path) == ("local", str(tmp_path / "exports"))
    assert exports_filesystem(f"file://{tmp_path}/exports/")[1] == str(tmp_path / "exports")
    # an endpoint nobody listens on: building the filesystem sends nothing
    s3, path = exports_filesystem("s3a://bk-audit/exports/?region=eu-west-1&endpoint_override=127.0.0.1:9")
    assert (s3.type_name, s3.region, path) == ("s3", "eu-west-1", "bk-audit/exports")


def _tree_state(root):
    return {(path, os.stat(os.path.join(path, f)).st_size, os.stat(os.path.join(path, f)).st_mtime_ns)
            for path, _, files in os.walk(root) for f in files}


def test_export_command_writes_the_partition_and_leaves_the_bookie_untouched(tmp_path, capsys):
    before = _tree_state(CORPUS / "bookie3")
    status = main(["export", "--full-speed", *scan_args("bookie3"), "--metadata", f"file:{DUMP}",
                   "--output", str(tmp_path / "x")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert out.startswith("exported 37 ledgers of bookie 127.0.0.1:3183 to ") and "0 damaged" in out
    assert len(exported_rows(tmp_path / "x", "bookie3")) == 37
    assert _tree_state(CORPUS / "bookie3") == before


def test_export_from_a_saved_scan_report(tmp_path, capsys):
    copy = ledger_dir("bookie1", damaged=True)
    assert main(["scan", "--full-speed", *scan_args("bookie1", copy), "--metadata", f"file:{DUMP}", "--format", "json"]) == 1
    (tmp_path / "scan.json").write_text(capsys.readouterr().out)
    status = main(["export", *scan_args("bookie1", copy), "--findings", str(tmp_path / "scan.json"),
                   "--output", str(tmp_path / "x")])
    assert status == 0
    rows = exported_rows(tmp_path / "x", "bookie1")
    assert rows[123456789].damaged_count == 1


def test_an_output_that_cannot_be_written_is_refused_before_the_scan(tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    # The metadata is not there either: a scan first would have failed on that instead.
    status = main(["export", "--full-speed", *scan_args("bookie3"), "--metadata", f"file:{tmp_path / 'no-dump.json'}",
                   "--output", str(tmp_path / "a-file" / "exports")])
    assert status == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"bookie-scanner export: cannot write {tmp_path / 'a-file' / 'exports'}: ")
    status = main(["export", "--full-speed", *scan_args("bookie3"), "--metadata", f"file:{DUMP}",
                   "--output", str(tmp_path / "new" / "exports")])
    assert status == 0 and [p.name for p in (tmp_path / "new" / "exports").iterdir()] == ["bookie_id=127.0.0.1%3A3183"]


def test_export_usage_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "scan.json").write_text('{"bookie_id": "127.0.0.1:3182", "findings": []}')
    (tmp_path / "not-a-dir").write_text("")
    findings = ["--findings", str(tmp_path / "scan.json")]
    assert main(["export", *scan_args("bookie1"), *findings, "--output", str(tmp_path / "x")]) == 2
    assert main(["export", *scan_args("bookie2"), *findings, "--output", str(tmp_path / "not-a-dir")]) == 2
    assert main(["export", *scan_args("bookie2"), *findings, "--output", "nosuchfs://bucket/exports"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("bookie-scanner export: ") for line in err), err
    assert "a scan report of bookie '127.0.0.1:3182'" in err[0]
    assert err[1].startswith(f"bookie-scanner export: cannot write {tmp_path / 'not-a-dir'}: ")
    assert err[2].startswith("bookie-scanner export: cannot write nosuchfs://bucket/exports: ")
    assert (tmp_path / "not-a-dir").read_text() == ""


@pytest.mark.spark
def test_spark_infers_from_the_files_the_schema_the_audit_reads_them_with(spark, clean_exports):
    inferred = spark.read.parquet(str(clean_exports)).schema  # Spark reads every file column as nullable
    assert sorted((f.name, f.dataType.simpleString()) for f in inferred.fields) == sorted(
        (f.name, f.dataType.simpleString()) for f in export_schema().fields)
    assert export_schema()["exported_at"].dataType.typeName() == "timestamp"  # an instant, not TIMESTAMP_NTZ
    assert {row.bookie_id for row in spark.read.schema(export_schema()).parquet(str(clean_exports))
            .select("bookie_id").distinct().collect()} == {bookie_id(name) for name in BOOKIES}


@pytest.mark.spark
def test_pyarrow_writes_the_parquet_file_spark_wrote_from_the_same_rows(spark, clean_exports, tmp_path):
    from pyspark.sql.types import StructType

    partition = clean_exports / "bookie_id=127.0.0.1%3A3183"
    file_columns = StructType([f for f in export_schema().fields if f.name != "bookie_id"])
    rows = spark.read.schema(export_schema()).parquet(str(partition)).drop("bookie_id").rdd
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")  # Spark's default is legacy INT96
    try:  # as the export wrote through Spark before it wrote through pyarrow
        spark.createDataFrame(rows, file_columns).coalesce(1).write.parquet(str(tmp_path / "by-spark"))
    finally:
        spark.conf.unset("spark.sql.parquet.outputTimestampType")
    by_spark = pq.read_table(tmp_path / "by-spark")
    by_pyarrow = pq.ParquetFile(partition / "part-00000.parquet").read()
    assert by_spark.schema.remove_metadata() == by_pyarrow.schema.remove_metadata() == PARQUET_SCHEMA
    assert by_spark.num_rows == 37 and by_spark.sort_by("ledger_id").equals(by_pyarrow.sort_by("ledger_id"))
