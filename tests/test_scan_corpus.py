"""`bookie-scanner scan` on the real BookKeeper corpus: exactly the manifest's truth, nothing else."""

from __future__ import annotations

import pytest

from corpus import (BOOKIES, CORPUS, assert_clean_report, by_category, corruption_report, deleted_ledgers,
                    entries_of, expected_missing, scan, scan_args, scan_with_both_walkers, stored_deleted)
from scanner.cli import main

DUMP = CORPUS / "zk-dump.json"


@pytest.mark.parametrize("name", BOOKIES)
def test_clean_bookie_against_a_dump(capsys, name):
    status, report = scan_with_both_walkers(capsys, *scan_args(name), "--metadata", f"file:{DUMP}")
    assert_clean_report(name, status, report)


def test_ledger_46_entry_45_is_the_only_missing_entry_in_the_corpus(capsys):
    status, report = scan(capsys, *scan_args("bookie3"), "--metadata", f"file:{DUMP}")
    [missing] = by_category(report)["missing_entry"]
    assert (missing["ledger_id"], missing["entries"]) == (46, [[45, 45]])


def _experiment(copy_name: str) -> dict:
    return next(e for e in corruption_report()["experiments"] if e["copy_dir"].endswith(copy_name))


@pytest.mark.parametrize("copy_name, original", [("bookie1-corrupted", "bookie1"), ("bookie3-corrupted", "bookie3")])
def test_damaged_copy_reports_exactly_the_injected_damage(capsys, copy_name, original):
    experiment = _experiment(copy_name)
    status, report = scan_with_both_walkers(capsys, *scan_args(original, CORPUS / "corrupted" / copy_name / "ledgers"),
                                            "--metadata", f"file:{DUMP}")
    found = by_category(report)
    assert status == 1
    faults = {f["kind"]: f for f in experiment["faults"]}

    flip = faults["payload_byte_flip"]
    [corrupt] = found.pop("corrupt_entry")
    assert (corrupt["ledger_id"], corrupt["entries"], corrupt["entry_log"]) == (
        flip["ledger_id"], [[flip["entry_id"]] * 2], 0)
    assert corrupt["offset"] == flip["record_offset"] + 4

    cut = faults["entry_log_truncated"]
    gone = {(e["ledger_id"], e["entry_id"]) for e in cut["entries_whose_record_is_incomplete_or_gone"]}
    live_gone = {(l, e) for l, e in gone if l not in deleted_ledgers()}
    lost = found.pop("lost_entry")
    assert entries_of(lost) == live_gone
    assert all(f["entry_log"] == 1 for f in lost)
    half = cut["cut_inside_record"]
    damaged = found.pop("damaged_entry_log")
    assert {f["entry_log"] for f in damaged} == {1}
    assert any(f["offset"] == half["record_offset"] for f in damaged), damaged

    if "index_file_deleted" in faults:
        deleted_idx = faults["index_file_deleted"]
        [missing_ledger] = found.pop("missing_ledger")
        assert missing_ledger["ledger_id"] == deleted_idx["ledger_id"]
        assert entries_of([missing_ledger]) == {(deleted_idx["ledger_id"], e) for e in deleted_idx["entries_it_indexed"]}
        assert "still sit in entry log" in missing_ledger["detail"]

    assert entries_of(found.pop("missing_entry", [])) == expected_missing(original)
    orphans = {f["ledger_id"] for f in found.pop("orphan_ledger", [])}
    assert orphans == stored_deleted(original)
    assert found == {}


def test_narrowed_to_one_ledger_verifies_its_digests_through_the_index(capsys):
    copy = CORPUS / "corrupted" / "bookie1-corrupted" / "ledgers"
    status, report = scan(capsys, *scan_args("bookie1", copy), "--metadata", f"file:{DUMP}", "--ledger", "123456789")
    assert status == 1
    assert [(f["category"], f["ledger_id"], f["entries"]) for f in report["findings"]] == [
        ("corrupt_entry", 123456789, [[8, 8]])]
    assert report["summary"]["entry_logs_scanned"] == 0


def test_narrowed_to_one_entry_log(capsys):
    copy = CORPUS / "corrupted" / "bookie3-corrupted" / "ledgers"
    status, report = scan_with_both_walkers(capsys, *scan_args("bookie3", copy), "--metadata", f"file:{DUMP}",
                                            "--entry-log", "0")
    assert [(f["category"], f["ledger_id"]) for f in report["findings"] if f["category"] != "orphan_ledger"] == [
        ("corrupt_entry", 10)]
    assert report["summary"]["entry_logs_scanned"] == 1 and report["summary"]["ledgers_checked"] == 0


def test_usage_errors_exit_2_with_one_line(capsys):
    assert main(["scan", "--full-speed", "--metadata", f"file:{DUMP}"]) == 2
    assert main(["scan", "--full-speed", *scan_args("bookie1"), "--metadata", "file:/nonexistent/dump.json"]) == 2
    assert main(["scan", "--full-speed", *scan_args("bookie1"), "--metadata", "nonsense://x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("bookie-scanner scan: ") for line in err)
