"""A log whose header reads as zeros, on copies of corpus bookies: one DirectEntryLogger created and has not written
yet is no finding, one the index points into is damage; in a chosen log's scan (``scan --entry-log``, which reads
no index beforehand) and in a pass walked as the agent walks it, with checkpoints. The full scan is in the fault
matrix (tests/faults)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus import CORPUS, scan_with_both_walkers
from faults.inject import copy_ledger_dir, overwrite
from faults.pristine import DUMP, RECORDS_START, pristine
from scanner.metadata.snapshot import SnapshotStore
from scanner.scan.full_pass import BookiePass
from scanner.storage.bookie import open_bookie
from scanner.storage.layout import discover_layout

PREALLOCATED = 1 << 20  # DirectWriter fallocates a new log to logSizeLimit (the live kit's: 1 MiB)
BOOKIES = ["bookie1", "bookie3"]  # .idx files, RocksDB


def _copy_with_preallocated_log(model, tmp_path: Path) -> tuple[Path, int]:
    copy = copy_ledger_dir(model.ledger_dir, tmp_path / "ledgers")
    new_id = max(int(path.stem, 16) for path in (copy / "current").glob("*.log")) + 1
    (copy / "current" / f"{new_id:x}.log").write_bytes(bytes(PREALLOCATED))
    return copy, new_id


@pytest.mark.parametrize("bookie", BOOKIES)
def test_a_chosen_preallocated_log_of_zeros_is_no_finding(capsys, tmp_path, bookie):
    model = pristine(bookie, capsys)
    copy, new_id = _copy_with_preallocated_log(model, tmp_path)
    status, report = scan_with_both_walkers(capsys, *model.scan_args(copy), "--entry-log", str(new_id))
    assert (status, report["findings"], report["summary"]["entry_logs_scanned"]) == (0, [], 1)


@pytest.mark.parametrize("bookie", BOOKIES)
def test_a_chosen_log_the_index_points_into_with_its_header_zeroed_is_damage(capsys, tmp_path, bookie):
    model = pristine(bookie, capsys)
    log = model.finished_log()
    copy = copy_ledger_dir(model.ledger_dir, tmp_path / "ledgers")
    overwrite(copy / "current" / log.name, 0, bytes(RECORDS_START))
    status, report = scan_with_both_walkers(capsys, *model.scan_args(copy), "--entry-log", str(log.entry_log_id))
    [damage] = report["findings"]
    assert status == 1
    assert (damage["category"], damage["entry_log"], damage["offset"]) == ("damaged_entry_log", log.entry_log_id, 0)
    assert "the header is all zeros" in damage["detail"]


def _agent_style_pass(model, copy: Path, tmp_path: Path, log_name: str) -> tuple[list, list]:
    """The pass as the agent runs it: the index read, then the log walked with a checkpoint; (its findings, the
    findings the checkpoints got)."""
    layout = discover_layout(CORPUS / "bookie-configs" / f"{model.name}.conf", ledger_dirs=[copy])
    checkpointed = []

    def checkpoint(offset, findings):
        checkpointed.extend(findings)
        return False

    with SnapshotStore(DUMP) as store, open_bookie(layout, tmp_path) as storage, \
            BookiePass(storage, store, layout.bookie_id, tmp_path, lambda: open_bookie(layout, tmp_path)) as full:
        full.read_index()
        full.read_cluster()
        full.judge_index()
        [log_file] = [f for f in full.log_files if f.path.name == log_name]
        return full.walk(log_file, checkpoint=checkpoint, pace_interval=4096), checkpointed


@pytest.mark.parametrize("bookie", BOOKIES)
def test_in_the_agents_pass_a_preallocated_log_is_no_finding_and_a_zeroed_indexed_one_is(capsys, tmp_path, bookie):
    model = pristine(bookie, capsys)
    copy, new_id = _copy_with_preallocated_log(model, tmp_path / "preallocated")
    assert _agent_style_pass(model, copy, tmp_path / "preallocated", f"{new_id:x}.log") == ([], [])

    log = model.finished_log()
    copy = copy_ledger_dir(model.ledger_dir, tmp_path / "zeroed" / "ledgers")
    overwrite(copy / "current" / log.name, 0, bytes(RECORDS_START))
    found, checkpointed = _agent_style_pass(model, copy, tmp_path / "zeroed", log.name)
    assert checkpointed == []  # held until the walk has ended, then judged on the file and the index read again
    assert [(f.category.value, f.entry_log, f.offset) for f in found] == [("damaged_entry_log", log.entry_log_id, 0)]
