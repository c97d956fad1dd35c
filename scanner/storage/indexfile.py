"""`.idx` files of Interleaved and Sorted ledger storage: where they live, their header, their slots.

A file is a 1024-byte header (signature ``BKLE``, version, master key, state bits, and from version 1
an explicit-LAC buffer) followed by one big-endian 8-byte slot per entry id: slot *e* sits at
``1024 + 8·e``; 0 means "no entry", anything else is an encoded ``EntryLocation``.
"""

from __future__ import annotations

import os
import re
import struct
import sys
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice
from operator import itemgetter
from pathlib import Path, PurePosixPath

from scanner.native.switch import native_code
from scanner.storage.ledgerstate import LedgerState
from scanner.storage.location import EntryLocation, nonzero_slots, zeroed_uint64
from scanner.storage.pagecache import PageCacheGuest
from scanner.storage.read_only import open_read_only

HEADER_SIZE = 1024
SIGNATURE = b"BKLE"
SLOT_SIZE = 8
FENCED_BIT = 0x1
MIN_EXPLICIT_LAC_LENGTH = 16  # ledger id + LAC; the digest follows
_INT = struct.Struct(">i")
_SLOT = struct.Struct(">Q")
_READ_CHUNK = 64 * 1024  # slots read with the header at open (all of most files); a multiple of SLOT_SIZE
_ARRAY_CHUNK = 8 << 20  # a multiple of SLOT_SIZE
_LITTLE_ENDIAN_HOST = sys.byteorder == "little"
FETCH_AHEAD_FILES = 64  # files whose first bytes the disk is asked for before the pass reads them (open fds)
_WINDOW_SLOTS = FETCH_AHEAD_FILES * 2048  # a window's slots the native reader's columns hold at first (files of 17 KiB)
_INDEX_NAME = re.compile(r"([0-9a-f]{1,16})\.(idx|rloc)")
_MAX_LEDGER_ID = 2**63 - 1
_LEFT_TO_PYTHON = -1  # the native reader's count of a file it left to IndexFile (-3: a file not there)


class IndexFileError(Exception):
    """A `.idx` file that cannot be read as BookKeeper wrote it."""

    def __init__(self, path: Path, offset: int, problem: str):
        super().__init__(f"{path}: at offset {offset}: {problem}")
        self.path = path
        self.offset = offset


class TruncatedIndexHeader(IndexFileError):
    pass


class BadIndexSignature(IndexFileError):
    pass


class UnsupportedIndexVersion(IndexFileError):
    pass


class BadMasterKeyLength(IndexFileError):
    pass


class BadExplicitLacLength(IndexFileError):
    pass


def index_file_path(ledger_id: int, suffix: str = ".idx") -> PurePosixPath:
    """Where a ledger's index file sits, relative to an index dir's ``current/``."""
    if not 0 <= ledger_id <= _MAX_LEDGER_ID:
        raise ValueError(f"ledger id {ledger_id} is not a non-negative 64-bit id")
    return PurePosixPath(f"{(ledger_id >> 8) & 0xFF:x}", f"{ledger_id & 0xFF:x}", f"{ledger_id:x}{suffix}")


def find_index_file(current_dirs: Iterable[Path], ledger_id: int) -> Path | None:
    """The ledger's `.idx` in the first index dir that has one, else a `.rloc` left by an interrupted move (a
    directory of either name is passed over)."""
    found = _first_named(tuple(map(str, current_dirs)), ledger_id, os.path.isfile)
    return None if found is None else Path(found)


def indexed_ledger_ids(current_dir: Path) -> Iterator[int]:
    """Ledger ids named by the `.idx` / `.rloc` files two levels under ``current_dir`` (directory order)."""
    for ledger_id, _ in index_files(current_dir):
        yield ledger_id


def index_files(current_dir: Path) -> Iterator[tuple[int, str]]:
    """(ledger id, path) of the files two levels under ``current_dir`` that the bookie reads a ledger's index
    from, in directory order: its `.idx`, else a `.rloc` left by an interrupted move.

    The scan's native code, when it runs (:mod:`scanner.native.switch`), lists each first-level directory's files
    in one call; the loop here is the reference.
    """
    list_natively = getattr(native_code(), "list_index_files", None)  # (not built where getdents64 is missing)
    for grandparent in _subdirs(current_dir):
        if list_natively is not None:
            yield from list_natively(grandparent)
            continue
        for parent in _subdirs(grandparent):
            with os.scandir(parent) as files:
                for entry in files:
                    match = _INDEX_NAME.fullmatch(entry.name)
                    if match and entry.is_file(follow_symlinks=False):
                        ledger_id = int(match.group(1), 16)
                        if ledger_id > _MAX_LEDGER_ID:
                            continue
                        if match.group(2) == "rloc" and os.path.isfile(os.path.join(parent, f"{match.group(1)}.idx")):
                            continue  # the .idx beside it is the one read
                        yield ledger_id, entry.path


IndexedLedger = tuple[int, array, array] | tuple[int, None, "IndexFileError"]


def read_index_files(files: Iterable[tuple[int, str]]) -> Iterator[IndexedLedger]:
    """(ledger id, entry ids, encoded locations) of each of ``files`` ((ledger id, path), as :func:`index_files`
    lists them), in their order, as :meth:`IndexFile.location_arrays` gives them; (ledger id, None, the error) for a
    file that cannot be read as BookKeeper wrote it; nothing for a file gone since the listing.

    Each file is opened a window of files before it is read (:func:`fetched_ahead`). The scan's native code, when it
    runs (:mod:`scanner.native.switch`), opens and reads a window of small files per call, reading those the page
    cache holds whole as it opens them, into two pairs of columns that serve every other window (the window read
    and the next one opened; fresh pages cost a fault each); every other file, and every file when the Python forms
    are forced (the reference), is read by :class:`IndexFile`.
    """
    native = native_code()
    if native is None:
        for ledger_id, path, guest in fetched_ahead(files):
            yield from _read_one(ledger_id, path, guest)
        return
    yield from chain.from_iterable(_read_windows(native, iter(files), lambda window, columns: native.open_index_files(
        [path for _, path in window], *columns), itemgetter(0), itemgetter(1)))


def read_ledger_index_files(current_dirs: Sequence[Path], ledger_ids: Iterable[int]) -> Iterator[IndexedLedger]:
    """What :func:`read_index_files` gives of each of ``ledger_ids`` (taken as they are needed) whose index file is
    where the bookie looks for it (:func:`where_kept`), in their order; nothing for a ledger that has none. Nothing
    is listed: each file is opened by its name. Each index dir's ``current/`` is opened first: one not there raises,
    as a listing of it would."""
    ledger_ids = (ledger_id for ledger_id in ledger_ids if 0 <= ledger_id <= _MAX_LEDGER_ID)
    dirs = [str(current) for current in current_dirs]
    fds: list[int] = []
    try:
        for current in dirs:
            fds.append(os.open(current, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        native = native_code()
        if native is None:
            files = ((ledger_id, path) for ledger_id in ledger_ids if (path := where_kept(dirs, ledger_id)) is not None)
            for ledger_id, path, guest in fetched_ahead(files):
                yield from _read_one(ledger_id, path, guest)
            return
        yield from chain.from_iterable(_read_windows(native, ledger_ids, lambda window, columns: (
            native.open_ledger_index_files(fds, array("Q", window), *columns)), int,
            lambda ledger_id: where_kept(dirs, ledger_id)))
    finally:
        for fd in fds:
            os.close(fd)


def where_kept(current_dirs: Sequence[str], ledger_id: int) -> str | None:
    """The path of a ledger's index file where the bookie looks for it (BookKeeper's IndexPersistenceMgr.findIndexFile:
    the first index dir in which a file of its name exists), else of a `.rloc` left by an interrupted move (as
    :func:`find_index_file`); None: neither exists."""
    return _first_named(current_dirs, ledger_id, os.path.exists)


def _first_named(current_dirs: Sequence[str], ledger_id: int, present: Callable[[str], bool]) -> str | None:
    """The path of the ledger's `.idx` in the first of ``current_dirs`` where ``present`` holds, else of its `.rloc`."""
    for suffix in (".idx", ".rloc"):
        relative = index_file_path(ledger_id, suffix)
        for current in current_dirs:
            candidate = os.path.join(current, relative)
            if present(candidate):
                return candidate
    return None


def _read_windows(native, files: Iterator, open_window: Callable, ledger_of: Callable[..., int],
                  path_of: Callable[..., str | None]) -> Iterator[list[IndexedLedger]]:
    """:func:`read_index_files` natively, a window of ``files`` at a time (what it gives of each window as a list):
    ``open_window(files, columns)`` opens a window of them; ``ledger_of`` and ``path_of`` name a file's ledger and path
    (None: not there now)."""
    columns, spare = ([zeroed_uint64(_WINDOW_SLOTS) for _ in range(2)] for _ in range(2))
    window = list(islice(files, FETCH_AHEAD_FILES))
    opened = open_window(window, columns)
    try:
        while window:
            following = list(islice(files, FETCH_AHEAD_FILES))
            # The next window is asked of the disk before this one is read: it fetches while this one is sifted.
            opened_next = open_window(following, spare)
            this, opened = opened, opened_next
            counts, starts, wanted = native.read_index_files(this)  # done with the columns: they may grow
            entry_ids, raw_locations = columns
            if min(counts, default=0) >= 0:  # every file read natively (the common case): the window in one step
                yield [(ledger_of(file), entry_ids[at:at + count], raw_locations[at:at + count])
                       for file, count, at in zip(window, counts, starts)]
            else:
                read = []
                for file, count, at in zip(window, counts, starts):
                    if count >= 0:
                        read.append((ledger_of(file), entry_ids[at:at + count], raw_locations[at:at + count]))
                    elif count == _LEFT_TO_PYTHON and (path := path_of(file)) is not None:  # (None: gone since)
                        read.extend(_read_one(ledger_of(file), path, None))
                    # (else not there: nothing)
                yield read
            if wanted:  # files left to the Python reader for want of room: the columns grow for the windows to come
                for column in columns:
                    column.extend(zeroed_uint64(wanted))
            columns, spare = spare, columns
            window = following
    finally:
        native.close_index_files(opened)


def _read_one(ledger_id: int, path: str, guest: PageCacheGuest | None) -> Iterator[IndexedLedger]:
    try:
        with IndexFile(path, guest) as index:
            found = index.location_arrays()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return  # not there (a directory of its name is no index file)
    except IndexFileError as error:
        yield ledger_id, None, error
        return
    yield ledger_id, *found


def fetched_ahead(files: Iterable[tuple[int, str]], window: int = FETCH_AHEAD_FILES
                  ) -> Iterator[tuple[int, str, PageCacheGuest | None]]:
    """``files`` with each one opened ``window`` files before it is read, and its first bytes asked of the disk
    then: on a cold bookie the disk fetches many small files at once instead of one per random read.

    The consumer owns each guest it is handed (give it to :class:`IndexFile`, or to :func:`close_unread`); None: the
    file could not be opened ahead, open it by path. Files not handed out are closed and dropped here.
    """
    waiting: deque[tuple[int, str, PageCacheGuest | None]] = deque()
    try:
        for ledger_id, path in files:
            waiting.append((ledger_id, path, _opened_ahead(path)))
            if len(waiting) > window:
                yield waiting.popleft()
        while waiting:
            yield waiting.popleft()
    finally:
        for _, _, guest in waiting:
            close_unread(guest)


def close_unread(guest: PageCacheGuest | None) -> None:
    """A file :func:`fetched_ahead` opened and nobody read: closed, what was fetched for it dropped."""
    if guest is not None:
        guest.release_all()
        os.close(guest.fd)


def _opened_ahead(path: str) -> PageCacheGuest | None:
    try:
        guest = PageCacheGuest(open_read_only(path))
    except OSError:
        return None  # gone since the listing, or unreadable: the reader finds out by path
    guest.fetch_ahead(HEADER_SIZE + _READ_CHUNK)
    return guest


def _subdirs(path: Path | str) -> Iterator[str]:
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                yield entry.path  # a str: a Path per directory costs more than listing it


class IndexFile:
    """One `.idx` file opened read-only; the header is parsed and checked on open.

    Reads go through a page-cache guest: what this reader fetched from disk is dropped again on
    close, what the bookie had cached stays. The open reads the header and the first slots in one
    read (all of most ledgers' files).
    """

    def __init__(self, path: Path, guest: PageCacheGuest | None = None):
        """``guest``: the file already open, as :func:`fetched_ahead` opened it (then this reader owns it)."""
        self.path = Path(path)
        self._guest = guest if guest is not None else PageCacheGuest(open_read_only(self.path))
        self._fd = self._guest.fd
        try:
            self.size = os.fstat(self._fd).st_size
            self._first = self._guest.read(0, min(max(self.size, HEADER_SIZE), HEADER_SIZE + _READ_CHUNK))
            self.version, self.state = parse_index_header(self._first[:HEADER_SIZE], self.path)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "IndexFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            self._guest.release_all()
            os.close(self._fd)
            self._fd = -1

    def locations(self) -> Iterator[tuple[int, EntryLocation]]:
        """(entry id, location) for every non-empty slot, entry id ascending, up to the size seen at open.

        A short last page is fine (BookKeeper reads missing bytes as zeros); a partial last slot is ignored.
        """
        for chunk_start, chunk, length in self._slot_chunks():
            entry_id = (chunk_start - HEADER_SIZE) // SLOT_SIZE
            for (raw,) in _SLOT.iter_unpack(chunk[: len(chunk) // SLOT_SIZE * SLOT_SIZE]):
                if raw:
                    yield entry_id, EntryLocation.decode(raw)
                entry_id += 1
            if len(chunk) < length:
                return  # the file shrank since open (replaced by a rewrite): stop at what is there

    def location_arrays(self) -> tuple[array, array]:
        """(entry ids, encoded locations) of every non-empty slot, entry id ascending, as ``array('Q')`` pairs.

        The same slots as :meth:`locations`, read in big sequential chunks and sifted without a Python
        object per entry: the pass reads millions of slots this way.
        """
        entry_ids, raw_locations = array("Q"), array("Q")
        for chunk_start, chunk, length in self._slot_chunks():
            # Empty slots at the end (most of a small ledger's page) are cut off at C speed.
            used = -(-len(chunk.rstrip(b"\0")) // SLOT_SIZE) * SLOT_SIZE
            slots = array("Q", chunk[: min(used, len(chunk) // SLOT_SIZE * SLOT_SIZE)])
            if _LITTLE_ENDIAN_HOST:
                slots.byteswap()
            found_ids, found = nonzero_slots(slots, (chunk_start - HEADER_SIZE) // SLOT_SIZE)
            entry_ids.extend(found_ids)
            raw_locations.extend(found)
            if len(chunk) < length:
                break  # the file shrank since open (replaced by a rewrite): stop at what is there
        return entry_ids, raw_locations

    def _slot_chunks(self) -> Iterator[tuple[int, bytes, int]]:
        """(offset, bytes read, bytes asked for) of the slots up to the size seen at open: the part read at open first."""
        slot_bytes = max(0, self.size - HEADER_SIZE) // SLOT_SIZE * SLOT_SIZE
        first = self._first[HEADER_SIZE:HEADER_SIZE + slot_bytes]
        first = bytes(first[:len(first) // SLOT_SIZE * SLOT_SIZE])
        yield HEADER_SIZE, first, len(first)
        for start in range(HEADER_SIZE + len(first), HEADER_SIZE + slot_bytes, _ARRAY_CHUNK):
            length = min(_ARRAY_CHUNK, HEADER_SIZE + slot_bytes - start)
            yield start, bytes(self._guest.read(start, length, ahead=True)), length


def parse_index_header(head: bytes, path: Path) -> tuple[int, LedgerState]:
    """(header version, ledger state) from the first ``min(file size, 1024)`` bytes of a `.idx` file."""
    available = len(head)
    if available < 12:
        raise TruncatedIndexHeader(path, available, f"expected at least 12 header bytes, the file has {available}")
    if head[:4] != SIGNATURE:
        raise BadIndexSignature(path, 0, f"expected signature {SIGNATURE!r}, found {bytes(head[:4])!r}")
    version = _INT.unpack_from(head, 4)[0]
    if version not in (0, 1):
        raise UnsupportedIndexVersion(path, 4, f"expected header version 0 or 1, found {version}")
    key_length = _INT.unpack_from(head, 8)[0]
    key_end = 12 + key_length
    fields_end = key_end + (8 if version >= 1 else 4)  # state bits, then the explicit-LAC length
    if key_length < 0 or fields_end > HEADER_SIZE:
        raise BadMasterKeyLength(
            path, 8, f"expected a master key length that fits the {HEADER_SIZE}-byte header, found {key_length}"
        )
    if fields_end > available:
        raise TruncatedIndexHeader(path, available, f"expected header fields up to byte {fields_end}, the file ends")
    master_key = bytes(head[12:key_end])
    fenced = bool(_INT.unpack_from(head, key_end)[0] & FENCED_BIT)
    explicit_lac = None
    if version >= 1:
        lac_length = _INT.unpack_from(head, key_end + 4)[0]
        lac_end = fields_end + lac_length
        if lac_length != 0:
            if lac_length < MIN_EXPLICIT_LAC_LENGTH or lac_end > HEADER_SIZE:
                raise BadExplicitLacLength(
                    path,
                    key_end + 4,
                    f"expected explicit-LAC length 0 or {MIN_EXPLICIT_LAC_LENGTH}..{HEADER_SIZE - fields_end}, "
                    f"found {lac_length}",
                )
            if lac_end > available:
                raise TruncatedIndexHeader(
                    path, available, f"expected the explicit-LAC buffer up to byte {lac_end}, the file ends"
                )
            explicit_lac = bytes(head[fields_end:lac_end])
    return version, LedgerState(master_key=master_key, fenced=fenced, explicit_lac=explicit_lac)
