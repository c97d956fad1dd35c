"""The record walker with its per-record work in C (``scanner.native._native``): it finds what the Python walker
(:mod:`scanner.scan.record_walk_in_python`, the reference) finds, many times faster.

The C walker walks the records of one chunk at a time with the GIL released and hands back what it cannot
decide alone: pace stops, records that need more of the file, irregular records (the entry log judges them,
as for the reference), ledgers it has not met (``verifier_for`` is asked here, once per ledger), windows of
the index's locations, digest failures, and records a wrapper of a verifier must see (verified here, in Python).
"""

from __future__ import annotations

from array import array
from typing import Callable, Iterable, Iterator

from scanner.native import _native
from scanner.scan.record_walk_types import (NO_WINDOW, DigestFailure, ExpectedRecords, IndexedRecordFault, KnownLedgers,
                                    VerifierFor, WalkedRecord, WalkStats, another_entry, counting, failure_reason,
                                    map_agrees, not_a_record_start, unreached, why_unreached)
from scanner.storage.entry import DigestType, DigestVerifier
from scanner.storage.entrylog import PACE_INTERVAL, RECORD_START_SIZE, EntryLog

# The C walker's answers (scanner/native/record_walk.c, enum status).
PACE, NEED_BYTES, IRREGULAR, NEED_LEDGER, NEED_WINDOW, FAILED, PY_RECORD, FAULTS_FULL = range(8)
_IN_C = {DigestType.CRC32C: _native.CRC32C, DigestType.CRC32: _native.CRC32, DigestType.DUMMY: _native.DUMMY}
_EMPTY = array("Q")


class NativeWalk:
    """One walk of one entry log with the C walker; the same interface and results as ``PythonWalk``."""

    def __init__(self, entry_log: EntryLog, verifier_for: VerifierFor, expected: Iterable[ExpectedRecords] = (),
                 start: int | None = None, known: KnownLedgers | None = None):
        self.entry_log = entry_log
        self._known = known
        self.stats = WalkStats()
        self.index_faults: list[IndexedRecordFault] = []
        self._verifier_for = verifier_for
        self._verifiers: dict[int, DigestVerifier | None] = {}
        self._windows = iter(expected)
        self._window = NO_WINDOW  # the window the C walker matches against
        self._start = start
        self._in_python = [0, 0]  # records verified here (a verifier wrapper must see them): (verified, failed)
        self._core: _native.Walker | None = None
        self.last_record: WalkedRecord | None = None  # the last record walked (where a broken framing began)

    def failures(self, pace: Callable[[int], object] | None = None,
                 pace_interval: int = PACE_INTERVAL) -> Iterator[DigestFailure]:
        """Walk, and yield the records whose digest fails. ``pace(nbytes)`` as :meth:`EntryLog.records` calls it."""
        entry_log = self.entry_log
        cursor = entry_log.cursor(self._start, counting(self.stats, pace), pace_interval, reuse_buffer=True)
        if cursor is None:
            self.index_faults += unreached([*self._windows], 0, "the log has no readable header")
            return
        core = self._core = _native.Walker(entry_log.records_end, entry_log.max_entry_size)
        if self._known is not None:
            self._use_table(self._known)
        first = pos = cursor.pos
        need = RECORD_START_SIZE
        try:
            while True:
                if pos >= cursor.next_stop:
                    self._take_faults()
                    self._sync_counts()
                    cursor.pace_to(pos)
                span = cursor.span(pos, need)
                need = RECORD_START_SIZE
                if span is None:
                    status = IRREGULAR
                else:
                    chunk, at = span
                    status, pos, a, b, c, d, e, f = core.walk(chunk, pos - at, pos, cursor.next_stop)
                if status == IRREGULAR:
                    following = entry_log.judge_irregular(pos)
                    if following is None:
                        break
                    pos = following
                elif status == NEED_BYTES:
                    need = a
                elif status == NEED_LEDGER:
                    self._learn(a)
                elif status == NEED_WINDOW:
                    self._next_window()
                elif status == FAULTS_FULL:
                    self._take_faults()
                elif status == FAILED:
                    yield DigestFailure(a, b, c, failure_reason(self._verifier(a), d), bool(e))
                elif status == PY_RECORD:
                    verifier = self._verifier(a)
                    if verifier.verify(chunk[f:f + d]):
                        self._in_python[0] += 1
                    else:
                        self._in_python[1] += 1
                        yield DigestFailure(a, b, c, failure_reason(verifier, d), bool(e))
            self._take_faults()
            cursor.finish(pos)
            self.index_faults += unreached([self._window, *self._windows], core.counts()[3], why_unreached(entry_log))
        finally:  # also when the consumer stops early: the counters and faults stay true
            self._take_faults()
            self._sync_counts()
            self.stats.tallied_by(core.ledger_bytes)
            last = core.last_record()
            self.last_record = None if last is None else WalkedRecord(*last)
            self.stats.bytes_scanned = max(self.stats.bytes_scanned, pos - first)
            cursor.release_all()

    def agrees_with_map(self, items: bytes) -> bool:
        """Whether the log's ledgers map (its items as stored) says what the walk saw (``stats.ledger_bytes``), as
        ``PythonWalk.agrees_with_map`` answers: the C walker confirms the common case from its own tally, with no dict
        made of the map; anything it does not confirm is compared as the reference compares it."""
        return (self._core is not None and self._core.agrees_with_map(items)) or map_agrees(items, self.stats)

    def _learn(self, ledger_id: int) -> None:
        """Tell the C walker how to verify the ledger's records (asking ``verifier_for`` once)."""
        self._core.learn(ledger_id, *_method_of(self._verifier(ledger_id)))

    def _verifier(self, ledger_id: int) -> DigestVerifier | None:
        if ledger_id not in self._verifiers:
            self._verifiers[ledger_id] = self._verifier_for(ledger_id)
        return self._verifiers[ledger_id]

    def _use_table(self, known: KnownLedgers) -> None:
        """Let the C walker look up the ledgers of the pass's table itself (all but those ``verifier_for`` answers
        for otherwise)."""
        methods = [_method_of(verifier) for verifier in known.verifiers]
        self._core.use_table(known.ids, known.kinds, bytes(method for method, *_ in methods),
                             [key[0] if key else None for _, *key in methods], _column(known.asked))

    def _next_window(self) -> None:
        window = self._window = next(self._windows, None) or NO_WINDOW
        self._core.set_window(_column(window.pos), _column(window.ledger_ids), _column(window.entry_ids), window.end)

    def _take_faults(self) -> None:
        for kind, pos, ledger_id, entry_id, found_ledger, found_entry in self._core.take_index_faults():
            if kind == 0:
                self.index_faults.append(not_a_record_start(pos, ledger_id, entry_id))
            else:
                self.index_faults.append(another_entry(pos, ledger_id, entry_id, found_ledger, found_entry))

    def _sync_counts(self) -> None:
        verified, skipped, failed, _ = self._core.counts()
        stats = self.stats
        stats.entries_verified = verified + self._in_python[0]
        stats.entries_skipped = skipped
        stats.entries_failed = failed + self._in_python[1]


def _method_of(verifier: DigestVerifier | None) -> tuple:
    """How the C walker verifies a ledger with this verifier: (method,) or (HMAC, its key)."""
    if verifier is None:
        return (_native.SKIP,)
    if type(verifier) is not DigestVerifier:  # a wrapper that must see every entry itself
        return (_native.PYTHON,)
    if verifier.digest_type is DigestType.HMAC:
        return (_native.HMAC, verifier.mac_key)
    return (_IN_C[verifier.digest_type],)


def _column(values) -> array | memoryview:
    """A column of the window as the C walker takes it: a buffer of uint64."""
    if isinstance(values, (array, memoryview)) and memoryview(values).format in ("Q", "L", "K") \
            and memoryview(values).itemsize == 8:
        return values
    return array("Q", values) if len(values) else _EMPTY
