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
from journal_files import journal_holds
from scanner.metadata.snapshot import SnapshotStore
from scanner.scan.full_pass import BookiePass
from scanner.storage.bookie import open_bookie
from scanner.storage.entry import DigestType
from scanner.storage.entrylog import EntryLog
from scanner.storage.layout import discover_layout

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from scale_bookie import Shape, digest_type, generate  # noqa: E402


def _generated(tmp_path: Path):
    """A generated DbLedgerStorage bookie; (its layout, its first log, that log's records as (ledger, entry, pos),
    a ledger with at least two records there whose digest is not DUMMY)."""
    bookie = generate(Shape("db", ledgers=60, entry_logs=3, entry_size=100, entries_per_ledger=4), tmp_path / "bk")
    old = bookie.entry_logs[0]
    with EntryLog(old, int(old.stem, 16)) as log:
        records = [(r.ledger_id, r.entry_id, r.pos) for r in log.records()]
    ledger = next(ledger for ledger, _, _ in records if digest_type(ledger) is not DigestType.DUMMY
                  and sum(1 for other, _, _ in records if other == ledger) >= 2)
    return bookie, discover_layout(bookie.bookie_conf), old, records, ledger


def _pass_while_compacting(tmp_path: Path, bookie, layout, old: Path, records, new_locations=None):
    """A whole pass of the bookie during which, just after its confirmation opened a fresh index, the bookie
    compacts ``old`` as BookKeeper does: copies the records to a new log, points the index at the copies (or where
    ``new_locations`` says, for the (ledger, entry) it names) and removes the log. (findings, the pass's totals,
    the new log's id)."""
    new_id = max(int(p.stem, 16) for p in bookie.entry_logs) + 1
    new = old.with_name(f"{new_id:x}.log")

    def compact() -> None:
        shutil.copyfile(old, new)
        for ledger_id, entry_id, record_pos in records:
            pos = (new_locations or {}).get((ledger_id, entry_id), record_pos)
            set_location(old.parent.parent, "db", ledger_id, entry_id, (new_id, pos))
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
    return found, whole.totals, new_id


def _keys(findings) -> list[tuple]:
    return [(f.category.value, f.ledger_id, f.entries, f.entry_log) for f in findings]


def test_records_moved_by_compaction_after_the_confirmation_opened_its_index_are_judged_where_they_went(tmp_path):
    bookie, layout, old, records, ledger = _generated(tmp_path)
    entry, pos = next((e, p) for other, e, p in records if other == ledger)
    xor_byte(old, pos + 32 + 20 + 10, 0xA5)  # a corrupt payload: the walk finds it, the confirmation re-reads it
    found, _, new_id = _pass_while_compacting(tmp_path, bookie, layout, old, records)
    assert _keys(found) == [("corrupt_entry", ledger, ((entry, entry),), new_id)]


def test_entries_the_journal_holds_are_counted_once_when_their_ledger_is_judged_again(tmp_path):
    """A ledger judged once more after compaction: what the first judgement counted as on its way from the journal
    is counted anew, not twice."""
    bookie, layout, old, records, ledger = _generated(tmp_path)
    (on_its_way, _), (corrupt, pos) = [(e, p) for other, e, p in records if other == ledger][:2]
    xor_byte(old, pos + 32 + 20 + 10, 0xA5)
    beyond = old.stat().st_size + 4096
    # the index points past the log's end: the entry logger's buffer, not yet written (the journal holds it)
    set_location(old.parent.parent, "db", ledger, on_its_way, (int(old.stem, 16), beyond))
    journal_holds(bookie.bookie_conf.parent / "bookie", layout, {(ledger, on_its_way)})
    found, totals, new_id = _pass_while_compacting(tmp_path, bookie, layout, old, records,
                                                   {(ledger, on_its_way): beyond})
    assert _keys(found) == [("corrupt_entry", ledger, ((corrupt, corrupt),), new_id)]
    assert totals.journaled == 1
