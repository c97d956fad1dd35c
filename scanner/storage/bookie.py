"""One bookie's local storage, read-only, with the same interface for Interleaved, Sorted and Db storage.

Everything is lazy: ledger ids and locations are iterated from the index as they are asked for, so a
bookie with millions of ledgers never has all its locations in memory.
"""

from __future__ import annotations

import abc
import heapq
from array import array
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from scanner.storage.dbstorage import DbLedgerIndex, DbOpenError, MalformedDbRecord, MisplacedLedger
from scanner.storage.entrylog import MissingEntryLog
from scanner.storage.indexfile import (IndexFile, find_index_file, index_files, indexed_ledger_ids, read_index_files,
                                      read_ledger_index_files)
from scanner.storage.layout import BookieLayout
from scanner.storage.ledgerstate import LedgerState
from scanner.storage.location import EntryLocation

# `.log.compacting` / `.log.<id>.compacted` do not match: transactional compaction leftovers are skipped
_ENTRY_LOG_NAME = re.compile(r"([0-9a-f]{1,8})\.log")


@dataclass(frozen=True, slots=True)
class EntryLogFile:
    ledger_dir_index: int
    entry_log_id: int
    path: Path


class BookieStorage(abc.ABC):
    """What the scanner reads from one bookie: its ledgers, their index state and locations, its entry logs."""

    def __init__(self, layout: BookieLayout):
        self.layout = layout
        self.unreadable_indexes: dict[str, str] = {}  # index that cannot be opened at all -> why (damage, not usage)

    def __enter__(self) -> "BookieStorage":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Release what the index readers hold; nothing to do for file-per-ledger indexes."""

    @abc.abstractmethod
    def ledger_ids(self) -> Iterator[int]:
        """Every ledger the bookie's index knows, ascending."""

    @abc.abstractmethod
    def ledger_index(self, ledger_id: int) -> LedgerState | None:
        """The ledger's master key, fence bit and explicit LAC as indexed, or None if the index lacks the ledger."""

    @abc.abstractmethod
    def locations(self, ledger_id: int) -> Iterator[tuple[int, EntryLocation]]:
        """(entry id, location) of every indexed entry of the ledger, entry id ascending (empty if unknown)."""

    @abc.abstractmethod
    def indexed_ledgers(self, dir_index: int | None = None) -> Iterator[tuple[int, array, array]]:
        """(ledger id, entry ids, encoded locations) of every ledger in the index, in the index's own order.

        ``dir_index``: only what that ledger dir's own index holds, where each dir has one (DbLedgerStorage).

        Entry ids ascend within a ledger; both are ``array('Q')``. A ledger whose own index cannot be read
        comes as (ledger id, None, the error); an index that cannot be read on raises ``DbIndexError``.
        """

    @abc.abstractmethod
    def entry_log_path(self, ledger_id: int, entry_log_id: int) -> Path:
        """The file of an entry log a location of ``ledger_id`` names; raises ``MissingEntryLog`` if none."""

    def is_active_log(self, log_file: EntryLogFile, header_has_map: bool) -> bool:
        """The log the bookie may still be appending to: no ledgers map, and the newest such log of its dir."""
        if header_has_map:
            return False
        same_dir = [f.entry_log_id for f in self.entry_logs()
                    if f.ledger_dir_index == log_file.ledger_dir_index and file_size(f.path) > 0]
        return not same_dir or log_file.entry_log_id >= max(same_dir)

    def entry_logs(self) -> list[EntryLogFile]:
        """Every ``<hex id>.log`` in the ledger dirs, in (entry log id, dir) order."""
        found = []
        for index, current in enumerate(self.layout.ledger_current_dirs):
            with os.scandir(current) as entries:
                for entry in entries:
                    match = _ENTRY_LOG_NAME.fullmatch(entry.name)
                    if match and entry.is_file():
                        found.append(EntryLogFile(index, int(match.group(1), 16), Path(entry.path)))
        return sorted(found, key=lambda log: (log.entry_log_id, log.ledger_dir_index))


class IndexFileStorage(BookieStorage):
    """Interleaved and Sorted storage: one `.idx` per ledger in any index dir; one entry-log id space."""

    def ledger_indexes(self, ledger_ids: Iterable[int]) -> Iterator[tuple[int, array, array]]:
        """As :meth:`indexed_ledgers` gives them, those of ``ledger_ids`` (taken as they are needed) the index has,
        each file opened where the bookie looks for it, none listed (on a bookie of 10^5 ledgers each of BookKeeper's
        65,536 index directories holds a file or two: listing them cost more calls than the files' own open, read and
        close)."""
        return read_ledger_index_files(self.layout.index_current_dirs, ledger_ids)

    def ledger_ids(self) -> Iterator[int]:
        ids = set()
        for current in self.layout.index_current_dirs:
            ids.update(indexed_ledger_ids(current))
        return iter(sorted(ids))

    def ledger_index(self, ledger_id: int) -> LedgerState | None:
        path = find_index_file(self.layout.index_current_dirs, ledger_id)
        if path is None:
            return None
        with IndexFile(path) as index:
            return index.state

    def locations(self, ledger_id: int) -> Iterator[tuple[int, EntryLocation]]:
        path = find_index_file(self.layout.index_current_dirs, ledger_id)
        if path is None:
            return
        with IndexFile(path) as index:
            yield from index.locations()

    def indexed_ledgers(self, dir_index: int | None = None) -> Iterator[tuple[int, array, array]]:
        dirs = self.layout.index_current_dirs
        for current in dirs:
            files = index_files(current)
            if len(dirs) > 1:  # a file deleted since the listing, or one the bookie reads from an earlier dir, is skipped
                files = ((ledger_id, path) for ledger_id, path in files if find_index_file(dirs, ledger_id) == Path(path))
            yield from read_index_files(files)

    def entry_log_path(self, ledger_id: int, entry_log_id: int) -> Path:
        name = f"{entry_log_id:x}.log"
        for current in self.layout.ledger_current_dirs:
            if (current / name).is_file():
                return current / name
        dirs = ", ".join(str(d) for d in self.layout.ledger_current_dirs)
        raise MissingEntryLog(name, entry_log_id, None, f"needed by ledger {ledger_id}, found in none of {dirs}")


class DbStorage(BookieStorage):
    """DbLedgerStorage: ledger L lives in ledger dir L mod N, with that dir's RocksDBs and entry-log ids."""

    def __init__(self, layout: BookieLayout, work_dir: Path | None):
        super().__init__(layout)
        self._indexes: list[DbLedgerIndex] = []
        self._scratch = Path(tempfile.mkdtemp(prefix="bookie-index-", dir=work_dir))
        try:
            for current in layout.index_current_dirs:
                try:
                    self._indexes.append(DbLedgerIndex(current, self._scratch))
                except DbOpenError as error:
                    self.unreadable_indexes[str(current)] = str(error)
                    self._indexes.append(_UnopenedIndex(current, error))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for index in self._indexes:
            index.close()
        self._indexes.clear()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def _dir_of(self, ledger_id: int) -> int:
        return ledger_id % len(self.layout.ledger_dirs)  # Python's % is already the non-negative remainder

    def ledger_ids(self) -> Iterator[int]:
        return heapq.merge(*(self._owned_ledger_ids(i) for i in range(len(self._indexes))))

    def _owned_ledger_ids(self, dir_index: int) -> Iterator[int]:
        for ledger_id in self._indexes[dir_index].ledger_ids():
            self._check_placement(dir_index, ledger_id)
            yield ledger_id

    def _check_placement(self, dir_index: int, ledger_id: int) -> None:
        if self._dir_of(ledger_id) != dir_index:
            raise MisplacedLedger(
                f"{self._indexes[dir_index].current_dir}: holds ledger {ledger_id}, which belongs to ledger dir "
                f"{self._dir_of(ledger_id)} of {len(self._indexes)}: are the ledger dirs in the bookie's order?"
            )

    def ledger_index(self, ledger_id: int) -> LedgerState | None:
        return self._indexes[self._dir_of(ledger_id)].ledger_state(ledger_id)

    def locations(self, ledger_id: int) -> Iterator[tuple[int, EntryLocation]]:
        return self._indexes[self._dir_of(ledger_id)].locations(ledger_id)

    def indexed_ledgers(self, dir_index: int | None = None) -> Iterator[tuple[int, array, array]]:
        for index_of_dir, index in enumerate(self._indexes):
            if dir_index is not None and index_of_dir != dir_index:
                continue
            located = index.ledger_locations()
            pending = next(located, None)
            dirs = len(self.layout.ledger_dirs)
            for ledger_id, malformed in index.checked_ledgers():
                if ledger_id % dirs != index_of_dir:
                    self._check_placement(index_of_dir, ledger_id)  # raises
                while pending is not None and pending[0] < ledger_id:
                    pending = next(located, None)  # locations of a ledger the `ledgers` DB no longer has
                if pending is not None and pending[0] == ledger_id:
                    found, pending = pending, next(located, None)
                else:
                    found = (ledger_id, array("Q"), array("Q"))
                yield found if malformed is None else (ledger_id, None, malformed)

    def entry_log_path(self, ledger_id: int, entry_log_id: int) -> Path:
        path = self.layout.ledger_current_dirs[self._dir_of(ledger_id)] / f"{entry_log_id:x}.log"
        if not path.is_file():
            raise MissingEntryLog(path, entry_log_id, None, f"needed by ledger {ledger_id}: no such file")
        return path


class _UnopenedIndex:
    """Stands in for a ledger dir's index that would not open: it lists nothing, and asking about a ledger
    says why, so every ledger the metadata places in that dir is reported as having no readable index."""

    def __init__(self, current_dir: Path, error: DbOpenError):
        self.current_dir = current_dir
        self._error = error

    def close(self) -> None:
        """Nothing was opened."""

    def ledger_ids(self) -> Iterator[int]:
        return iter(())

    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        raise DbOpenError(str(self._error))

    def locations(self, ledger_id: int) -> Iterator[tuple[int, EntryLocation]]:
        return iter(())  # no copy in the entry logs can be told live: the index finding covers them

    def ledger_locations(self) -> Iterator[tuple[int, array, array]]:
        return iter(())

    def checked_ledgers(self) -> Iterator[tuple[int, MalformedDbRecord | None]]:
        return iter(())


def file_size(path) -> int:
    """The file's size now; 0 when garbage collection already removed it."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def open_bookie(layout: BookieLayout, work_dir: Path | None = None) -> BookieStorage:
    """A read-only storage view of the bookie; use it as a context manager.

    DbLedgerStorage indexes are opened through a scratch dir created under ``work_dir`` (default: the
    system temp dir) and removed on close; ``work_dir`` must lie outside the bookie's dirs.
    """
    if layout.storage != "db":
        return IndexFileStorage(layout)
    if work_dir is not None:
        resolved = Path(work_dir).resolve()
        for bookie_dir in layout.ledger_dirs + layout.index_dirs:
            if resolved.is_relative_to(bookie_dir.resolve()):
                raise ValueError(f"work dir {work_dir} lies inside bookie dir {bookie_dir}; it must not")
    return DbStorage(layout, work_dir)
