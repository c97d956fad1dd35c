"""Fuzzing the readers of a bookie's files: entry logs, `.idx` files, DbLedgerStorage's RocksDB values,
journals.

Inputs are built from the formats' own pieces (headers, records, ledgers-map batches, padding) with
hostile values in every length field, then read the way a scan reads them.
"""

from __future__ import annotations

import struct
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fuzz.budget import HOSTILE_LENGTHS, bounded_memory, file_holding, fuzz_settings
from scanner.scan.walker import walk_records
from scanner.storage.dbstorage import MalformedDbRecord, parse_ledger_data, parse_location_value
from scanner.storage.entry import DigestType, DigestVerifier
from scanner.storage.entrylog import EntryLog, EntryLogError
from scanner.storage.indexfile import IndexFile, IndexFileError, parse_index_header
from scanner.storage.journal import pending_entries
from scanner.storage.layout import BookieLayout
from scanner.storage.proto.db_ledger_storage_pb2 import LedgerData

int32 = st.one_of(st.sampled_from([v for v in HOSTILE_LENGTHS if -2**31 <= v < 2**31]),
                  st.integers(-2**31, 2**31 - 1))
int64 = st.one_of(st.sampled_from([0, -1, -2, 1, 2**63 - 1, -2**63, 0x7FFFFFFF]), st.integers(-2**63, 2**63 - 1))
small_bytes = st.binary(max_size=200)


def _pack(fmt: str, *values) -> bytes:
    return struct.pack(fmt, *values)


# --- entry logs ------------------------------------------------------------------------------

entry_log_header = st.builds(
    lambda fingerprint, version, map_offset, count: _pack(">4siqi", fingerprint, version, map_offset, count),
    st.one_of(st.just(b"BKLO"), st.binary(min_size=4, max_size=4)),
    st.one_of(st.sampled_from([0, 1]), int32), int64, int32)

record = st.builds(
    lambda length, ledger, entry, body, honest: (
        _pack(">iqq", 16 + len(body) if honest else length, ledger, entry) + body),
    int32, int64, int64, small_bytes, st.booleans())

ledgers_map_batch = st.builds(
    lambda length, ledger, entry, items, honest: (
        _pack(">iqqi", 20 + 16 * len(items) if honest else length, ledger, entry, len(items))
        + b"".join(_pack(">qq", lid, size) for lid, size in items)),
    int32, st.sampled_from([-1, 0, 5]), st.sampled_from([-2, 0, 7]),
    st.lists(st.tuples(int64, int64), max_size=8), st.booleans())

filler = st.one_of(st.builds(bytes, st.integers(0, 300)),            # zero fill
                   st.builds(lambda n: b"\xf0" * n, st.integers(1, 300)),  # DirectEntryLogger padding
                   small_bytes)


@st.composite
def entry_log_files(draw) -> bytes:
    head = draw(entry_log_header)
    if draw(st.booleans()):  # DirectEntryLogger: a dummy record at 1024, data from 4096
        head = head.ljust(1024, b"\0") + _pack(">iq", 4096 - 1024 - 4, -1)
        head = head.ljust(4096, b"\0")
    else:
        head = head.ljust(1024, b"\0")
    chunks = draw(st.lists(st.one_of(record, ledgers_map_batch, filler), max_size=12))
    data = head + b"".join(chunks)
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]  # torn or truncated
    return data


def _verifier_for(ledger_id: int):
    return None if ledger_id % 3 == 0 else DigestVerifier(DigestType(ledger_id % 4 + 1), b"pw")


@fuzz_settings(share=2)
@given(data=entry_log_files(), reads=st.lists(st.tuples(st.integers(-8, 1 << 33), int64, int64), max_size=6))
def test_entry_log_reader_reports_damage_as_typed_problems(data, reads):
    with file_holding(data, "1.log") as path, bounded_memory(), EntryLog(path, 1) as entry_log:
        for walked in entry_log.records():
            assert walked.ledger_id >= 0 and walked.entry_id >= 0 and len(walked.entry) >= 32
        for failure in walk_records(entry_log, _verifier_for).failures():
            assert failure.ledger_id % 3  # ledgers without a verifier are skipped, never failed
        entry_log.ledgers_map()
        for pos, ledger_id, entry_id in reads:
            try:
                entry = entry_log.read_entry(pos, ledger_id, entry_id)
            except EntryLogError:
                continue
            assert 16 <= len(entry) and pos + len(entry) <= len(data)
    assert all(isinstance(problem, EntryLogError) for problem in entry_log.problems)


# --- .idx files ------------------------------------------------------------------------------


@st.composite
def index_files(draw) -> bytes:
    version = draw(st.one_of(st.sampled_from([0, 1]), int32))
    key = draw(st.binary(max_size=40))
    key_length = len(key) if draw(st.booleans()) else draw(int32)
    head = (draw(st.one_of(st.just(b"BKLE"), st.binary(min_size=4, max_size=4)))
            + _pack(">ii", version, key_length) + key + _pack(">i", draw(int32)))
    lac = draw(st.binary(max_size=60))
    head += _pack(">i", len(lac) if draw(st.booleans()) else draw(int32)) + lac
    slots = draw(st.lists(st.one_of(st.just(0), st.integers(0, 2**64 - 1)), max_size=40))
    data = head.ljust(1024, b"\0") + b"".join(_pack(">Q", s) for s in slots)
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    return data


@fuzz_settings()
@given(data=index_files())
def test_index_file_reader_raises_only_index_errors(data):
    with file_holding(data, "5.idx") as path, bounded_memory():
        try:
            index = IndexFile(path)
        except IndexFileError:
            return
        with index:
            for entry_id, location in index.locations():
                assert entry_id >= 0 and 0 <= location.entry_log_id < 2**32 and 0 <= location.pos < 2**32


@fuzz_settings()
@given(head=st.binary(max_size=1100))
def test_index_header_parser_raises_only_index_errors(head):
    with bounded_memory():
        try:
            parse_index_header(head, Path("x.idx"))
        except IndexFileError:
            pass


# --- DbLedgerStorage RocksDB values ----------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


honest_ledger_data = st.builds(LedgerData, exists=st.booleans(), fenced=st.booleans(), masterKey=st.binary(max_size=20),
                               explicitLac=small_bytes, limbo=st.booleans()).map(LedgerData.SerializeToString)
# A length-delimited field (masterKey, tag 3 wire type 2) claiming more bytes than follow.
lying_field = st.builds(lambda length, tail: b"\x1a" + _varint(length) + tail,
                        st.sampled_from([0x7FFFFFFF, 0xFFFFFFFF, 2**35, 5]), small_bytes)


@st.composite
def ledger_data_values(draw) -> bytes:
    value = draw(st.one_of(honest_ledger_data, lying_field, st.binary(max_size=100)))
    if value and draw(st.booleans()):
        at = draw(st.integers(0, len(value) - 1))
        value = value[:at] + bytes([value[at] ^ draw(st.integers(1, 255))]) + value[at + 1:]
    if draw(st.booleans()):
        value += draw(st.one_of(lying_field, small_bytes))
    return value


@fuzz_settings()
@given(value=ledger_data_values())
def test_ledger_data_values_parse_or_raise_malformed_record(value):
    with bounded_memory():
        try:
            state = parse_ledger_data(value, "ledgers: key 1")
        except MalformedDbRecord:
            return
    assert isinstance(state.master_key, bytes) and isinstance(state.fenced, bool)


@fuzz_settings()
@given(value=st.binary(max_size=24))
def test_location_values_parse_or_raise_malformed_record(value):
    try:
        location = parse_location_value(value, "locations: key (1, 2)")
    except MalformedDbRecord:
        assert len(value) != 8
        return
    assert len(value) == 8 and (location is None) == (value == bytes(8))


# --- journals ---------------------------------------------------------------------------------

journal_record = st.builds(
    lambda length, ledger, entry, body, honest: (
        _pack(">iqq", 16 + len(body) if honest else length, ledger, entry) + body),
    int32, st.integers(0, 3), int64, small_bytes, st.booleans())
journal_padding = st.builds(lambda size, honest: _pack(">ii", -0x100, size if not honest else 8) + bytes(8),
                            int32, st.booleans())


@st.composite
def journal_files(draw) -> bytes:
    version = draw(st.one_of(st.sampled_from([4, 5, 6]), int32))
    head = draw(st.one_of(st.just(b"BKLG"), st.binary(min_size=4, max_size=4))) + _pack(">i", version)
    if version >= 5:
        head = head.ljust(512, b"\0")
    data = head + b"".join(draw(st.lists(st.one_of(journal_record, journal_padding, filler), max_size=10)))
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    return data


@fuzz_settings()
@given(data=journal_files(), mark_offset=st.one_of(st.sampled_from([0, 8, 512]), st.integers(-2**63, 2**63 - 1)),
       mark_file=st.sampled_from([0, 1, 2**63 - 1]))
def test_journal_reader_stops_at_damage(data, mark_offset, mark_file):
    with file_holding(data, "1.txn") as journal, bounded_memory():
        ledger_dir = journal.parent / "ledgers"
        (ledger_dir / "current").mkdir(parents=True)
        (ledger_dir / "current" / "lastMark").write_bytes(_pack(">qq", mark_file, mark_offset))
        journal.parent.joinpath("current").mkdir()
        journal.rename(journal.parent / "current" / "1.txn")
        layout = BookieLayout("b:1", "interleaved", (ledger_dir,), (ledger_dir,), False,
                              {"journalDirectories": str(journal.parent)})
        pending = pending_entries(layout, range(4))
    assert all(0 <= ledger < 4 and entry >= 0 for ledger, entry in pending)
