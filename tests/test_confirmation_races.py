"""A bookie compacting a log while a pass confirms what it found there.

A DbLedgerStorage index opened for confirmation is a snapshot. Seen on the live cluster: the bookie's compaction
copied a log's records to a new log, pointed its index at the copies and removed the old log, all between the
moment the confirmation opened its index and the moment it read the records; the index, opened before, still
pointed into the removed log, and the pass reported the records lost (a false `lost_entry` on a healthy bookie,
ended by the next pass).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from faults.inject import set_location, xor_byte
from scanner.metadata.snapshot import SnapshotStore
from scanner.scan.full_pass import BookiePass
from scanner.storage.bookie import open_bookie
from scanner.storage.entry import DigestType
from scanner.storage.entrylog import EntryLog
from scanner.storage.layout import discover_layout

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from scale_bookie import Shape, digest_type, generate  # noqa: E402


def test_records_moved_by_compaction_after_the_confirmation_opened_its_index_are_judged_where_they_went(tmp_path):
    bookie = generate(Shape("db", ledgers=60, entry_logs=3, entry_size=100, entries_per_ledger=4), tmp_path / "bk")
    old = bookie.entry_logs[0]
    with EntryLog(old, int(old.stem, 16)) as log:
        records = [(r.ledger_id, r.entry_id, r.pos) for r in log.records()]
    ledger, entry, pos = next(r for r in records if digest_type(r[0]) is not DigestType.DUMMY)
    xor_byte(old, pos + 32 + 20 + 10, 0xA5)  # a corrupt payload: the walk finds it, the confirmation re-reads it
    new_id = max(int(p.stem, 16) for p in bookie.entry_logs) + 1
    new = old.with_name(f"{new_id:x}.log")
    layout = discover_layout(bookie.bookie_conf)

    def compact() -> None:  # as the bookie does: copy the records, point the index at the copies, remove the log
        shutil.copyfile(old, new)
        for ledger_id, entry_id, record_pos in records:
            set_location(old.parent.parent, "db", ledger_id, entry_id, (new_id, record_pos))
        old.unlink()

    opened = []

    def reopen():
        fresh = open_bookie(layout, tmp_path / "scratch")
        if not opened:
            compact()  # just after the first fresh index was opened: it still points into the old log
        opened.append(fresh)
        return fresh

    (tmp_path / "scratch").mkdir()
    store = SnapshotStore(bookie.dump)
    with BookiePass(open_bookie(layout, tmp_path / "scratch"), store, layout.bookie_id, tmp_path / "scratch",
                    reopen) as whole:
        try:
            found = [f for f in whole.run() if not f.category.informational]
        finally:
            whole.storage.close()
    store.close()
    assert opened and not old.exists()  # the log was compacted away while the pass ran
    assert [(f.category.value, f.ledger_id, f.entries, f.entry_log) for f in found] == [
        ("corrupt_entry", ledger, ((entry, entry),), new_id)]
