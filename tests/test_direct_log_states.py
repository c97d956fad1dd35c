"""What DirectEntryLogger's writes leave in a log for a moment, or for good when the bookie stops in between, on
copies of corpus bookies: a log of zeros (created at its full size, its header written after) is no finding unless
the index points into it; a header announcing a ledgers map that is not written yet (the header's write is queued
before the map's) is no finding once the map is there. In a chosen log's scan (``scan --entry-log``, which reads no
index beforehand) and in a pass walked as the agent walks it, with checkpoints; the full scan is in the fault matrix
(tests/faults)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from corpus import CORPUS, scan_with_both_walkers
from faults.inject import copy_ledger_dir, overwrite
from faults.pristine import DUMP, RECORDS_START, pristine
from scanner.metadata.snapshot import SnapshotStore
from scanner.native.switch import NATIVE_VARIABLE
from scanner.scan import log_walks
from scanner.scan.full_pass import BookiePass
from scanner.storage.bookie import open_bookie
from scanner.storage.layout import discover_layout
from test_entrylog import BLOCK, direct_log, entry, record

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


def _walk_one(model, copy: Path, tmp_path: Path, log_name: str, read_index: bool = True) -> tuple[list, list]:
    """One log walked as the agent walks it, with checkpoints, after the index is read (or, without
    ``read_index``, as ``scan --entry-log`` walks it); (its findings, the findings the checkpoints got)."""
    layout = discover_layout(CORPUS / "bookie-configs" / f"{model.name}.conf", ledger_dirs=[copy])
    checkpointed = []

    def checkpoint(offset, findings):
        checkpointed.extend(findings)
        return False

    with SnapshotStore(DUMP) as store, open_bookie(layout, tmp_path) as storage, \
            BookiePass(storage, store, layout.bookie_id, tmp_path, lambda: open_bookie(layout, tmp_path)) as full:
        if read_index:
            full.read_index()
            full.read_cluster()
            full.judge_index()
        [log_file] = [f for f in full.log_files if f.path.name == log_name]
        return full.walk(log_file, checkpoint=checkpoint, pace_interval=4096), checkpointed


@pytest.mark.parametrize("bookie", BOOKIES)
def test_in_the_agents_pass_a_preallocated_log_is_no_finding_and_a_zeroed_indexed_one_is(capsys, tmp_path, bookie):
    model = pristine(bookie, capsys)
    copy, new_id = _copy_with_preallocated_log(model, tmp_path / "preallocated")
    assert _walk_one(model, copy, tmp_path / "preallocated", f"{new_id:x}.log") == ([], [])

    log = model.finished_log()
    copy = copy_ledger_dir(model.ledger_dir, tmp_path / "zeroed" / "ledgers")
    overwrite(copy / "current" / log.name, 0, bytes(RECORDS_START))
    found, checkpointed = _walk_one(model, copy, tmp_path / "zeroed", log.name)
    assert checkpointed == []  # held until the walk has ended, then judged on the file and the index read again
    assert [(f.category.value, f.entry_log, f.offset) for f in found] == [("damaged_entry_log", log.entry_log_id, 0)]


UNKNOWN_LEDGER = 987654  # in no corpus metadata: its records are walked and counted, not verified
SEALED = direct_log([[record(entry(UNKNOWN_LEDGER, e, bytes(300))) for e in range(3)],
                     [record(entry(UNKNOWN_LEDGER, e, bytes(300))) for e in range(3, 5)]])
MAP_OFFSET = 3 * BLOCK  # the header block, two flushes of records, then the map's block


def _copy_with_map_to_come(model, tmp_path: Path) -> tuple[Path, Path]:
    """A copy with a new sealed DirectEntryLogger log whose map block still reads as zeros (header already written)."""
    copy = copy_ledger_dir(model.ledger_dir, tmp_path / "ledgers")
    new_id = max(int(path.stem, 16) for path in (copy / "current").glob("*.log")) + 1
    path = copy / "current" / f"{new_id:x}.log"
    path.write_bytes(SEALED[:MAP_OFFSET] + bytes(len(SEALED) - MAP_OFFSET))
    return copy, path


@pytest.mark.parametrize("walker", ["native", "python"])
def test_a_map_written_a_moment_after_the_header_that_announces_it_is_no_finding(capsys, tmp_path, monkeypatch,
                                                                               walker):
    monkeypatch.setenv(NATIVE_VARIABLE, "1" if walker == "native" else "0")
    model = pristine("bookie3", capsys)
    copy, path = _copy_with_map_to_come(model, tmp_path)

    def write_the_map():
        time.sleep(1.0)
        overwrite(path, MAP_OFFSET, SEALED[MAP_OFFSET:])

    writer = threading.Thread(target=write_the_map)
    started = time.monotonic()
    writer.start()
    try:
        found, _ = _walk_one(model, copy, tmp_path, path.name, read_index=False)
    finally:
        writer.join()
    assert time.monotonic() - started >= 1.0  # it read the map again until the map was there
    assert [f for f in found if f.category.value != "orphan_ledger"] == []


@pytest.mark.parametrize("walker", ["native", "python"])
def test_a_map_the_header_announces_that_never_comes_is_damage(capsys, tmp_path, monkeypatch, walker):
    monkeypatch.setenv(NATIVE_VARIABLE, "1" if walker == "native" else "0")
    monkeypatch.setattr(log_walks, "MAP_WRITE_WAIT", 0.5)
    model = pristine("bookie3", capsys)
    copy, path = _copy_with_map_to_come(model, tmp_path)
    found, _ = _walk_one(model, copy, tmp_path, path.name, read_index=False)
    [damage] = [f for f in found if f.category.value == "damaged_entry_log"]
    assert damage.offset == MAP_OFFSET and "batches list 0 ledgers, the header says 1" in damage.detail
