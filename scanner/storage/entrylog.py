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

import logging
import os
import struct
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

from scanner.storage.entry import METADATA_LENGTH
from scanner.storage.pagecache import CHUNK_SIZE, PageCacheGuest
from scanner.storage.read_only import open_read_only

log = logging.getLogger(__name__)

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
LENGTH_PREFIX = 4  # a record: its length (4 bytes), then the stored entry, which starts with ledgerId, entryId
RECORD_START_SIZE = LENGTH_PREFIX + 16  # the length prefix and the ids: what framing a record needs

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


class ZeroedHeader(BadHeader):
    """The header reads as zeros (its 1024 bytes, or the whole file if shorter): a log created and not yet written,
    or a header lost. DirectEntryLogger creates a log at its full size, zero-filled, and writes the header block
    behind the call that created it; BookKeeper reads such a log as empty. Damage only if the index points into it
    (see :mod:`scanner.checks.entry_log_check`)."""


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


def ledgers_map_of(items: bytes) -> dict[int, int]:
    """A ledgers map's items (:meth:`EntryLog.ledgers_map_items`) as ledger id -> bytes of its records: a ledger listed
    more than once (BookKeeper lists each once) gets the sum."""
    sizes = dict(_BATCH_ITEM.iter_unpack(items))
    if len(sizes) * LEDGERS_MAP_ITEM == len(items):  # each ledger listed once, told in C-speed steps
        return sizes
    sizes = {}
    for ledger_id, ledger_bytes in _BATCH_ITEM.iter_unpack(items):
        sizes[ledger_id] = sizes.get(ledger_id, 0) + ledger_bytes
    return sizes


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
        self.valid_end: int | None = None  # where the last complete walk found the end of valid data
        self._reported: set[tuple[type, int | None]] = set()
        self._ledgers_map: dict[int, int] | None = None
        self._ledgers_map_items: bytes | None = None
        self._ledgers_map_read = False
        self._fd = _open_log(self.path, entry_log_id)
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

    def still_cut(self, cut: TruncatedRecord) -> bool:
        """Whether the record ``cut`` found at the end of the file is cut still, read again as the file is now: the
        bookie's buffered writer may have completed it since (it flushes the rest when the log rotates)."""
        try:
            size = os.fstat(self._fd).st_size
            head = self._pread(cut.offset, RECORD_START_SIZE) if size > cut.end else b""
        except (OSError, UnreadableEntryLog):
            return True
        if len(head) < LENGTH_PREFIX:
            return True
        (length,) = _LENGTH.unpack_from(head, 0)
        return not (0 < length <= self.max_entry_size and cut.offset + LENGTH_PREFIX + length <= size)

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
            detail = f"fingerprint {fingerprint!r}, expected {FINGERPRINT!r}"
            if self.header_zeroed():
                self._report(ZeroedHeader(self.path, self.entry_log_id, 0, f"{detail}: the header is all zeros"))
            else:
                self._report(BadHeader(self.path, self.entry_log_id, 0, detail))
            return None
        if version not in (0, 1):
            self._report(BadHeader(self.path, self.entry_log_id, 4, f"header version {version}, expected 0 or 1"))
        dummy = self._pread(LEGACY_HEADER_SIZE, _DUMMY.size)
        direct = len(dummy) == _DUMMY.size and _DUMMY.unpack(dummy) == (DIRECT_DUMMY_LENGTH, INVALID_LEDGER_ID)
        data_start = DIRECT_BLOCK_SIZE if direct else LEGACY_HEADER_SIZE
        return EntryLogHeader(version, map_offset, count, direct, data_start)

    def header_zeroed(self) -> bool:
        """Whether the header's bytes (the first 1024, fewer in a shorter file) read as zeros, read now: the writer
        may have written them since the file was opened."""
        head = self._pread(0, LEGACY_HEADER_SIZE)
        return len(head) >= _HEADER.size and not any(head)

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
        items = self.ledgers_map_items()
        if items is not None and self._ledgers_map is None:
            self._ledgers_map = ledgers_map_of(items)
        return self._ledgers_map

    def ledgers_map_items(self) -> bytes | None:
        """The map's items as they are stored, every batch's one after the other (16 bytes each: a ledger id and the
        bytes of its records, big-endian), checked as :meth:`ledgers_map` reads them; None where it gives None."""
        if not self._ledgers_map_read:
            self._ledgers_map_items = self._read_ledgers_map()
            self._ledgers_map_read = True
        return self._ledgers_map_items

    def _read_ledgers_map(self) -> bytes | None:
        if not self.header_has_map or self._records_end != self.header.ledgers_map_offset:
            return None  # no map, or an offset already reported as broken when the file was opened
        size = self.size
        max_batch = LEDGERS_MAP_BATCH_HEADER + LEDGERS_MAP_ITEM * LEDGERS_MAP_MAX_BATCH
        batches: list[memoryview] = []
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
            batches.append(memoryview(batch)[24:])
            listed += count
            offset += 4 + length
        else:
            if offset < size:
                return self._broken_map(offset, f"{size - offset} stray bytes after the last batch")
        if listed != self.header.ledgers_count:
            return self._broken_map(self.header.ledgers_map_offset,
                                    f"batches list {listed} ledgers, the header says {self.header.ledgers_count}")
        return b"".join(batches)

    def _broken_map(self, offset: int, detail: str) -> None:
        self._report(BrokenLedgersMap(self.path, self.entry_log_id, offset, f"ledgers map: {detail}"))
        return None

    # --- walking the records ---

    @property
    def records_end(self) -> int:
        """Where the record region ends: the ledgers map's offset, or the end of the file as opened."""
        return self._records_end

    def records(self, start: int | None = None, pace: Callable[[int], object] | None = None,
                pace_interval: int = PACE_INTERVAL, reuse_buffer: bool = False) -> Iterator[Record]:
        """Every data record from ``start`` (offset of a length prefix; default the first record).

        Stops at the ledgers map, at zero fill (end of valid data) or at damage, which goes to
        :attr:`problems`; a walk that got there sets :attr:`valid_end`. ``pace(nbytes)`` is called at a
        record boundary about every ``pace_interval`` bytes walked, and at the end. With ``reuse_buffer``
        a record's bytes hold only until the next record is asked for (one buffer serves every chunk).
        """
        cursor = self.cursor(start, pace, pace_interval, reuse_buffer)
        return iter(()) if cursor is None else self._records(cursor)

    def _records(self, cursor: "RecordCursor") -> Iterator[Record]:
        pos = cursor.pos
        try:
            while True:
                if pos >= cursor.next_stop:
                    cursor.pace_to(pos)
                record = self._regular_record(cursor, pos)
                if record is None:
                    following = self.judge_irregular(pos)
                    if following is None:
                        break
                    pos = following
                    continue
                yield record
                pos = record.pos + len(record.entry)
            cursor.finish(pos)
        finally:
            cursor.release_all()

    def cursor(self, start: int | None, pace: Callable[[int], object] | None = None,
               pace_interval: int = PACE_INTERVAL, reuse_buffer: bool = False) -> "RecordCursor | None":
        """A front-to-back walk's view of the file from ``start`` (see :meth:`records`); None when the log has
        no readable header (nothing to walk)."""
        self.valid_end = None
        first = self._start(start)
        return None if first is None else RecordCursor(self, first, pace, pace_interval, reuse_buffer)

    def _start(self, start: int | None) -> int | None:
        if start is not None and start < LEGACY_HEADER_SIZE:
            raise ValueError(f"start {start} lies inside the entry log header")
        if self.header is None:
            return None
        return self.header.data_start if start is None else start

    def _regular_record(self, cursor: "RecordCursor", pos: int) -> Record | None:
        """The record at ``pos`` when its framing and ids are plausible and it lies whole in the file, else None."""
        head = cursor.span(pos, RECORD_START_SIZE)
        if head is None:
            return None
        chunk, at = head
        length, ledger_id, entry_id = _RECORD_START.unpack_from(chunk, at)
        if not (METADATA_LENGTH <= length <= self.max_entry_size and ledger_id >= 0 and entry_id >= 0
                and pos + LENGTH_PREFIX + length <= self._records_end):
            return None
        whole = cursor.span(pos, LENGTH_PREFIX + length)
        if whole is None:
            return None  # the file shrank under the walk
        chunk, at = whole
        body = at + LENGTH_PREFIX
        return Record(pos + LENGTH_PREFIX, ledger_id, entry_id, chunk[body:body + length])

    def read_chunk(self, pos: int, length: int, into: bytearray | None) -> memoryview:
        """Up to ``length`` bytes of the record region from ``pos``, read ahead as a walk reads (empty on a read
        error, which goes to :attr:`problems`)."""
        length = min(length, self._records_end - pos)
        try:
            return self._guest.read(pos, length, ahead=True, into=into)
        except OSError as exc:
            self._report(UnreadableEntryLog(self.path, self.entry_log_id, pos,
                                            f"read of {length} bytes failed: {exc.strerror}"))
            return memoryview(b"")

    def release_behind(self, pos: int) -> None:
        """Let go of the page-cache pages this reader fetched below ``pos`` (a walk is past them)."""
        self._guest.release(pos)

    def release_all(self) -> None:
        self._guest.release_all()

    def judge_irregular(self, pos: int) -> int | None:
        """Judge the record at ``pos`` that the regular path (:meth:`records`) rejected: where the walk goes on,
        or ``None`` to stop there. What is wrong goes to :attr:`problems`."""
        if pos >= self._records_end:
            return None
        try:
            head = self._pread(pos, RECORD_START_SIZE)
        except UnreadableEntryLog as error:
            self._report(error)
            return None
        if len(head) < LENGTH_PREFIX:
            if not (self.header.direct and head[:1] == bytes([PADDING_BYTE])):
                self._report(TruncatedRecord(self.path, self.entry_log_id, pos, None, min(self.size, pos + len(head)),
                                             None, None))
            return None
        (length,) = _LENGTH.unpack_from(head, 0)
        if length == 0:
            if self._records_end != self.size:
                self._report(UnexpectedZeroFill(self.path, self.entry_log_id, pos, "zeros where records must "
                                                f"continue up to the ledgers map at {self._records_end}"))
            return None  # zero fill: the end of valid data
        if length < 0:
            return self._past_padding(pos, head, length)
        return self._past_framed(pos, head, length)

    def _past_padding(self, pos: int, head: bytes, length: int) -> int | None:
        """A negative length: DirectEntryLogger's padding to the end of its 4 KiB block, or damage."""
        if self.header.direct and head[0] == PADDING_BYTE and pos % DIRECT_BLOCK_SIZE:
            return min(pos - pos % DIRECT_BLOCK_SIZE + DIRECT_BLOCK_SIZE, self._records_end)
        if self.header.direct:
            self._report(InvalidRecordLength(self.path, self.entry_log_id, pos, length,
                                             "negative, and not 0xF0 padding inside a 4096-byte block"))
        else:
            self._report(UnexpectedPadding(self.path, self.entry_log_id, pos, f"negative length {length} (padding) "
                                           "in a file without DirectEntryLogger's header block"))
        return None

    def _past_framed(self, pos: int, head: bytes, length: int) -> int | None:
        """A positive length: stop where it cannot be trusted, step over a framed record that is not an entry."""
        end = self._records_end
        if length > self.max_entry_size:
            self._report(InvalidRecordLength(self.path, self.entry_log_id, pos, length,
                                             f"larger than the largest entry a bookie accepts ({self.max_entry_size})"))
            return None
        whole_head = len(head) == RECORD_START_SIZE
        size = self.size if whole_head else min(self.size, pos + len(head))  # the file may have shrunk
        ids = _RECORD_START.unpack_from(head, 0)[1:] if whole_head else (None, None)
        following = pos + LENGTH_PREFIX + length
        if following > min(end, size) or (not whole_head and pos + RECORD_START_SIZE <= end):
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
            return following  # a ledgers-map batch or DirectEntryLogger's dummy record
        if ledger_id < 0 or entry_id < 0:
            detail = "negative ids never reach an entry log"
        elif length < METADATA_LENGTH:
            detail = f"length {length} is shorter than the {METADATA_LENGTH}-byte entry header"
        else:
            # A whole entry record, which the walk's own read of these bytes refused: they changed between the two
            # reads. DirectEntryLogger writes a log in place, into a file of its full size from the start (zeros
            # where it has not written yet: DirectWriter's fallocate), a padded buffer at a time behind the walk's
            # read (DirectWriter.flushBuffer, on the storage's write executor). So the walk ends here, as at zero
            # fill; entries the index locates past here are read one by one when the walk's faults are confirmed,
            # and the next pass reads the rest.
            log.info("entry log %d: a record was written at offset %d after the walk read zeros there: the walk "
                     "ends there", self.entry_log_id, pos)
            return None
        self._report(BadRecordHeader(self.path, self.entry_log_id, pos, ledger_id, entry_id, detail))
        return following  # the framing is intact: step over it

    # --- reading one entry by location ---

    def read_entry(self, pos: int, ledger_id: int, entry_id: int) -> memoryview:
        """The stored entry at location ``pos``, checked to be (``ledger_id``, ``entry_id``).

        Raises :class:`MissingEntry`, :class:`InvalidRecordLength`, :class:`WrongEntry`,
        :class:`TruncatedRecord` or :class:`UnreadableEntryLog` (all :class:`EntryLogError`).
        """
        prefix = pos - LENGTH_PREFIX
        if prefix < LEGACY_HEADER_SIZE:
            raise MissingEntry(self.path, self.entry_log_id, prefix,
                               f"location pos {pos} (ledger {ledger_id} entry {entry_id}) lies inside the "
                               f"file header; records start at {LEGACY_HEADER_SIZE}")
        head = self._pread(prefix, RECORD_START_SIZE) if prefix + RECORD_START_SIZE <= self.size else b""
        if len(head) < RECORD_START_SIZE:
            raise MissingEntry(self.path, self.entry_log_id, prefix,
                               f"location pos {pos} (ledger {ledger_id} entry {entry_id}): its length prefix "
                               f"and ids need bytes {prefix}..{prefix + RECORD_START_SIZE}, past the end of the file "
                               f"({self.size})")
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


class RecordCursor:
    """Where a front-to-back walk of one log is: the chunk of the file it reads records from, and its pacing.

    ``pos`` is where the walk starts; ``next_stop`` the record boundary from which :meth:`pace_to` is due.
    """

    __slots__ = ("pos", "next_stop", "_log", "_end", "_pace", "_interval", "_paced", "_next_release", "_reuse",
                 "_buffer", "_base", "_chunk")

    def __init__(self, entry_log: EntryLog, first: int, pace: Callable[[int], object] | None, pace_interval: int,
                 reuse_buffer: bool):
        self.pos = first
        self.next_stop = first + pace_interval
        self._log = entry_log
        self._end = entry_log.records_end
        self._pace = pace
        self._interval = pace_interval
        self._paced = first
        self._next_release = first + RELEASE_INTERVAL
        self._reuse = reuse_buffer
        self._buffer: bytearray | None = None
        self._base = first
        self._chunk = memoryview(b"")

    def span(self, pos: int, length: int) -> tuple[memoryview, int] | None:
        """The chunk holding bytes [pos, pos + length) and where they start in it, read when the current chunk
        does not hold them; None when the record region (or the file, if it shrank) ends before."""
        at = pos - self._base
        if at >= 0 and at + length <= len(self._chunk):
            return self._chunk, at
        if pos + length > self._end:
            return None
        size = min(max(CHUNK_SIZE, length), self._end - pos)
        if self._reuse and (self._buffer is None or len(self._buffer) < size):
            self._buffer = bytearray(size)  # the first chunk, or a record larger than a chunk
        self._base, self._chunk = pos, self._log.read_chunk(pos, size, self._buffer)
        return (self._chunk, 0) if len(self._chunk) >= length else None

    def pace_to(self, pos: int) -> None:
        """At the record boundary ``pos``: pay ``pace`` for the bytes walked since the last call, and let go of the
        page-cache pages the walk fetched and is past."""
        if self._pace is not None and pos > self._paced:
            self._pace(pos - self._paced)
        self._paced = pos
        if pos >= self._next_release:
            self._log.release_behind(pos)
            self._next_release = pos + RELEASE_INTERVAL
        self.next_stop = pos + self._interval

    def finish(self, pos: int) -> None:
        """The walk reached ``pos``, where the log's valid records end."""
        self._log.valid_end = pos
        self.pace_to(pos)

    def release_all(self) -> None:
        self._log.release_all()


def _open_log(path: str, entry_log_id: int) -> int:
    try:
        return open_read_only(path)
    except FileNotFoundError as exc:
        raise MissingEntryLog(path, entry_log_id, None,
                              "the file does not exist (deleted by garbage collection?)") from exc
    except OSError as exc:
        raise UnreadableEntryLog(path, entry_log_id, None, f"cannot open the file: {exc.strerror}") from exc
