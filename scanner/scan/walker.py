"""The record walker: one entry log walked front to back, every record's digest verified, and the index's
locations into the log matched against the records the walk meets.

This is the walker in Python, record by record: the reference for what a walk finds. The framing (what a
record is, what damage stops a walk) is the entry log's own (:meth:`EntryLog.records`); here each record
is matched with the index and verified.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

from scanner.storage.entry import DigestVerifier
from scanner.storage.entrylog import LENGTH_PREFIX, PACE_INTERVAL, EntryLog

_NO_MORE = 1 << 64  # past every location pos


class ExpectedRecords(NamedTuple):
    """The index's locations into one log below ``end``, ascending by ``pos``: parallel sequences (``array('Q')``).

    A walk takes them as consecutive windows, so a log's locations need not be in memory at once.
    """

    pos: Sequence[int]
    ledger_ids: Sequence[int]
    entry_ids: Sequence[int]
    end: int = _NO_MORE


class DigestFailure(NamedTuple):
    ledger_id: int
    entry_id: int
    pos: int
    reason: str
    indexed: bool = False  # the index points at this very record (else a stale copy compaction left behind)


class IndexedRecordFault(NamedTuple):
    """A location the index holds that the walk did not find to be a record of that entry."""

    pos: int
    ledger_id: int
    entry_id: int
    lost: bool  # True: no record there (gone, cut, unreadable, not a record boundary); False: another entry's
    reason: str
    found_ledger_id: int | None = None  # whose record the walk found there instead, when it found one


class WalkStats:
    """Counters of one walk, true at every pace call and when the walk ends or is left."""

    __slots__ = ("entries_verified", "entries_skipped", "entries_failed", "bytes_scanned", "ledger_bytes")

    def __init__(self):
        self.entries_verified = 0
        self.entries_skipped = 0  # records of ledgers without a verifier (unknown to the metadata)
        self.entries_failed = 0
        self.bytes_scanned = 0
        self.ledger_bytes: dict[int, int] = {}  # ledger id -> bytes of its records walked, length prefixes included

    @property
    def ledgers_seen(self):
        return self.ledger_bytes.keys()


VerifierFor = Callable[[int], "DigestVerifier | None"]


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
                self._window, self._j = next(self._windows, None) or ExpectedRecords((), (), ()), 0
            else:
                expected = window.pos[j]
                if expected < pos:
                    self._fault(expected, j, True, f"location pos {expected} is not the start of a record")
                elif window.ledger_ids[j] == ledger_id and window.entry_ids[j] == entry_id:
                    indexed = True
                else:
                    self._fault(pos, j, False, f"the record at pos {pos} is ledger {ledger_id} entry {entry_id}",
                                ledger_id)
                self._j = j + 1
            window, j = self._window, self._j
            self._next = window.pos[j] if j < len(window.pos) else window.end
        return indexed

    def unreached(self, reason: str) -> None:
        """Every location not matched yet lies beyond where the walk ended."""
        window, first = self._window, self._j
        for window in [window, *self._windows]:
            for k in range(first, len(window.pos)):
                self.faults.append(IndexedRecordFault(window.pos[k], window.ledger_ids[k], window.entry_ids[k],
                                                      True, reason))
            first = 0
        self._window, self._j = ExpectedRecords((), (), ()), 0

    def _fault(self, pos: int, j: int, lost: bool, reason: str, found: int | None = None) -> None:
        window = self._window
        self.faults.append(IndexedRecordFault(pos, window.ledger_ids[j], window.entry_ids[j], lost, reason, found))


class PythonWalk:
    """One walk of one entry log, in Python (the reference).

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

    @property
    def index_faults(self) -> list[IndexedRecordFault]:
        return self._join.faults

    def failures(self, pace: Callable[[int], object] | None = None,
                 pace_interval: int = PACE_INTERVAL) -> Iterator[DigestFailure]:
        """Walk, and yield the records whose digest fails. ``pace(nbytes)`` as :meth:`EntryLog.records` calls it."""
        entry_log, stats = self.entry_log, self.stats
        if entry_log.header is None:
            self._join.unreached("the log has no readable header")
            return
        first = entry_log.header.data_start if self._start is None else self._start
        walked_to = first
        verifiers: dict[int, DigestVerifier | None] = {}
        try:
            for record in entry_log.records(self._start, self._counted(pace), pace_interval, reuse_buffer=True):
                ledger_id, entry, pos = record.ledger_id, record.entry, record.pos
                walked_to = pos + len(entry)
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
            self._join.unreached(why_unreached(entry_log, entry_log.valid_end))
        finally:  # also when the consumer stops early: the counters stay true
            stats.bytes_scanned = max(stats.bytes_scanned, walked_to - first)

    def _counted(self, pace: Callable[[int], object] | None) -> Callable[[int], object]:
        def counted(n: int) -> None:
            self.stats.bytes_scanned += n
            if pace is not None:
                pace(n)

        return counted


def failure_reason(verifier: DigestVerifier, length: int) -> str:
    if length < verifier.min_length:
        return (f"entry of {length} bytes is shorter than its header and "
                f"{verifier.digest_type.name} digest ({verifier.min_length})")
    return f"{verifier.digest_type.name} digest mismatch"


def why_unreached(entry_log: EntryLog, valid_end: int) -> str:
    """Why the index's locations from ``valid_end`` on were not met: the damage the walk stopped at, or the end."""
    later = [p for p in entry_log.problems if p.offset is not None and p.offset >= valid_end - LENGTH_PREFIX]
    if later:
        return f"the walk of the log stopped at offset {valid_end}: {later[0].detail}"
    return f"past the end of the log's records at offset {valid_end}"


def walk_records(entry_log: EntryLog, verifier_for: VerifierFor, expected: Iterable[ExpectedRecords] = (),
                 start: int | None = None) -> PythonWalk:
    """A walk of ``entry_log``'s records from the record boundary ``start`` (None: its first record)."""
    return PythonWalk(entry_log, verifier_for, expected, start)
