"""DbLedgerStorage indexes built with RocksDB in a temp dir: two ledger dirs, big-endian keys, the
negative storage-flags key, malformed records, and opening without writing into the DB's directory."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from corpus import reference_walker
from scanner.native.switch import native_code
from scanner.storage import dbstorage
from scanner.storage.bookie import DbStorage, EntryLogFile, open_bookie
from scanner.storage.dbstorage import (
    DbLedgerIndex,
    DbOpenError,
    MalformedDbRecord,
    MisplacedLedger,
    ReadOnlyRocksDb,
)
from scanner.storage.entry import master_key
from scanner.storage.entrylog import MissingEntryLog
from scanner.storage.layout import BookieLayout
from scanner.storage.ledgerstate import LedgerState
from scanner.storage.location import EntryLocation
from scanner.storage.proto.db_ledger_storage_pb2 import LedgerData

STORAGE_FLAGS_KEY = -0xEEFD
KEY = master_key(b"secret")


def ledger_data(fenced=False, explicit_lac=None, limbo=None) -> bytes:
    data = LedgerData(exists=True, fenced=fenced, masterKey=KEY)
    if explicit_lac is not None:
        data.explicitLac = explicit_lac
    if limbo is not None:
        data.limbo = limbo
    return data.SerializeToString()


def write_db(path: Path, records: dict[bytes, bytes]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    db = Rdict(str(path), options=Options(raw_mode=True))
    for key, value in records.items():
        db[key] = value
    db.close()


def ledger_key(ledger_id: int) -> bytes:
    return struct.pack(">q", ledger_id)


def location_key(ledger_id: int, entry_id: int) -> bytes:
    return struct.pack(">qq", ledger_id, entry_id)


def location_value(entry_log_id: int, pos: int) -> bytes:
    return struct.pack(">q", EntryLocation(entry_log_id, pos).encode())


def write_index(current: Path, ledgers: dict[int, bytes], locations: dict[tuple[int, int], bytes]) -> None:
    write_db(current / "ledgers", {ledger_key(ledger_id): value for ledger_id, value in ledgers.items()})
    write_db(current / "locations", {location_key(*key): value for key, value in locations.items()})


@pytest.fixture
def two_dirs(tmp_path):
    """Ledger dirs l0, l1 with their indexes in separate index dirs i0, i1 (indexDirectories, 4.16+)."""
    ledger_dirs = (tmp_path / "l0", tmp_path / "l1")
    index_dirs = (tmp_path / "i0", tmp_path / "i1")
    for directory in ledger_dirs:
        (directory / "current").mkdir(parents=True)
    write_index(
        index_dirs[0] / "current",
        {0: ledger_data(), 4: ledger_data(fenced=True), 2**40: ledger_data(limbo=True),
         STORAGE_FLAGS_KEY: struct.pack(">q", 1)},
        {(0, 0): location_value(0, 1028), (4, 0): location_value(0, 1076), (4, 1): location_value(1, 1028),
         (4, 3): location_value(1, 1100), (4, 4): b"\0" * 8, (6, 0): location_value(0, 2000),
         (2**40, 2): location_value(3, 4096)},
    )
    write_index(
        index_dirs[1] / "current",
        {5: ledger_data(explicit_lac=b"\1" * 24), 123456789: ledger_data()},
        {(5, 0): location_value(0, 1028), (5, 1): location_value(0, 1076), (123456789, 7): location_value(2, 1028)},
    )
    for directory, names in [(ledger_dirs[0], ["0.log", "1.log", "1.log.compacting", "2.log.1.compacted"]),
                             (ledger_dirs[1], ["0.log", "a.log", "lastId"])]:
        for name in names:
            (directory / "current" / name).write_bytes(b"")
    return BookieLayout(bookie_id="127.0.0.1:3181", storage="db", ledger_dirs=ledger_dirs, index_dirs=index_dirs,
                        direct_io=False, conf={})


def test_ledgers_of_both_dirs_merge_ascending_without_the_storage_flags_key(two_dirs, tmp_path):
    with open_bookie(two_dirs, work_dir=tmp_path) as storage:
        assert list(storage.ledger_ids()) == [0, 4, 5, 123456789, 2**40]


def test_each_ledger_is_read_from_the_dir_it_belongs_to(two_dirs, tmp_path):
    with open_bookie(two_dirs, work_dir=tmp_path) as storage:
        assert list(storage.locations(4)) == [(0, EntryLocation(0, 1076)), (1, EntryLocation(1, 1028)),
                                              (3, EntryLocation(1, 1100))]
        assert list(storage.locations(5)) == [(0, EntryLocation(0, 1028)), (1, EntryLocation(0, 1076))]
        assert list(storage.locations(123456789)) == [(7, EntryLocation(2, 1028))]
        assert list(storage.locations(2**40)) == [(2, EntryLocation(3, 4096))]
        assert list(storage.locations(2)) == []
        assert list(storage.locations(3)) == []
        # location keys whose ledger record is gone (a deletion not yet range-deleted) still read
        assert list(storage.locations(6)) == [(0, EntryLocation(0, 2000))]


def test_ledger_data_becomes_ledger_state(two_dirs, tmp_path):
    with open_bookie(two_dirs, work_dir=tmp_path) as storage:
        assert storage.ledger_index(0) == LedgerState(KEY, fenced=False, explicit_lac=None, limbo=False)
        assert storage.ledger_index(4) == LedgerState(KEY, fenced=True, explicit_lac=None, limbo=False)
        assert storage.ledger_index(5) == LedgerState(KEY, fenced=False, explicit_lac=b"\1" * 24, limbo=False)
        assert storage.ledger_index(2**40).limbo is True
        assert storage.ledger_index(6) is None
        assert storage.ledger_index(STORAGE_FLAGS_KEY) is None  # not a ledger: it maps to dir 1, not 0


def test_entry_logs_are_per_dir_id_spaces(two_dirs, tmp_path):
    l0, l1 = (d / "current" for d in two_dirs.ledger_dirs)
    with open_bookie(two_dirs, work_dir=tmp_path) as storage:
        assert storage.entry_logs() == [
            EntryLogFile(0, 0, l0 / "0.log"), EntryLogFile(1, 0, l1 / "0.log"),
            EntryLogFile(0, 1, l0 / "1.log"), EntryLogFile(1, 10, l1 / "a.log"),
        ]
        assert storage.entry_log_path(4, 0) == l0 / "0.log"
        assert storage.entry_log_path(5, 0) == l1 / "0.log"
        assert storage.entry_log_path(5, 10) == l1 / "a.log"
        with pytest.raises(MissingEntryLog) as missing:
            storage.entry_log_path(4, 10)  # a.log exists, but in the other dir's id space
        assert "a.log" in str(missing.value) and "ledger 4" in str(missing.value)


def test_locations_iterate_lazily_from_the_db(two_dirs, tmp_path):
    with open_bookie(two_dirs, work_dir=tmp_path) as storage:
        ids = storage.ledger_ids()
        assert next(ids) == 0
        entries = storage.locations(4)
        assert next(entries) == (0, EntryLocation(0, 1076))


def test_scratch_views_are_removed_on_close_and_work_dir_must_be_outside_the_bookie(two_dirs, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    with open_bookie(two_dirs, work_dir=work):
        assert len(os.listdir(work)) == 1
    assert os.listdir(work) == []
    with pytest.raises(ValueError):
        open_bookie(two_dirs, work_dir=two_dirs.index_dirs[1] / "current")


def test_a_ledger_in_the_wrong_dir_means_the_dirs_are_out_of_order(two_dirs, tmp_path):
    swapped = BookieLayout(two_dirs.bookie_id, "db", two_dirs.ledger_dirs, two_dirs.index_dirs[::-1], False, {})
    with open_bookie(swapped, work_dir=tmp_path) as storage:
        with pytest.raises(MisplacedLedger) as error:
            list(storage.ledger_ids())
    assert "ledger dir" in str(error.value)


def listing(directory: Path) -> dict[str, tuple[int, int]]:
    return {name: (os.stat(directory / name).st_size, os.stat(directory / name).st_mtime_ns)
            for name in os.listdir(directory)}


def test_open_writes_nothing_into_the_db_dir_even_while_a_writer_holds_it(tmp_path):
    source = tmp_path / "bookie" / "locations"
    write_db(source, {location_key(1, 0): location_value(0, 1028)})
    writer = Rdict(str(source), options=Options(raw_mode=True))  # holds LOCK, as a running bookie does
    try:
        writer[location_key(1, 1)] = location_value(0, 2000)  # only in the WAL and memtable so far
        before = listing(source)
        assert "LOG" in before and "LOCK" in before
        with ReadOnlyRocksDb(source, tmp_path) as db:
            assert [key for key, _ in db.pairs_from(b"")] == [location_key(1, 0), location_key(1, 1)]
            assert listing(source) == before
            writer[location_key(1, 2)] = location_value(0, 3000)  # after open: not in the snapshot
            assert [key for key, _ in db.pairs_from(location_key(1, 1))] == [location_key(1, 1)]
    finally:
        writer.close()


def test_missing_db_is_a_typed_error(tmp_path):
    (tmp_path / "current" / "ledgers").mkdir(parents=True)
    with pytest.raises(DbOpenError) as error:
        DbLedgerIndex(tmp_path / "current", tmp_path)
    assert str(tmp_path / "current" / "ledgers") in str(error.value)


def test_unopenable_db_is_a_typed_error_and_leaves_no_scratch(tmp_path):
    source = tmp_path / "ledgers"
    source.mkdir()
    (source / "CURRENT").write_text("MANIFEST-000099\n")  # names a manifest that does not exist
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(DbOpenError):
        ReadOnlyRocksDb(source, work)
    assert os.listdir(work) == []


@pytest.mark.parametrize(
    "ledgers, locations, read",
    [
        ({}, {location_key(0, 0): b"\0\0\0\1"}, lambda index: list(index.locations(0))),
        ({b"\0" * 6 + b"\1": ledger_data()}, {}, lambda index: list(index.ledger_ids())),
        ({}, {b"\0" * 14 + b"\1": location_value(0, 1028)}, lambda index: list(index.locations(0))),
        ({ledger_key(0): b"\xff\xff"}, {}, lambda index: index.ledger_state(0)),
    ],
    ids=["short location value", "short ledger key", "short location key", "ledger data not protobuf"],
)
def test_malformed_records_are_typed_errors_naming_the_db(tmp_path, ledgers, locations, read):
    current = tmp_path / "current"
    write_db(current / "ledgers", ledgers)
    write_db(current / "locations", locations)
    with DbLedgerIndex(current, tmp_path) as index:
        with pytest.raises(MalformedDbRecord) as error:
            read(index)
    assert str(current) in str(error.value)


def test_an_index_that_does_not_open_is_damage_of_its_dir_only(two_dirs, tmp_path):
    broken = BookieLayout(two_dirs.bookie_id, "db", two_dirs.ledger_dirs + (tmp_path / "l2",),
                          two_dirs.index_dirs + (tmp_path / "i2",), False, {})
    work = tmp_path / "work"
    work.mkdir()
    with DbStorage(broken, work) as storage:
        assert list(storage.unreadable_indexes) == [str(tmp_path / "i2" / "current")]
        assert "expected a RocksDB directory" in storage.unreadable_indexes[str(tmp_path / "i2" / "current")]
        with pytest.raises(DbOpenError):
            storage.ledger_index(2)  # ledger 2 lives in dir 2 of 3
        assert list(storage.locations(2)) == []
    assert os.listdir(work) == []


def test_a_db_given_by_a_relative_path_opens(tmp_path, monkeypatch):
    # The scratch view links to the DB's files: a relative link would resolve inside the scratch dir.
    write_db(tmp_path / "current" / "ledgers", {ledger_key(7): ledger_data()})
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(tmp_path)
    with ReadOnlyRocksDb(Path("current", "ledgers"), work) as db:
        assert db.get(ledger_key(7)) == ledger_data()


@pytest.mark.parametrize("irregular", [None, (b"\0" * 7 + b"\3" + b"\0" * 7, location_value(1, 1028)),
                                       (location_key(2, 5000), b"\0\0\0\1")],
                         ids=["regular", "short key in the third batch", "short value in the second batch"])
def test_locations_decoded_natively_are_what_the_python_batches_give(tmp_path, monkeypatch, irregular):
    # Ledgers across batch boundaries (of 4096 pairs), entries without a location (0) in all but the last three
    # (whose batches have none), the storage flags' negative keys after them. Each ledger's arrays stay as they were handed
    # out while later batches are decoded (the native decode fills the same columns for every batch).
    monkeypatch.setattr(dbstorage, "_LOCATION_BATCH", 4096)
    locations = {location_key(ledger_id, entry_id): location_value(ledger_id, 1028 + entry_id)
                 if entry_id % 7 or ledger_id >= 10 else bytes(8)
                 for ledger_id, count in [(1, 3000), (2, 6000), (3, 1), (9, 100), (10, 9000), (11, 50), (12, 5000)]
                 for entry_id in range(count)}
    locations[location_key(STORAGE_FLAGS_KEY, 0)] = location_value(1, 1028)
    if irregular is not None:
        locations[irregular[0]] = irregular[1]
    current = tmp_path / "current"
    write_db(current / "ledgers", {})
    write_db(current / "locations", locations)

    def read() -> tuple[list, str | None]:
        found = []
        with DbLedgerIndex(current, tmp_path) as index:
            try:
                for ledger_id, entry_ids, raw_locations in index.ledger_locations():
                    found.append((ledger_id, entry_ids, raw_locations))
            except MalformedDbRecord as error:
                return listed(found), str(error)
        return listed(found), None

    def listed(found: list) -> list:
        return [(ledger_id, list(entry_ids), list(raw_locations)) for ledger_id, entry_ids, raw_locations in found]

    assert native_code() is not None, "the native code is not built"
    native = read()
    with reference_walker():
        assert read() == native
    found, error = native
    if irregular is None:
        assert error is None and [ledger_id for ledger_id, _, _ in found] == [1, 2, 3, 9, 10, 11, 12]
        assert found[1][1] == [e for e in range(6000) if e % 7] and found[4][1] == list(range(9000))
        assert found[5][1] == list(range(50)) and found[5][2] == [11 << 32 | 1028 + e for e in range(50)]
    else:
        assert error is not None and str(current) in error and [ledger_id for ledger_id, _, _ in found] == [1]


@pytest.mark.parametrize("batch", [3, 1024])
def test_the_ledgers_db_read_in_batches_reads_as_pair_by_pair(tmp_path, monkeypatch, batch):
    # Ledgers 0..7 (ledger 5's record not a protobuf), then a key of 9 bytes (it sorts between ledgers 7 and 8): every
    # ledger before it comes out, in order, ledger 5 with its error, then the short key raises; without it, every
    # ledger comes out and the storage flags' negative key does not.
    monkeypatch.setattr(dbstorage, "_LEDGER_BATCH", batch)
    records = {ledger_key(i): b"\xff\xff" if i == 5 else ledger_data() for i in range(10)}
    records[ledger_key(STORAGE_FLAGS_KEY)] = struct.pack(">q", 1)
    current = tmp_path / "i0" / "current"
    layout = BookieLayout("127.0.0.1:3181", "db", (tmp_path / "l0",), (tmp_path / "i0",), False, {})
    (tmp_path / "l0" / "current").mkdir(parents=True)

    def indexed(records: dict[bytes, bytes]) -> tuple[list, str | None]:
        write_db(current / "ledgers", records)
        write_db(current / "locations", {location_key(i, 0): location_value(0, 1028 + i) for i in range(10)})
        found = []
        work = tmp_path / "work"
        work.mkdir(exist_ok=True)
        with DbStorage(layout, work) as storage:
            try:
                for ledger_id, entry_ids, read in storage.indexed_ledgers():
                    found.append((ledger_id, None if entry_ids is None else list(entry_ids),
                                  read if entry_ids is None else list(read)))
            except MalformedDbRecord as error:
                return found, str(error)
        return found, None

    found, error = indexed(records)
    assert error is None and [ledger_id for ledger_id, _, _ in found] == list(range(10))
    assert found[4] == (4, [0], [1028 + 4]) and found[5][1] is None
    assert isinstance(found[5][2], MalformedDbRecord) and f"{current / 'ledgers'}: key 5: expected a LedgerData" in str(found[5][2])
    shutil.rmtree(current)
    found, error = indexed({**records, ledger_key(7) + b"\0": ledger_data()})
    assert [ledger_id for ledger_id, _, _ in found] == list(range(8))
    assert error is not None and "expected 8 bytes, found 9" in error
