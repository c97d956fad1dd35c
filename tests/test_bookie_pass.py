"""The full pass on copies of the corpus bookies: a log changing under the walk, and the journal's unflushed entries."""

from __future__ import annotations

import logging
import os
import shutil
import struct
from pathlib import Path

import pytest

from corpus import CORPUS
from journal_files import HEADER, journal_holds, journal_record
from scanner.metadata.snapshot import SnapshotStore
from scanner.native.switch import NATIVE_VARIABLE
from scanner.scan.full_pass import BookiePass
from scanner.scan.pacing import Unpaced
from scanner.storage.bookie import open_bookie
from scanner.storage.journal import pending_entries
from scanner.storage.layout import discover_layout

DUMP = CORPUS / "zk-dump.json"


def _copy(tmp_path: Path, name: str):
    ledgers = tmp_path / name / "ledgers"
    shutil.copytree(CORPUS / name / "ledgers", ledgers)
    for path in ledgers.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    conf = tmp_path / f"{name}.conf"
    conf.write_text((CORPUS / "bookie-configs" / f"{name}.conf").read_text()
                    .replace(f"/var/lib/bookkeeper/{name}", str(tmp_path / name)))
    return discover_layout(conf)


def _pass(layout, store, scratch: Path) -> BookiePass:
    storage = open_bookie(layout, scratch)
    return BookiePass(storage, store, layout.bookie_id, scratch, lambda: open_bookie(layout, scratch))


def test_a_log_truncated_under_the_walk_is_no_finding_and_is_said(tmp_path, caplog):
    layout = _copy(tmp_path, "bookie1")
    with SnapshotStore(DUMP) as store, _pass(layout, store, tmp_path) as full:
        full.read_index()
        full.read_cluster()
        assert full.judge_index() == []
        log_file = full.log_files[0]
        cut = []

        def checkpoint(offset, findings):
            if not cut:  # the first checkpoint: cut the rest of the log away, as nothing in a bookie would
                os.truncate(log_file.path, offset + 100)
                cut.append(offset)
            return False

        with caplog.at_level(logging.WARNING):
            assert full.walk(log_file, checkpoint=checkpoint, pace_interval=4096) == []
        assert cut and log_file.entry_log_id in full.changed
        assert f"entry log {log_file.entry_log_id} changed under the walk" in caplog.text
        full.storage.close()


def test_a_log_deleted_under_the_walk_is_walked_to_its_end(tmp_path):
    layout = _copy(tmp_path, "bookie1")
    with SnapshotStore(DUMP) as store, _pass(layout, store, tmp_path) as full:
        full.read_index()
        log_file = full.log_files[0]
        gone = []

        def checkpoint(offset, findings):
            if not gone:
                os.unlink(log_file.path)  # garbage collection: the open file stays readable
                gone.append(offset)
            return False

        assert full.walk(log_file, checkpoint=checkpoint, pace_interval=4096) == []
        assert gone and not full.changed and full.totals.entries_verified > 100
        full.storage.close()


@pytest.mark.parametrize("walker", ["native", "python"])
def test_each_checkpoint_comes_before_the_pacer_holds_the_walk(tmp_path, monkeypatch, walker):
    # bookie1's 0.log holds records of 85 KB: at a 62.5 KB interval the walk pays 131 KB at once, half a
    # second at 250 kB/s. A restart during that wait must resume past those bytes, so the checkpoint comes first.
    monkeypatch.setenv(NATIVE_VARIABLE, "1" if walker == "native" else "0")
    layout = _copy(tmp_path, "bookie1")
    events = []

    class RecordingPacer(Unpaced):
        def take_bytes(self, n):
            events.append(("paid", n))

        def take_entries(self, n):
            pass

    def checkpoint(offset, findings):
        events.append(("checkpoint", offset))
        return False

    with SnapshotStore(DUMP) as store, _pass(layout, store, tmp_path) as full:
        full.read_index()
        log_file = full.log_files[0]
        full.pacer = RecordingPacer()
        full.walk(log_file, checkpoint=checkpoint, pace_interval=62_500)
        full.storage.close()
    offsets = [value for kind, value in events if kind == "checkpoint"]
    paid = [value for kind, value in events if kind == "paid"]
    assert offsets[:3] == [132_073, 254_562, 317_239]
    assert events == [event for pair in zip(offsets, paid) for event in (("checkpoint", pair[0]), ("paid", pair[1]))]
    assert paid == [after - before for before, after in zip([1024, *offsets], offsets)]


def test_entries_in_the_journal_after_the_last_mark_are_pending(tmp_path):
    layout = _copy(tmp_path, "bookie1")
    journal = tmp_path / "bookie1" / "journal" / "current"
    journal.mkdir(parents=True)
    flushed = journal_record(7, 0) + journal_record(7, 1)
    (journal / "10.txn").write_bytes(HEADER + flushed + journal_record(7, 2) + journal_record(8, 0)
                                     + struct.pack(">i", -0x100) + struct.pack(">i", 6) + bytes(6)
                                     + journal_record(7, 3) + bytes(8))
    (journal / "11.txn").write_bytes(HEADER + journal_record(7, 4))
    (journal / "f.txn").write_bytes(HEADER + journal_record(7, 99))  # before the mark's file: all flushed
    for current in layout.ledger_current_dirs:
        (current / "lastMark").write_bytes(struct.pack(">qq", 0x10, 512 + len(flushed)))
    assert pending_entries(layout, {7}) == {(7, 2), (7, 3), (7, 4)}
    assert pending_entries(layout, {8}) == {(8, 0)}
    # A mark before the file's first record counts the whole file as unflushed: never fewer, never a crash.
    (layout.ledger_current_dirs[0] / "lastMark").write_bytes(struct.pack(">qq", 0x10, -5))
    assert pending_entries(layout, {7}) == {(7, 0), (7, 1), (7, 2), (7, 3), (7, 4)}


def test_ledger_dirs_scanned_in_parallel_processes_find_what_one_process_finds(tmp_path):
    """The corrupted bookie1 copy with its later logs moved to a second ledger dir: one process per dir."""
    import dataclasses

    from scanner.scan.on_demand import ParallelDirs, scan_bookie

    layout = discover_layout(CORPUS / "bookie-configs" / "bookie1.conf",
                             ledger_dirs=[CORPUS / "corrupted" / "bookie1-corrupted" / "ledgers"])
    split = tmp_path / "two"
    first, second = split / "d0", split / "d1"
    shutil.copytree(layout.ledger_dirs[0], first)
    (second / "current").mkdir(parents=True)
    for name in ("2.log", "3.log", "4.log"):
        os.rename(first / "current" / name, second / "current" / name)
    two_dirs = dataclasses.replace(layout, ledger_dirs=(first, second), index_dirs=(first, second))

    def keys(report):
        return sorted(((f.category.value, f.ledger_id, f.entries, f.entry_log) for f in report.findings), key=repr)

    with SnapshotStore(DUMP) as store:
        with open_bookie(layout, tmp_path) as storage:
            one = scan_bookie(storage, store, layout.bookie_id, layout.storage, scratch=tmp_path)
        with open_bookie(two_dirs, tmp_path) as storage:
            two = scan_bookie(storage, store, layout.bookie_id, layout.storage, scratch=tmp_path,
                              parallel=ParallelDirs(f"file:{DUMP}", jobs=2))
    assert {f.category.value for f in one.findings} >= {"corrupt_entry", "lost_entry", "missing_ledger"}
    assert keys(two) == keys(one)
    assert (two.entries_verified, two.bytes_scanned, two.entry_logs_scanned) == (
        one.entries_verified, one.bytes_scanned, one.entry_logs_scanned)


def _newest_log_emptied(tmp_path: Path, name: str):
    """A copy whose newest indexed entry log is still empty on disk while the index points into it: the bookie
    wrote an index page before its entry logger's buffer (it reads those entries from the buffer). The entries
    the index points at there."""
    layout = _copy(tmp_path, name)
    with open_bookie(layout, tmp_path) as storage:
        located = [(location.entry_log_id, ledger_id, entry_id) for ledger_id in storage.ledger_ids()
                   for entry_id, location in storage.locations(ledger_id)]
        newest = max(log_id for log_id, _, _ in located)
        path = next(f.path for f in storage.entry_logs() if f.entry_log_id == newest)
    os.truncate(path, 0)
    return layout, {(ledger_id, entry_id) for log_id, ledger_id, entry_id in located if log_id == newest}


def _entries_found(findings, category: str) -> set[tuple[int, int]]:
    return {(f.ledger_id, e) for f in findings if f.category.value == category
            for first, last in f.entries for e in range(first, last + 1)}


def _lost(findings) -> set[tuple[int, int]]:
    return _entries_found(findings, "lost_entry")


def test_records_still_in_the_entry_loggers_buffer_are_not_lost_when_the_journal_holds_them(tmp_path):
    layout, pointed = _newest_log_emptied(tmp_path / "unjournaled", "bookie1")
    assert pointed
    with SnapshotStore(DUMP) as store, _pass(layout, store, tmp_path) as full:
        assert _lost(full.run()) == pointed  # nothing says they are on their way: lost
        full.storage.close()

    layout, pointed = _newest_log_emptied(tmp_path / "journaled", "bookie1")
    journal_holds(tmp_path / "journaled" / "bookie1", layout, pointed)
    with SnapshotStore(DUMP) as store, _pass(layout, store, tmp_path) as full:
        assert _lost(full.run()) == set()
        assert full.totals.journaled == len(pointed)
        full.storage.close()


def _corrupt(findings) -> set[tuple[int, int]]:
    return _entries_found(findings, "corrupt_entry")


def test_a_corrupt_record_of_an_entry_the_journal_holds_again_is_not_judged_until_the_index_names_the_new_one(
        tmp_path):
    """Live, a ReplicationWorker copied a ledger back onto an ``.idx`` bookie that still held a corrupt copy of one
    of its entries: the bookie wrote the entry anew (journal, entry logger), and until its next checkpoint its index
    on disk named the old record. That record is not the bookie's copy any more."""
    copies = {}
    for name in ("unjournaled", "journaled"):
        layout = _copy(tmp_path / name, "bookie1")
        with SnapshotStore(DUMP) as store, _pass(layout, store, tmp_path) as full:
            clean = full.run()
            full.storage.close()
        assert _corrupt(clean) == set()
        with open_bookie(layout, tmp_path) as storage:
            ledger_id = next(ledger for ledger in storage.ledger_ids() if len(dict(storage.locations(ledger))) > 2)
            entry_id, location = list(storage.locations(ledger_id))[1]
            path = storage.entry_log_path(ledger_id, location.entry_log_id)
        with open(path, "r+b") as log:  # a payload byte, past the header and the longest digest
            log.seek(location.pos + 32 + 20 + 10)
            byte = log.read(1)[0]
            log.seek(-1, 1)
            log.write(bytes([byte ^ 0xA5]))
        copies[name] = layout, (ledger_id, entry_id)
    layout, rotten = copies["unjournaled"]
    with SnapshotStore(DUMP) as store, _pass(layout, store, tmp_path) as full:
        assert _corrupt(full.run()) == {rotten}  # nothing says it was written again: corrupt
        full.storage.close()

    layout, rewritten = copies["journaled"]
    journal_holds(tmp_path / "journaled" / "bookie1", layout, {rewritten})
    with SnapshotStore(DUMP) as store, _pass(layout, store, tmp_path) as full:
        assert _corrupt(full.run()) == set()
        assert full.totals.journaled == 1
        full.storage.close()


def test_a_ledger_whose_index_appears_during_the_pass_pointing_into_the_buffer_is_not_lost(tmp_path, monkeypatch):
    """Live, the bookie created a ledger's .idx after the pass had listed the index files; by the time the pass
    judged that ledger, the index pointed into the newest log, still empty on disk, at entries the journal
    held since the last mark. That is the entry logger's buffer, not loss."""
    from scanner.storage.indexfile import find_index_file
    import scanner.scan.confirmation as confirmation

    layout, pointed = _newest_log_emptied(tmp_path / "bookie", "bookie1")
    late = min(ledger_id for ledger_id, _ in pointed)
    index_file = find_index_file(layout.index_current_dirs, late)
    hidden = tmp_path / "hidden.idx"
    os.rename(index_file, hidden)  # not there when the pass lists the index files
    journal_holds(tmp_path / "bookie" / "bookie1", layout, pointed)
    read_journal = confirmation.pending_entries

    def index_written_meanwhile(*args):
        if hidden.exists():
            os.rename(hidden, index_file)  # the bookie's checkpoint wrote it after the listing
        return read_journal(*args)

    monkeypatch.setattr(confirmation, "pending_entries", index_written_meanwhile)
    with SnapshotStore(DUMP) as store, _pass(layout, store, tmp_path) as full:
        assert _lost(full.run()) == set()
        assert not hidden.exists()
        full.storage.close()


def _torn_newest_log(tmp_path: Path):
    """A bookie1 copy whose newest log (4.log, no ledgers map: the one being written) ends in 560 of the 1060 bytes of
    a record, as the bookie's buffered writer leaves it; (layout, that log's path, the missing bytes)."""
    from scanner.storage.entry import DigestType, build_entry

    layout = _copy(tmp_path, "bookie1")
    newest = layout.ledger_current_dirs[0] / "4.log"
    entry = build_entry(5, 10**6, 10**6 - 1, 1024, bytes(1024), DigestType.CRC32C)
    record = struct.pack(">i", len(entry)) + entry
    assert len(record) == 1064
    with open(newest, "ab") as log:
        log.write(record[:564])
    return layout, newest, record[564:]


def _rotated(log_path: Path, rest: bytes | None):
    """A checkpoint that, the first time, has the writer flush ``rest`` (None: nothing) and start the next log."""
    done = []

    def checkpoint(offset, findings):
        if not done:
            if rest is not None:
                with open(log_path, "ab") as log:
                    log.write(rest)
            (log_path.parent / "6.log").write_bytes(b"BKLO" + struct.pack(">iqi", 1, 0, 0) + bytes(1004))
            done.append(offset)
        return False

    return checkpoint


def _walk_torn_log_as_it_rotates(tmp_path: Path, completed: bool):
    """The findings of a pass's walk of the torn newest log, during which the next log appears (and the writer
    completes the cut record, if ``completed``)."""
    layout, newest, rest = _torn_newest_log(tmp_path)
    with SnapshotStore(DUMP) as store, _pass(layout, store, tmp_path) as full:
        full.read_index()
        full.read_cluster()
        [log_file] = [f for f in full.log_files if f.path == newest]
        found = full.walk(log_file, checkpoint=_rotated(newest, rest if completed else None), pace_interval=4096)
        full.storage.close()
    return found


def test_a_torn_tail_completed_as_the_log_rotates_during_the_walk_is_no_damage(tmp_path):
    assert _walk_torn_log_as_it_rotates(tmp_path, completed=True) == []


def test_a_torn_tail_of_a_log_that_is_no_longer_the_newest_is_damage(tmp_path):
    # The control: the next log appeared, and the cut record was not completed. A log the bookie no longer writes
    # ends in half a record.
    [damage] = _walk_torn_log_as_it_rotates(tmp_path, completed=False)
    assert damage.category.value == "damaged_entry_log" and "560 of 1060 bytes present" in damage.detail


def test_a_ledger_the_metadata_names_twice_is_read_once(tmp_path):
    """Ledger 5 in both of the hierarchical manager's trees (its short path and a long one): the `.idx` pass reads its
    index once and reports what it reports with the ledger named once."""
    import base64
    import json

    nodes = json.loads(DUMP.read_text())
    five = next(node for node in nodes if node["path"] == "/ledgers/00/0000/L0005")
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps(nodes + [
        {"path": path, "data_b64": base64.b64encode(b"").decode(), "ephemeral": False, "mzxid": 1, "version": 0}
        for path in ("/ledgers/000", "/ledgers/000/0000", "/ledgers/000/0000/0000", "/ledgers/000/0000/0000/0000")
    ] + [{**five, "path": "/ledgers/000/0000/0000/0000/L0005"}]))
    layout = discover_layout(CORPUS / "bookie-configs" / "bookie1.conf", ledger_dirs=[CORPUS / "bookie1" / "ledgers"])
    reports = []
    for dump in (DUMP, twice):
        with SnapshotStore(dump) as store:
            assert list(store.ledger_ids()).count(5) == (1 if dump == DUMP else 2)
            with _pass(layout, store, tmp_path) as full:
                reports.append((sorted(map(repr, full.run())), full.totals.ledgers_checked))
    assert reports[1] == reports[0]
