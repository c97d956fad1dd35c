"""DbLedgerStorage's indexes: the `ledgers` and `locations` RocksDBs of one ledger dir, opened read-only.

``ledgers``: key ``>q ledgerId`` -> protobuf ``LedgerData``; negative keys are storage flags, not ledgers.
``locations``: key ``>q ledgerId ‖ >q entryId`` -> ``>q`` encoded ``EntryLocation``. Both use the bytewise
comparator, so non-negative ids iterate in ascending order.

RocksDB and rocksdict both may write into the directory they open (an info ``LOG``,
``rocksdict-config.json``), so a DB is opened through a directory of the scanner's own that holds
symlinks to the bookie's immutable DB files only: never to ``LOG*`` or ``LOCK``.
"""

from __future__ import annotations

import bisect
import functools
import os
import re
import shutil
import struct
import sys
import tempfile
from array import array
from collections.abc import Iterator
from itertools import islice
from operator import itemgetter
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, ReadOptions

from scanner.native.switch import native_code
from scanner.storage.ledgerstate import LedgerState
from scanner.storage.location import EntryLocation, zeroed_uint64

LEDGER_KEY = struct.Struct(">q")
LOCATION_KEY = struct.Struct(">qq")
LOCATION_VALUE = struct.Struct(">Q")
LEDGERS_DB = "ledgers"
LOCATIONS_DB = "locations"
# files RocksDB only reads in a read-only open; WAL files share the .log suffix with nothing else here
_DB_FILES = re.compile(r"CURRENT|IDENTITY|MANIFEST-\d+|OPTIONS-\d+|\d+\.(?:sst|log|blob)")
_LEDGER_BATCH = 1 << 10  # `ledgers` DB pairs taken at once
_LOCATION_BATCH = 1 << 15  # pairs a cursor hands over at once (each is two bytes objects): 768 KiB of columns
_LITTLE_ENDIAN_HOST = sys.byteorder == "little"
_KEY, _VALUE = itemgetter(0), itemgetter(1)
_OPEN_ATTEMPTS = 3  # a live bookie may replace a file between listing the dir and opening it


class DbIndexError(Exception):
    """A DbLedgerStorage index that cannot be read as BookKeeper wrote it."""


class DbOpenError(DbIndexError):
    pass


class MalformedDbRecord(DbIndexError):
    pass


class MisplacedLedger(DbIndexError):
    pass


@functools.cache
def _protobuf() -> tuple[type, type]:
    """(``LedgerData``, protobuf's DecodeError), imported on first use: a scan that never parses a ledger's record
    (an `.idx` bookie's, or DbLedgerStorage's whose records it takes unparsed) need not pay protobuf's import."""
    from google.protobuf.message import DecodeError
    from scanner.storage.proto.db_ledger_storage_pb2 import LedgerData

    return LedgerData, DecodeError


def parse_ledger_data(value: bytes, where: str) -> LedgerState:
    """A `ledgers` DB value (``LedgerData`` protobuf); ``where`` names it in the MalformedDbRecord raised."""
    data = _parsed_ledger_data(value, where)
    return LedgerState(
        master_key=data.masterKey,
        fenced=data.fenced,
        explicit_lac=data.explicitLac if data.HasField("explicitLac") else None,
        limbo=data.limbo,
    )


def _parsed_ledger_data(value: bytes, where: str):
    """The ``LedgerData`` message a `ledgers` DB value holds, or MalformedDbRecord (naming ``where``)."""
    ledger_data, decode_error = _protobuf()
    data = ledger_data()
    try:
        data.ParseFromString(value)
    except decode_error as error:
        raise _malformed_ledger_data(where, error) from error
    return data


def _malformed_ledger_data(where: str, error: Exception) -> MalformedDbRecord:
    return MalformedDbRecord(f"{where}: expected a LedgerData protobuf, cannot parse: {error}")


def _negative(ledger_id: int) -> bool:
    return ledger_id < 0


def parse_location_value(value: bytes, where: str) -> EntryLocation | None:
    """A `locations` DB value; None for 0, which BookKeeper reads as "no such entry"."""
    if len(value) != LOCATION_VALUE.size:
        raise MalformedDbRecord(f"{where}: expected an {LOCATION_VALUE.size}-byte location, found {len(value)} bytes")
    raw = LOCATION_VALUE.unpack(value)[0]
    return EntryLocation.decode(raw) if raw else None


class ReadOnlyRocksDb:
    """One RocksDB opened read-only (a snapshot as of open) through symlinks in a directory of our own."""

    def __init__(self, db_dir: Path, work_dir: Path):
        self.path = Path(db_dir).absolute()  # the symlinks in the view must not depend on the working dir
        if not (self.path / "CURRENT").is_file():
            raise DbOpenError(f"{self.path}: expected a RocksDB directory (with a CURRENT file), found none")
        self._view = Path(tempfile.mkdtemp(prefix=f"{self.path.name}-", dir=work_dir))
        try:
            self._db = self._open()
        except BaseException:
            shutil.rmtree(self._view, ignore_errors=True)
            raise

    def _open(self) -> Rdict:
        failure = None
        for _ in range(_OPEN_ATTEMPTS):
            self._link_db_files()
            try:
                # only the default column family: BookKeeper writes nothing else
                return Rdict(str(self._view), options=Options(raw_mode=True), access_type=AccessType.read_only())
            except Exception as error:  # rocksdict raises plain Exception for RocksDB errors
                failure = error
        raise DbOpenError(f"{self.path}: RocksDB refused a read-only open: {failure}") from failure

    def _link_db_files(self) -> None:
        for stale in os.listdir(self._view):
            os.unlink(self._view / stale)
        for name in os.listdir(self.path):
            if _DB_FILES.fullmatch(name):
                # absolute: a relative target would resolve against our scratch dir, not the caller's cwd
                os.symlink(self.path.absolute() / name, self._view / name)

    def __enter__(self) -> "ReadOnlyRocksDb":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
            shutil.rmtree(self._view, ignore_errors=True)

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def pairs_from(self, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs in bytewise key order from the first key >= ``start``: one call per pair, not four on
        a cursor."""
        return self._db.items(from_key=start, read_opt=_passing_through())

    def batches_from(self, start: bytes, size: int) -> Iterator[tuple[list[bytes], list[bytes]]]:
        """(keys, values) from the first key >= ``start`` on, ``size`` pairs at a time."""
        # the pairs taken and split without Python code per pair
        pairs = self.pairs_from(start)
        while batch := list(islice(pairs, size)):
            yield list(map(_KEY, batch)), list(map(_VALUE, batch))


def _passing_through() -> ReadOptions:
    """Read options of a cursor: the blocks it reads are not kept in the block cache.

    A pass reads each block of the index once, in key order; cached, they would only fill the cache to its
    capacity and stay there (8 MiB from about a million locations on), growing the process with the index.
    """
    options = ReadOptions()
    options.fill_cache(False)
    return options


class DbLedgerIndex:
    """The two index DBs of one DbLedgerStorage ledger dir (``<index dir>/current``), read-only."""

    def __init__(self, current_dir: Path, work_dir: Path):
        self.current_dir = Path(current_dir)
        self._ledgers = ReadOnlyRocksDb(self.current_dir / LEDGERS_DB, work_dir)
        try:
            self._locations = ReadOnlyRocksDb(self.current_dir / LOCATIONS_DB, work_dir)
        except BaseException:
            self._ledgers.close()
            raise

    def __enter__(self) -> "DbLedgerIndex":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._ledgers.close()
        self._locations.close()

    def ledger_ids(self) -> Iterator[int]:
        """Every ledger in the `ledgers` DB, ascending; storage-flag keys (negative) are skipped."""
        for ledger_ids, _ in self._ledger_batches():
            yield from ledger_ids

    def checked_ledgers(self) -> Iterator[tuple[int, MalformedDbRecord | None]]:
        """(ledger id, None, or the MalformedDbRecord its `LedgerData` record raises: it does not parse, and
        BookKeeper's start-up would fail on it) for every ledger in the `ledgers` DB, ascending."""
        ledger_data, decode_error = _protobuf()
        for ledger_ids, values in self._ledger_batches():
            # One message parses a batch's records (ParseFromString clears it first); not more, as what it parsed stays
            # in its arena until the message goes (a million records in one message took 23 MiB).
            message = ledger_data()
            for ledger_id, value in zip(ledger_ids, values):
                try:
                    message.ParseFromString(value)
                except decode_error as error:
                    yield ledger_id, _malformed_ledger_data(f"{self._ledgers.path}: key {ledger_id}", error)
                    continue
                yield ledger_id, None

    def _ledger_batches(self) -> Iterator[tuple[array, list[bytes]]]:
        """(ledger ids, their `LedgerData` bytes, unparsed) of the `ledgers` DB, ascending, _LEDGER_BATCH pairs at a
        time; the keys decoded together, not one call a ledger (a key of the wrong size raises MalformedDbRecord)."""
        for keys, values in self._ledgers.batches_from(LEDGER_KEY.pack(0), _LEDGER_BATCH):
            wrong_size = None  # the first key of the wrong size, if one is
            if set(map(len, keys)) != {LEDGER_KEY.size}:
                first = next(i for i, key in enumerate(keys) if len(key) != LEDGER_KEY.size)
                wrong_size, keys, values = keys[first], keys[:first], values[:first]
            ledger_ids = array("q", b"".join(keys))
            if _LITTLE_ENDIAN_HOST:
                ledger_ids.byteswap()
            if ledger_ids and ledger_ids[-1] < 0:  # negative keys (storage flags) sort after every non-negative one
                ledger_ids = ledger_ids[:bisect.bisect_left(ledger_ids, True, key=_negative)]
                yield ledger_ids, values[:len(ledger_ids)]
                return
            yield ledger_ids, values
            if wrong_size is not None:  # what came before it is read, as a pass reads the DB pair by pair
                self._unpack_key(LEDGER_KEY, wrong_size, self._ledgers)  # raises

    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        """The ledger's `LedgerData`, or None when the `ledgers` DB has no record of it."""
        value = self._ledgers.get(LEDGER_KEY.pack(ledger_id))
        if value is None:
            return None
        return parse_ledger_data(value, f"{self._ledgers.path}: key {ledger_id}")

    def locations(self, ledger_id: int) -> Iterator[tuple[int, EntryLocation]]:
        """(entry id, location) of every entry of the ledger in the `locations` DB, entry id ascending."""
        for key, value in self._locations.pairs_from(LOCATION_KEY.pack(ledger_id, 0)):
            key_ledger, entry_id = self._unpack_key(LOCATION_KEY, key, self._locations)
            if key_ledger != ledger_id:
                return
            location = parse_location_value(value, f"{self._locations.path}: key ({ledger_id}, {entry_id})")
            if location is not None:
                yield entry_id, location

    def ledger_locations(self) -> Iterator[tuple[int, array, array]]:
        """(ledger id, entry ids, encoded locations) of every ledger in the `locations` DB, in key order.

        One cursor over the whole DB, read in batches and decoded without a Python object per entry.
        """
        ledger_id, entry_ids, raw_locations = None, None, None
        length = 1  # the last ledger's count of entries in its batch: the next one's, most often
        for ledgers, entries, found, count, zero in self._location_batches():
            i = 0
            while i < count:
                current = ledgers[i]
                if current >= 1 << 63:
                    break  # negative keys sort after every ledger
                j = i + length
                if not (j < count and ledgers[j - 1] == current != ledgers[j]):
                    j = bisect.bisect_right(ledgers, current, i, count)
                length = j - i
                part_ids, part = entries[i:j], found[i:j]  # copies: the batch's columns serve the next batch
                if zero and 0 in part:  # 0 reads as "no such entry" in BookKeeper
                    keep = [k for k, raw in enumerate(part) if raw]
                    part_ids, part = array("Q", (part_ids[k] for k in keep)), array("Q", (part[k] for k in keep))
                if current != ledger_id:
                    if ledger_id is not None:
                        yield ledger_id, entry_ids, raw_locations
                    ledger_id, entry_ids, raw_locations = current, part_ids, part
                else:  # the ledger goes on from the batch before
                    entry_ids.extend(part_ids)
                    raw_locations.extend(part)
                i = j
        if ledger_id is not None:
            yield ledger_id, entry_ids, raw_locations

    def _location_batches(self) -> Iterator[tuple[array, array, array, int, bool]]:
        """(ledger ids, entry ids, encoded locations, how many of them, whether one of those locations is 0) of the
        `locations` DB's pairs in key order, _LOCATION_BATCH pairs at a time, each batch checked whole before it is
        handed out: in the scan's native code when it runs (:mod:`scanner.native.switch`), decoded into three columns that
        serve every batch (valid until the next one), else from the batches' bytes joined."""
        start = LOCATION_KEY.pack(0, 0)
        native = native_code()
        if native is None:
            for keys, values in self._locations.batches_from(start, _LOCATION_BATCH):
                if set(map(len, keys)) != {LOCATION_KEY.size} or set(map(len, values)) != {LOCATION_VALUE.size}:
                    self._check_batch(keys, values)
                pairs, found = array("Q", b"".join(keys)), array("Q", b"".join(values))
                if _LITTLE_ENDIAN_HOST:
                    pairs.byteswap()
                    found.byteswap()
                yield pairs[0::2], pairs[1::2], found, len(found), 0 in found
            return
        pairs = self._locations.pairs_from(start)
        columns = [zeroed_uint64(_LOCATION_BATCH) for _ in range(3)]
        while True:
            count, irregular, zero = native.decode_location_pairs(pairs, *columns)
            if irregular is not None:
                self._check_batch([irregular[0]], [irregular[1]])  # raises: a key or a value of the wrong size
            if not count:
                return
            yield *columns, count, zero

    def _check_batch(self, keys: list[bytes], values: list[bytes]) -> None:
        for key, value in zip(keys, values):
            ledger_id, entry_id = self._unpack_key(LOCATION_KEY, key, self._locations)
            if len(value) != LOCATION_VALUE.size:
                raise MalformedDbRecord(
                    f"{self._locations.path}: key ({ledger_id}, {entry_id}): expected an {LOCATION_VALUE.size}-byte "
                    f"location, found {len(value)} bytes")

    @staticmethod
    def _unpack_key(layout: struct.Struct, key: bytes, db: ReadOnlyRocksDb) -> tuple[int, ...]:
        if len(key) != layout.size:
            raise MalformedDbRecord(f"{db.path}: key {key.hex()}: expected {layout.size} bytes, found {len(key)}")
        return layout.unpack(key)
