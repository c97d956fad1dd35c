"""The record walker in Python, record by record: the reference for what a walk finds.

The framing (what a record is, what damage stops a walk) is the entry log's own (:meth:`EntryLog.records`);
here each record is matched with the index's locations and its digest verified.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from scanner.scan.record_walk_types import (NO_WINDOW, DigestFailure, ExpectedRecords, IndexedRecordFault, VerifierFor,
                                    WalkedRecord, WalkStats, another_entry, counting, failure_reason,
                                    map_agrees, not_a_record_start, unreached, why_unreached)
from scanner.storage.entry import DigestVerifier
from scanner.storage.entrylog import LENGTH_PREFIX, PACE_INTERVAL, EntryLog


class IndexJoin:
    """The index's locations into one log, matched in order against the records a walk meets there."""

    __slots__ = ("faults", "_windows", "_window", "_j", "_next")

    def __init__(self, expected: Iterable[ExpectedRecords]):
        self.faults: list[IndexedRecordFault] = []
        self._windows = iter(expected)
        self._window = ExpectedRecords((), (), (), 0)
        self._j = 0
        self._next = 0  # the next location's pos, or the window's end once it is used up

    def match(self, pos: int, ledger_id: int, entry_id: int) -> bool:
        """Whether the index points at the record at location ``pos``; the locations passed on the way are faults."""
        indexed = False
        while pos >= self._next:
            window, j = self._window, self._j
            if j >= len(window.pos):
                self._window, self._j = next(self._windows, None) or NO_WINDOW, 0
            else:
                expected, ledger, entry = window.pos[j], window.ledger_ids[j], window.entry_ids[j]
                if expected < pos:
                    self.faults.append(not_a_record_start(expected, ledger, entry))
                elif (ledger, entry) == (ledger_id, entry_id):
                    indexed = True
                else:
                    self.faults.append(another_entry(pos, ledger, entry, ledger_id, entry_id))
                self._j = j + 1
            window, j = self._window, self._j
            self._next = window.pos[j] if j < len(window.pos) else window.end
        return indexed

    def unreached(self, reason: str) -> None:
        """Every location not matched yet lies beyond where the walk ended."""
        self.faults += unreached([self._window, *self._windows], self._j, reason)


class PythonWalk:
    """One walk of one entry log, in Python.

    ``verifier_for(ledger_id)`` is asked once per ledger; ``None`` means "unknown ledger": its records are
    counted in ``stats.entries_skipped``. ``expected``: the index's locations into this log from ``start`` on;
    what does not match goes to :attr:`index_faults`, complete once the walk has ended.
    """

    def __init__(self, entry_log: EntryLog, verifier_for: VerifierFor, expected: Iterable[ExpectedRecords] = (),
                 start: int | None = None):
        self.entry_log = entry_log
        self.stats = WalkStats()
        self._verifier_for = verifier_for
        self._join = IndexJoin(expected)
        self._start = start
        self.last_record: WalkedRecord | None = None  # the last record walked (where a broken framing began)

    @property
    def index_faults(self) -> list[IndexedRecordFault]:
        return self._join.faults

    def agrees_with_map(self, items: bytes) -> bool:
        """Whether the log's ledgers map (its items as stored) says what the walk saw (``stats.ledger_bytes``)."""
        return map_agrees(items, self.stats)

    def failures(self, pace: Callable[[int], object] | None = None,
                 pace_interval: int = PACE_INTERVAL) -> Iterator[DigestFailure]:
        """Walk, and yield the records whose digest fails. ``pace(nbytes)`` as :meth:`EntryLog.records` calls it."""
        entry_log, stats = self.entry_log, self.stats
        records = entry_log.records(self._start, counting(self.stats, pace), pace_interval, reuse_buffer=True)
        if entry_log.header is None:
            self._join.unreached("the log has no readable header")
            return
        first = entry_log.header.data_start if self._start is None else self._start
        walked_to = first
        verifiers: dict[int, DigestVerifier | None] = {}
        try:
            for record in records:
                ledger_id, entry, pos = record.ledger_id, record.entry, record.pos
                walked_to = pos + len(entry)
                self.last_record = WalkedRecord(pos, ledger_id, record.entry_id, len(entry))
                indexed = self._join.match(pos, ledger_id, record.entry_id)
                stats.ledger_bytes[ledger_id] = stats.ledger_bytes.get(ledger_id, 0) + LENGTH_PREFIX + len(entry)
                if ledger_id not in verifiers:
                    verifiers[ledger_id] = self._verifier_for(ledger_id)
                verifier = verifiers[ledger_id]
                if verifier is None:
                    stats.entries_skipped += 1
                elif verifier.verify(entry):
                    stats.entries_verified += 1
                else:
                    stats.entries_failed += 1
                    yield DigestFailure(ledger_id, record.entry_id, pos, failure_reason(verifier, len(entry)), indexed)
            self._join.unreached(why_unreached(entry_log))
        finally:  # also when the consumer stops early: the counters stay true
            stats.bytes_scanned = max(stats.bytes_scanned, walked_to - first)
