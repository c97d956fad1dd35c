"""What goes into a walk of one entry log (the index's locations) and what comes out of it (digest failures,
index faults, counters), the same whichever walker walks."""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

from scanner.storage.entry import DigestVerifier
from scanner.storage.entrylog import LENGTH_PREFIX, EntryLog, ledgers_map_of

NO_MORE = 1 << 64  # past every location pos


class ExpectedRecords(NamedTuple):
    """The index's locations into one log below ``end``, ascending by ``pos``: parallel sequences (``array('Q')``).

    A walk takes them as consecutive windows, so a log's locations need not be in memory at once.
    """

    pos: Sequence[int]
    ledger_ids: Sequence[int]
    entry_ids: Sequence[int]
    end: int = NO_MORE


NO_WINDOW = ExpectedRecords((), (), ())


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


class WalkedRecord(NamedTuple):
    """A record a walk met: its location ``pos`` (the entry's first byte), ids and length as its prefix says."""

    pos: int
    ledger_id: int
    entry_id: int
    length: int


class WalkStats:
    """Counters of one walk, true at every pace call and when the walk ends or is left."""

    __slots__ = ("entries_verified", "entries_skipped", "entries_failed", "bytes_scanned", "_ledger_bytes", "_tally")

    def __init__(self):
        self.entries_verified = 0
        self.entries_skipped = 0  # records of ledgers without a verifier (unknown to the metadata)
        self.entries_failed = 0
        self.bytes_scanned = 0
        self._ledger_bytes: dict[int, int] | None = {}
        self._tally: Callable[[], dict[int, int]] | None = None

    @property
    def ledger_bytes(self) -> dict[int, int]:
        """Ledger id -> bytes of its records walked, length prefixes included (made from the walk's tally when first
        asked for, where it has one: a pass asks only where the log's map disagrees or a ledger of note is about)."""
        if self._ledger_bytes is None:
            self._ledger_bytes = self._tally()
        return self._ledger_bytes

    def tallied_by(self, tally: Callable[[], dict[int, int]]) -> None:
        """The walk's bytes per ledger are what ``tally()`` gives, asked when they are first wanted."""
        self._ledger_bytes, self._tally = None, tally

    @property
    def ledgers_seen(self):
        return self.ledger_bytes.keys()


def map_agrees(items: bytes, stats: WalkStats) -> bool:
    """Whether a log's ledgers map (its items as stored, :meth:`EntryLog.ledgers_map_items`) says what the walk saw
    of the whole log (the reference of the walks' ``agrees_with_map``)."""
    return ledgers_map_of(items) == stats.ledger_bytes


VerifierFor = Callable[[int], "DigestVerifier | None"]


class KnownLedgers(NamedTuple):
    """The pass's ledger table, which a walk may look ledgers up in itself instead of asking ``verifier_for`` one by
    one (the native walker does): ``ids`` ascending (``array('Q')``), each one's number in ``kinds`` (``array``
    'B' or 'I'), each kind's verifier in ``verifiers``. ``verifier_for`` gives the same for every ledger of the
    table but those in ``asked`` (ascending, ``array('Q')``), which are asked of it all the same."""

    ids: Sequence[int]
    kinds: Sequence[int]
    verifiers: Sequence["DigestVerifier | None"]
    asked: Sequence[int]


def counting(stats: WalkStats, pace: Callable[[int], object] | None) -> Callable[[int], None]:
    """A pace callback that counts the bytes walked into ``stats`` and passes them on to ``pace``."""
    def counted(n: int) -> None:
        stats.bytes_scanned += n
        if pace is not None:
            pace(n)

    return counted


def not_a_record_start(pos: int, ledger_id: int, entry_id: int) -> IndexedRecordFault:
    return IndexedRecordFault(pos, ledger_id, entry_id, True, f"location pos {pos} is not the start of a record")


def another_entry(pos: int, ledger_id: int, entry_id: int, found_ledger: int, found_entry: int) -> IndexedRecordFault:
    return IndexedRecordFault(pos, ledger_id, entry_id, False,
                              f"the record at pos {pos} is ledger {found_ledger} entry {found_entry}", found_ledger)


def unreached(windows: list[ExpectedRecords], first: int, reason: str) -> list[IndexedRecordFault]:
    """Every location of ``windows`` from ``windows[0][first]`` on: beyond where the walk ended."""
    faults = []
    for window in windows:
        for k in range(first, len(window.pos)):
            faults.append(IndexedRecordFault(window.pos[k], window.ledger_ids[k], window.entry_ids[k], True, reason))
        first = 0
    return faults


def failure_reason(verifier: DigestVerifier, length: int) -> str:
    if length < verifier.min_length:
        return (f"entry of {length} bytes is shorter than its header and "
                f"{verifier.digest_type.name} digest ({verifier.min_length})")
    return f"{verifier.digest_type.name} digest mismatch"


def why_unreached(entry_log: EntryLog) -> str:
    """Why the index's locations from where the walk ended on were not met: the damage it stopped at, or the end."""
    valid_end = entry_log.valid_end
    later = [p for p in entry_log.problems if p.offset is not None and p.offset >= valid_end - LENGTH_PREFIX]
    if later:
        return f"the walk of the log stopped at offset {valid_end}: {later[0].detail}"
    return f"past the end of the log's records at offset {valid_end}"
