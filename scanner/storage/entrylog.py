"""Entry log files (``<hex id>.log``): the header, the size-prefixed records, the ledgers map.

Reads files written by DefaultEntryLogger and by DirectEntryLogger (4 KiB header block, a dummy
record at 1024, ``0xF0`` padding up to the next 4 KiB block after every flush). The file is read
with ``pread`` in chunks that leave the bookie's page cache as they found it
(:mod:`scanner.storage.pagecache`); records are memoryview slices of a chunk, so nothing is copied
per record and memory does not grow with the size of the file. Not mapping the file also means a
log truncated or failing under the walk is an error to report, never a SIGBUS.

Damage met while walking the records or reading the ledgers map is never raised: it becomes a
typed :class:`EntryLogError` in :attr:`EntryLog.problems`. The walk stops at damage that breaks
the framing (a length it cannot trust) and steps over a record whose framing is intact but whose
header is implausible. Only :meth:`EntryLog.read_entry` raises, because its caller asked for one
particular entry.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

from crc32c import crc32c

from scanner.storage.entry import DigestType, DigestVerifier, METADATA_LENGTH
from scanner.storage.pagecache import CHUNK_SIZE, PageCacheGuest

FINGERPRINT = b"BKLO"
LEGACY_HEADER_SIZE = 1024
DIRECT_BLOCK_SIZE = 4096
DIRECT_DUMMY_LENGTH = DIRECT_BLOCK_SIZE - LEGACY_HEADER_SIZE - 4
PADDING_BYTE = 0xF0
INVALID_LEDGER_ID = -1
LEDGERS_MAP_ENTRY_ID = -2
LEDGERS_MAP_BATCH_HEADER = 20  # ledgerId, entryId, count (the length prefix excluded)
LEDGERS_MAP_ITEM = 16
LEDGERS_MAP_MAX_BATCH = 10000
# BookKeeper's default nettyMaxFrameSizeBytes (5 MiB) minus 500: the largest entry a bookie accepts.
DEFAULT_MAX_ENTRY_SIZE = 5 * 1024 * 1024 - 500
# The bookie's own floor for a record read by location: ledgerId + entryId.
MIN_RECORD_LENGTH = 16
PACE_INTERVAL = 1 << 20
# How often the walk lets go of the page-cache pages it fetched and has walked past.
RELEASE_INTERVAL = 32 << 20
_NO_MORE = 1 << 64  # past every location pos
_CRC32C_DIGEST = struct.Struct(">I")
_INLINE_CRC32C = object()

_HEADER = struct.Struct(">4siqi")
_LENGTH = struct.Struct(">i")
_RECORD_START = struct.Struct(">iqq")  # length prefix, ledgerId, entryId
_DUMMY = struct.Struct(">iq")
_BATCH_HEADER = struct.Struct(">iqqi")
_BATCH_ITEM = struct.Struct(">qq")


# --- errors ----------------------------------------------------------------------------------


class EntryLogError(Exception):
    """Damage in (or absence of) an entry log; names the file, the offset and what was expected.

    ``offset`` is a file offset: for record errors the offset of the record's 4-byte length
    prefix (the location ``pos`` is ``offset + 4``); ``None`` when the file itself is the problem.
    """

    def __init__(self, path, entry_log_id: int, offset: int | None, detail: str):
        self.path = str(path)
        self.entry_log_id = entry_log_id
        self.offset = offset
        self.detail = detail
        where = "" if offset is None else f" at offset {offset}"
        super().__init__(f"{self.path} (entry log {entry_log_id}){where}: {detail}")


class MissingEntryLog(EntryLogError):
    """The file is gone (garbage collection deletes logs at any time)."""


class UnreadableEntryLog(EntryLogError):
    """The file exists but cannot be opened or mapped."""


class BadHeader(EntryLogError):
    """The first 20 bytes are not an entry log header (fingerprint or version)."""


class BrokenLedgersMap(EntryLogError):
    """The ledgers map the header announces is missing, cut, malformed or does not add up."""


class InvalidRecordLength(EntryLogError):
    """A length prefix that cannot be a record: too small, negative outside padding, or insane."""

    def __init__(self, path, entry_log_id: int, offset: int, length: int, detail: str):
        self.length = length
        super().__init__(path, entry_log_id, offset, f"record length {length}: {detail}")


class UnexpectedPadding(EntryLogError):
    """A negative length (padding) in a file that is not a DirectEntryLogger file."""


class UnexpectedZeroFill(EntryLogError):
    """Zeros where records must continue: before the ledgers map of a finished log."""


class RecordPastEnd(EntryLogError):
    """A record whose length runs past the end of the data region (into the ledgers map).

    ``ledger_id``/``entry_id`` come from the record's header when those 16 bytes are readable,
    else ``None``.
    """

    def __init__(self, path, entry_log_id: int, offset: int, length: int, end: int,
                 ledger_id: int | None, entry_id: int | None, detail: str | None = None):
        self.length = length
        self.end = end
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        header = "header unreadable" if ledger_id is None else f"ledger {ledger_id} entry {entry_id}"
        what = detail or f"ends at {offset + 4 + length}, past the end of the record region at {end}"
        super().__init__(path, entry_log_id, offset, f"record ({header}) of length {length} {what}")


class TruncatedRecord(RecordPastEnd):
    """A record cut by the end of the file (a torn write, or a truncated file)."""

    def __init__(self, path, entry_log_id: int, offset: int, length: int | None, end: int,
                 ledger_id: int | None, entry_id: int | None):
        if length is None:
            detail = f"is cut: only {end - offset} of its 4 length bytes are in the file (size {end})"
            length = -1
        else:
            detail = f"is cut by the end of the file: {end - offset - 4} of {length} bytes present (size {end})"
        super().__init__(path, entry_log_id, offset, length, end, ledger_id, entry_id, detail)


class BadRecordHeader(EntryLogError):
    """A record with intact framing but an impossible header (negative ids, shorter than 32 bytes)."""

    def __init__(self, path, entry_log_id: int, offset: int, ledger_id: int, entry_id: int, detail: str):
        self.ledger_id = ledger_id
        self.entry_id = entry_id
        super().__init__(path, entry_log_id, offset, f"record of ledger {ledger_id} entry {entry_id}: {detail}")


class MissingEntry(EntryLogError):
    """A location that points outside the records of the file (before the data or past its end)."""


class WrongEntry(EntryLogError):
    """The record at a location belongs to another (ledger, entry) than the index says."""

    def __init__(self, path, entry_log_id: int, offset: int, expected: tuple[int, int], found: tuple[int, int]):
        self.expected_ledger_id, self.expected_entry_id = expected
        self.found_ledger_id, self.found_entry_id = found
        super().__init__(path, entry_log_id, offset,
                         f"expected ledger {expected[0]} entry {expected[1]}, "
                         f"found ledger {found[0]} entry {found[1]}")


# --- data ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntryLogHeader:
    version: int
    ledgers_map_offset: int
    ledgers_count: int
    direct: bool  # written by DirectEntryLogger (dummy record at 1024, data from 4096, 0xF0 padding)
    data_start: int  # offset of the first record's length prefix: 1024, or 4096 for direct files


class Record(NamedTuple):
    """One data record: ``pos`` is its location pos (first entry byte), ``entry`` the stored entry."""

    pos: int
    ledger_id: int
    entry_id: int
    entry: memoryview


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


class ExpectedRecords(NamedTuple):
    """The index's locations into one log below ``end``, ascending by ``pos``: parallel sequences (``array('Q')``).

    A walk takes them as consecutive windows, so a log's locations need not be in memory at once.
    """

    pos: Sequence[int]
    ledger_ids: Sequence[int]
    entry_ids: Sequence[int]
    end: int = _NO_MORE


class WalkStats:
    """Counters of the latest walk, kept current at every pace call and when the walk ends or is left.

    The entry counters and ``ledger_bytes`` are filled by :meth:`EntryLog.verify_records` only.
    """

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


# --- the reader ------------------------------------------------------------------------------


class EntryLog:
    """A read-only view of one entry log file; use as a context manager.

    The size is taken once when the file is opened: bytes appended later are not seen.
    """

    def __init__(self, path, entry_log_id: int, max_entry_size: int = DEFAULT_MAX_ENTRY_SIZE):
        self.path = str(path)
        self.entry_log_id = entry_log_id
        self.max_entry_size = max_entry_size
        self.problems: list[EntryLogError] = []
        self.stats = WalkStats()
        self.index_faults: list[IndexedRecordFault] = []  # of the latest walk given ``expected``
        self.valid_end: int | None = None  # where the last complete walk found the end of valid data
        self._reported: set[tuple[type, int | None]] = set()
        self._ledgers_map: dict[int, int] | None = None
        self._ledgers_map_read = False
        self._fd = _open_read_only(self.path, entry_log_id)
        self._guest = PageCacheGuest(self._fd)  # every read, header and map too: what it fetched goes on close
        try:
            self.size = os.fstat(self._fd).st_size
            self.header = self._read_header()
        except BaseException:
            self.close()
            raise
        self._records_end = self._find_records_end()

    def close(self) -> None:
        if self._fd >= 0:
            self._guest.release_all()
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "EntryLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def changed_since_open(self) -> bool:
        """Whether the file shrank, or its path now names another file, since it was opened."""
        try:
            now = os.stat(self.path)
            opened = os.fstat(self._fd)
        except OSError:
            return False  # deleted: the open file is unchanged, garbage collection only unlinks
        return opened.st_size < self.size or (now.st_ino, now.st_dev) != (opened.st_ino, opened.st_dev)

    def _pread(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset``: fewer when the file ends (or shrank) before."""
        try:
            return bytes(self._guest.read(offset, length))
        except OSError as exc:
            raise UnreadableEntryLog(self.path, self.entry_log_id, offset,
                                     f"read of {length} bytes failed: {exc.strerror}") from exc

    # --- header and ledgers map ---

    def _read_header(self) -> EntryLogHeader | None:
        head = self._pread(0, _HEADER.size)
        if len(head) < _HEADER.size:
            return None  # preallocated or not yet flushed: nothing to judge
        fingerprint, version, map_offset, count = _HEADER.unpack(head)
        if fingerprint != FINGERPRINT:
            self._report(BadHeader(self.path, self.entry_log_id, 0,
                                   f"fingerprint {fingerprint!r}, expected {FINGERPRINT!r}"))
            return None
        if version not in (0, 1):
            self._report(BadHeader(self.path, self.entry_log_id, 4, f"header version {version}, expected 0 or 1"))
        dummy = self._pread(LEGACY_HEADER_SIZE, _DUMMY.size)
        direct = len(dummy) == _DUMMY.size and _DUMMY.unpack(dummy) == (DIRECT_DUMMY_LENGTH, INVALID_LEDGER_ID)
        data_start = DIRECT_BLOCK_SIZE if direct else LEGACY_HEADER_SIZE
        return EntryLogHeader(version, map_offset, count, direct, data_start)

    @property
    def header_has_map(self) -> bool:
        """The header announces a ledgers map (the log was finished), whether or not the map reads."""
        return self.header is not None and self.header.version >= 1 and self.header.ledgers_map_offset != 0

    def _find_records_end(self) -> int:
        if not self.header_has_map:
            return self.size
        offset = self.header.ledgers_map_offset
        if self.header.data_start <= offset <= self.size:
            return offset
        self._report(BrokenLedgersMap(self.path, self.entry_log_id, 8,
                                      f"ledgers map offset {offset} lies outside the data region "
                                      f"[{self.header.data_start}, {self.size}]"))
        return self.size

    def ledgers_map(self) -> dict[int, int] | None:
        """Ledger id -> bytes of its records (length prefixes included), from the map at the end of the log.

        ``None`` when the log has no map (the current log, or the last one before a restart) or
        when the map is broken; the damage then goes to :attr:`problems`.
        """
        if not self._ledgers_map_read:
            self._ledgers_map = self._read_ledgers_map()
            self._ledgers_map_read = True
        return self._ledgers_map

    def _read_ledgers_map(self) -> dict[int, int] | None:
        if not self.header_has_map or self._records_end != self.header.ledgers_map_offset:
            return None  # no map, or an offset already reported as broken when the file was opened
        size = self.size
        max_batch = LEDGERS_MAP_BATCH_HEADER + LEDGERS_MAP_ITEM * LEDGERS_MAP_MAX_BATCH
        sizes: dict[int, int] = {}
        listed = 0
        offset = self.header.ledgers_map_offset
        while offset + 4 <= size:
            (length,) = _LENGTH.unpack(self._pread(offset, 4).ljust(4, b"\0"))
            if length <= 0:
                break  # zero fill, or DirectEntryLogger padding after the map
            if length < LEDGERS_MAP_BATCH_HEADER or length > max_batch:
                return self._broken_map(offset, f"batch length {length}, expected 20 + 16*n with n <= 10000")
            if offset + 4 + length > size:
                return self._broken_map(offset, f"batch of length {length} runs past the end of the file ({size})")
            batch = self._pread(offset, 4 + length)
            if len(batch) < 4 + length:
                return self._broken_map(offset, f"batch of length {length} is cut: the file now ends at "
                                                f"{offset + len(batch)}")
            _, ledger_id, entry_id, count = _BATCH_HEADER.unpack_from(batch, 0)
            if (ledger_id, entry_id) != (INVALID_LEDGER_ID, LEDGERS_MAP_ENTRY_ID):
                return self._broken_map(offset, f"batch header ledger {ledger_id} entry {entry_id}, "
                                                f"expected ledger -1 entry -2")
            if LEDGERS_MAP_BATCH_HEADER + LEDGERS_MAP_ITEM * count != length:
                return self._broken_map(offset, f"batch lists {count} ledgers but its length is {length}")
            for ledger_id, ledger_bytes in _BATCH_ITEM.iter_unpack(memoryview(batch)[24:]):
                sizes[ledger_id] = sizes.get(ledger_id, 0) + ledger_bytes
            listed += count
            offset += 4 + length
        else:
            if offset < size:
                return self._broken_map(offset, f"{size - offset} stray bytes after the last batch")
        if listed != self.header.ledgers_count:
            return self._broken_map(self.header.ledgers_map_offset,
                                    f"batches list {listed} ledgers, the header says {self.header.ledgers_count}")
        return sizes

    def _broken_map(self, offset: int, detail: str) -> None:
        self._report(BrokenLedgersMap(self.path, self.entry_log_id, offset, f"ledgers map: {detail}"))
        return None

    # --- walking the records ---

    def records(self, start: int | None = None, pace: Callable[[int], object] | None = None) -> Iterator[Record]:
        """Every data record from ``start`` (offset of a length prefix; default the first record).

        Stops at the ledgers map, at zero fill (end of valid data) or at damage, which goes to
        :attr:`problems`. ``pace(nbytes)`` is called about every MiB walked and at the end.
        """
        return self._walk(self._start(start), pace, None, ())

    def verify_records(self, verifier_for: Callable[[int], DigestVerifier | None], start: int | None = None,
                       pace: Callable[[int], object] | None = None,
                       expected: Iterable[ExpectedRecords] = (),
                       pace_interval: int = PACE_INTERVAL) -> Iterator[DigestFailure]:
        """Walk as :meth:`records` does, verify each entry's digest, and yield only the failures.

        ``verifier_for(ledger_id)`` is asked once per ledger per walk; ``None`` means "unknown
        ledger": its records are counted in ``stats.entries_skipped``. With ``expected`` (the index's
        locations into this log from ``start`` on), each is matched against the record the walk finds
        there; what does not match goes to :attr:`index_faults`, complete once the walk has ended.
        """
        return self._walk(self._start(start), pace, verifier_for, expected, pace_interval)

    def _start(self, start: int | None) -> int | None:
        if start is not None and start < LEGACY_HEADER_SIZE:
            raise ValueError(f"start {start} lies inside the entry log header")
        if self.header is None:
            return None
        return self.header.data_start if start is None else start

    def _walk(self, start, pace, verifier_for, expected: Iterable[ExpectedRecords],
              pace_interval: int = PACE_INTERVAL) -> Iterator:
        self.stats = stats = WalkStats()
        self.valid_end = None
        self.index_faults = index_faults = []
        windows = iter(expected)
        if start is None:
            self._unreached(windows, None, 0, "the log has no readable header")
            return
        # Everything the loop touches is bound to locals: this is the scanner's hot path.
        end = self._records_end
        max_length = self.max_entry_size
        min_length = METADATA_LENGTH
        unpack_start = _RECORD_START.unpack_from
        unpack_crc = _CRC32C_DIGEST.unpack_from
        verifying = verifier_for is not None
        verifiers: dict[int, DigestVerifier | None] = {}
        checks: dict[int, Callable[[memoryview], bool] | None] = {}
        ledger_bytes = stats.ledger_bytes
        window = ExpectedRecords((), (), (), 0)
        exp_pos, exp_ledgers, exp_entries, window_end = window
        exp_count = j = 0
        next_exp = window_end
        verified = skipped = failed = 0
        run_ledger, run_bytes, check = -1, 0, None  # the ledger of the current run of records, its bytes so far
        pos = paced = start
        next_stop = start + pace_interval
        next_release = start + RELEASE_INTERVAL
        guest = self._guest
        chunk_base, chunk = start, memoryview(b"")
        chunk_length = 0
        try:
            while True:
                if pos >= next_stop:
                    stats.entries_verified, stats.entries_skipped, stats.entries_failed = verified, skipped, failed
                    stats.bytes_scanned = pos - start
                    if run_bytes:
                        ledger_bytes[run_ledger] = ledger_bytes.get(run_ledger, 0) + run_bytes
                        run_bytes = 0
                    if pace is not None:
                        pace(pos - paced)
                    paced = pos
                    if pos >= next_release:
                        guest.release(pos)
                        next_release = pos + RELEASE_INTERVAL
                    next_stop = pos + pace_interval
                at = pos - chunk_base
                body = pos + 4
                if at + 20 <= chunk_length:
                    length, ledger_id, entry_id = unpack_start(chunk, at)
                    following = body + length
                    if min_length <= length <= max_length and following <= end and ledger_id >= 0 and entry_id >= 0:
                        if following - chunk_base > chunk_length:
                            chunk_base, chunk = pos, self._chunk(guest, pos, max(CHUNK_SIZE, following - pos), end)
                            chunk_length = len(chunk)
                            if following - chunk_base > chunk_length:
                                following = self._irregular_record(pos, end)  # the file shrank under us
                                if following is None:
                                    break
                                pos = following
                            continue
                        indexed = False
                        while body >= next_exp:
                            if j >= exp_count:  # this window is done: the next one
                                window = next(windows, None) or ExpectedRecords((), (), ())
                                exp_pos, exp_ledgers, exp_entries, window_end = window
                                exp_count, j = len(exp_pos), 0
                            elif next_exp < body:  # the index points inside the previous record
                                index_faults.append(IndexedRecordFault(
                                    next_exp, exp_ledgers[j], exp_entries[j], True,
                                    f"location pos {next_exp} is not the start of a record"))
                                j += 1
                            elif exp_ledgers[j] == ledger_id and exp_entries[j] == entry_id:
                                indexed = True
                                j += 1
                            else:
                                index_faults.append(IndexedRecordFault(
                                    body, exp_ledgers[j], exp_entries[j], False,
                                    f"the record at pos {body} is ledger {ledger_id} entry {entry_id}", ledger_id))
                                j += 1
                            next_exp = exp_pos[j] if j < exp_count else window_end
                        pos = following
                        if verifying:
                            if ledger_id != run_ledger:  # records of one ledger mostly come in runs
                                if run_bytes:
                                    ledger_bytes[run_ledger] = ledger_bytes.get(run_ledger, 0) + run_bytes
                                run_ledger, run_bytes = ledger_id, 0
                                check = checks.get(ledger_id, False)
                                if check is False:
                                    verifier = verifiers[ledger_id] = verifier_for(ledger_id)
                                    check = checks[ledger_id] = _check_of(verifier)
                            run_bytes += length + 4
                            if check is None:
                                skipped += 1
                            elif check is _INLINE_CRC32C:  # most ledgers: the digest is computed right here
                                if length >= 36 and crc32c(chunk[at + 40:following - chunk_base],
                                                           crc32c(chunk[at + 4:at + 36])) == unpack_crc(chunk, at + 36)[0]:
                                    verified += 1
                                else:
                                    failed += 1
                                    reason = _failure_reason(verifiers[ledger_id], length)
                                    yield DigestFailure(ledger_id, entry_id, body, reason, indexed)
                            elif check(chunk[at + 4:following - chunk_base]):
                                verified += 1
                            else:
                                failed += 1
                                reason = _failure_reason(verifiers[ledger_id], length)
                                yield DigestFailure(ledger_id, entry_id, body, reason, indexed)
                        else:
                            yield Record(body, ledger_id, entry_id, chunk[at + 4:following - chunk_base])
                        continue
                elif pos + 20 <= end and chunk_base + chunk_length < end:
                    chunk_base, chunk = pos, self._chunk(guest, pos, CHUNK_SIZE, end)
                    chunk_length = len(chunk)
                    if chunk_length >= 20:
                        continue
                following = self._irregular_record(pos, end)
                if following is None:
                    break
                pos = following
            self.valid_end = pos
            if pace is not None and pos > paced:
                pace(pos - paced)
            self._unreached(windows, window, j, self._why_unreached(pos))
        finally:  # also when the consumer stops early: the counters stay true
            stats.entries_verified, stats.entries_skipped, stats.entries_failed = verified, skipped, failed
            stats.bytes_scanned = pos - start
            if run_bytes:
                ledger_bytes[run_ledger] = ledger_bytes.get(run_ledger, 0) + run_bytes
            guest.release_all()

    def _chunk(self, guest: PageCacheGuest, pos: int, length: int, end: int) -> memoryview:
        try:
            return guest.read(pos, min(length, end - pos), ahead=True)
        except OSError as exc:
            self._report(UnreadableEntryLog(self.path, self.entry_log_id, pos,
                                            f"read of {min(length, end - pos)} bytes failed: {exc.strerror}"))
            return memoryview(b"")

    def _why_unreached(self, valid_end: int) -> str:
        later = [p for p in self.problems if p.offset is not None and p.offset >= valid_end - 4]
        if later:
            return f"the walk of the log stopped at offset {valid_end}: {later[0].detail}"
        return f"past the end of the log's records at offset {valid_end}"

    def _unreached(self, windows: Iterator[ExpectedRecords], current: ExpectedRecords | None, first: int,
                   reason: str) -> None:
        """Every expected record from ``current[first]`` on is beyond where the walk ended."""
        for window in ([current] if current is not None else []) + list(windows):
            for k in range(first, len(window.pos)):
                self.index_faults.append(IndexedRecordFault(window.pos[k], window.ledger_ids[k],
                                                            window.entry_ids[k], True, reason))
            first = 0

    def _irregular_record(self, pos: int, end: int) -> int | None:
        """Judge what the fast path rejected: where the walk goes on, or ``None`` to stop."""
        header = self.header
        if pos >= end:
            return None
        try:
            head = self._pread(pos, 20)
        except UnreadableEntryLog as error:
            self._report(error)
            return None
        size = min(self.size, pos + len(head)) if len(head) < 20 else self.size  # the file may have shrunk
        if len(head) < 4:
            if not (header.direct and head[:1] == bytes([PADDING_BYTE])):
                self._report(TruncatedRecord(self.path, self.entry_log_id, pos, None, size, None, None))
            return None
        (length,) = _LENGTH.unpack_from(head, 0)
        if length == 0:
            if end != self.size:
                self._report(UnexpectedZeroFill(self.path, self.entry_log_id, pos,
                                                f"zeros where records must continue up to the ledgers map at {end}"))
            return None  # zero fill: the end of valid data
        if length < 0:
            if header.direct and head[0] == PADDING_BYTE and pos % DIRECT_BLOCK_SIZE:
                return min(pos - pos % DIRECT_BLOCK_SIZE + DIRECT_BLOCK_SIZE, end)
            if header.direct:
                self._report(InvalidRecordLength(self.path, self.entry_log_id, pos, length,
                                                 "negative, and not 0xF0 padding inside a 4096-byte block"))
            else:
                self._report(UnexpectedPadding(self.path, self.entry_log_id, pos,
                                               f"negative length {length} (padding) in a file without "
                                               f"DirectEntryLogger's header block"))
            return None
        if length > self.max_entry_size:
            self._report(InvalidRecordLength(self.path, self.entry_log_id, pos, length,
                                             f"larger than the largest entry a bookie accepts ({self.max_entry_size})"))
            return None
        ids = _RECORD_START.unpack_from(head, 0)[1:] if len(head) >= 20 else (None, None)
        if pos + 4 + length > min(end, size) or (len(head) < 20 and pos + 20 <= end):
            if end == self.size or size < self.size:
                self._report(TruncatedRecord(self.path, self.entry_log_id, pos, length, size, *ids))
            else:
                self._report(RecordPastEnd(self.path, self.entry_log_id, pos, length, end, *ids))
            return None
        if length < MIN_RECORD_LENGTH:
            self._report(InvalidRecordLength(self.path, self.entry_log_id, pos, length,
                                             f"expected at least {MIN_RECORD_LENGTH} (ledgerId + entryId)"))
            return None
        ledger_id, entry_id = ids
        if ledger_id == INVALID_LEDGER_ID:
            return pos + 4 + length  # a ledgers-map batch or DirectEntryLogger's dummy record
        if ledger_id < 0 or entry_id < 0:
            detail = "negative ids never reach an entry log"
        else:
            detail = f"length {length} is shorter than the {METADATA_LENGTH}-byte entry header"
        self._report(BadRecordHeader(self.path, self.entry_log_id, pos, ledger_id, entry_id, detail))
        return pos + 4 + length  # the framing is intact: step over it

    # --- reading one entry by location ---

    def read_entry(self, pos: int, ledger_id: int, entry_id: int) -> memoryview:
        """The stored entry at location ``pos``, checked to be (``ledger_id``, ``entry_id``).

        Raises :class:`MissingEntry`, :class:`InvalidRecordLength`, :class:`WrongEntry`,
        :class:`TruncatedRecord` or :class:`UnreadableEntryLog` (all :class:`EntryLogError`).
        """
        prefix = pos - 4
        if prefix < LEGACY_HEADER_SIZE:
            raise MissingEntry(self.path, self.entry_log_id, prefix,
                               f"location pos {pos} (ledger {ledger_id} entry {entry_id}) lies inside the "
                               f"file header; records start at {LEGACY_HEADER_SIZE}")
        head = self._pread(prefix, 20) if prefix + 20 <= self.size else b""
        if len(head) < 20:
            raise MissingEntry(self.path, self.entry_log_id, prefix,
                               f"location pos {pos} (ledger {ledger_id} entry {entry_id}): its length prefix "
                               f"and ids need bytes {prefix}..{prefix + 20}, past the end of the file ({self.size})")
        length, found_ledger, found_entry = _RECORD_START.unpack(head)
        if length < MIN_RECORD_LENGTH or length > self.max_entry_size:
            raise InvalidRecordLength(self.path, self.entry_log_id, prefix, length,
                                      f"expected {MIN_RECORD_LENGTH}..{self.max_entry_size} for ledger "
                                      f"{ledger_id} entry {entry_id}")
        if (found_ledger, found_entry) != (ledger_id, entry_id):
            raise WrongEntry(self.path, self.entry_log_id, prefix, (ledger_id, entry_id), (found_ledger, found_entry))
        entry = self._pread(pos, length) if pos + length <= self.size else b""
        if len(entry) < length:
            raise TruncatedRecord(self.path, self.entry_log_id, prefix, length, min(self.size, pos + len(entry)),
                                  ledger_id, entry_id)
        return memoryview(entry)

    def _report(self, error: EntryLogError) -> None:
        key = (type(error), error.offset)
        if key not in self._reported:
            self._reported.add(key)
            self.problems.append(error)


def _check_of(verifier: DigestVerifier | None):
    """How the walk checks a ledger's records: not at all, inline (CRC32C), or through the verifier."""
    if verifier is None:
        return None
    plain = type(verifier) is DigestVerifier  # not a wrapper that must see every entry itself
    return _INLINE_CRC32C if plain and verifier.digest_type is DigestType.CRC32C else verifier.verify


def _failure_reason(verifier: DigestVerifier, length: int) -> str:
    if length < verifier.min_length:
        return (f"entry of {length} bytes is shorter than its header and "
                f"{verifier.digest_type.name} digest ({verifier.min_length})")
    return f"{verifier.digest_type.name} digest mismatch"


def _open_read_only(path: str, entry_log_id: int) -> int:
    try:
        try:
            # O_NOATIME: reading must not even touch the bookie's file metadata (allowed to the owner or root).
            return os.open(path, os.O_RDONLY | os.O_NOATIME | os.O_CLOEXEC)
        except PermissionError:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise MissingEntryLog(path, entry_log_id, None,
                              "the file does not exist (deleted by garbage collection?)") from exc
    except OSError as exc:
        raise UnreadableEntryLog(path, entry_log_id, None, f"cannot open the file: {exc.strerror}") from exc
