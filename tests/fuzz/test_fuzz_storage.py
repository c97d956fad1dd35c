"""Fuzzing the readers of a bookie's files: entry logs, `.idx` files, DbLedgerStorage's RocksDB values,
journals.

Inputs are built from the formats' own pieces (headers, records, ledgers-map batches, padding) with
hostile values in every length field, then read the way a scan reads them.
"""

from __future__ import annotations

import re
import struct
import tempfile
from array import array
from pathlib import Path

from hypothesis import event, given
from hypothesis import strategies as st

from corpus import reference_walker
from fuzz.budget import HOSTILE_LENGTHS, bounded_memory, file_holding, fuzz_settings
from scanner.scan.ledger_table import LedgerTable
from scanner.scan.record_walk import walk_records
from scanner.scan.record_walk_in_c import NativeWalk
from scanner.scan.record_walk_in_python import PythonWalk
from scanner.scan.record_walk_types import NO_MORE, ExpectedRecords, KnownLedgers
from scanner.storage.dbstorage import MalformedDbRecord, parse_ledger_data, parse_location_value
from scanner.storage.entry import DigestType, DigestVerifier, build_entry
from scanner.storage.entrylog import RECORD_START_SIZE, EntryLog, EntryLogError
from scanner.storage.indexfile import IndexFile, IndexFileError, parse_index_header, read_index_files
from scanner.storage.indexfile import index_files as listed_index_files
from scanner.storage.journal import pending_entries
from scanner.storage.layout import BookieLayout
from scanner.storage.pagecache import CHUNK_SIZE
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

# A record a client wrote: its digest holds (unless a byte is flipped), for the digest type _verifier_for gives.
honest_record = st.builds(
    lambda ledger, entry, payload, flip: _flipped(_record(build_entry(
        ledger, entry, entry - 1, len(payload), payload, DigestType(ledger % 4 + 1), b"pw")), flip),
    st.integers(0, 40), st.integers(0, 5), st.binary(max_size=300), st.one_of(st.none(), st.integers(0, 400)))


def _record(entry: bytes) -> bytes:
    return _pack(">i", len(entry)) + entry


def _flipped(data: bytes, at: int | None) -> bytes:
    if at is None or at >= len(data):
        return data
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


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
    chunks = draw(st.lists(st.one_of(record, honest_record, ledgers_map_batch, filler), max_size=12))
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


@st.composite
def expected_locations(draw, records: list[tuple[int, int, int]], start: int) -> list[ExpectedRecords]:
    """The index's locations into a log holding ``records`` (pos, ledger, entry): some right, some pointing into
    a record, at another entry or past the end; cut into windows as the location runs serve them."""
    locations = [(p, l, e) for p, l, e in records if draw(st.booleans())]
    locations += [(p, l ^ 1, e) if draw(st.booleans()) else (p + 1, l, e) for p, l, e in records if draw(st.booleans())]
    locations += draw(st.lists(st.tuples(st.integers(0, 1 << 14), st.integers(0, 40), st.integers(0, 5)), max_size=4))
    locations = sorted(loc for loc in locations if loc[0] >= start + 4)
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(locations))), max_size=3))))
    windows, first = [], 0
    for cut in [c for c in cuts if c < len(locations)] + [len(locations)]:
        part = locations[first:cut]
        end = locations[cut][0] if cut < len(locations) else NO_MORE
        windows.append(ExpectedRecords(array("Q", [p for p, _, _ in part]), array("Q", [l for _, l, _ in part]),
                                       array("Q", [e for _, _, e in part]), end))
        first = cut
    return windows


class _Enough(Exception):
    """A pace call stopped the walk (as a checkpoint does)."""


def _walked(path: Path, new_walk, pace_interval: int, stop_at_pace: int | None, failures_taken: int | None) -> dict:
    """Everything a walk (``new_walk(entry_log)``) tells its caller, to compare two walkers by."""
    paces = []

    def pace(n):
        paces.append(n)
        if len(paces) == stop_at_pace:
            raise _Enough

    with EntryLog(path, 1) as entry_log:
        walk = new_walk(entry_log)
        failures, stopped = [], False
        walking = walk.failures(pace, pace_interval)
        try:
            for failure in walking:
                failures.append(failure)
                if len(failures) == failures_taken:
                    walking.close()
                    break
        except _Enough:
            stopped = True
        stats = walk.stats
        return {"failures": failures, "stopped": stopped, "paces": paces, "index_faults": walk.index_faults,
                "counts": (stats.entries_verified, stats.entries_skipped, stats.entries_failed, stats.bytes_scanned),
                "ledger_bytes": stats.ledger_bytes if not (stopped or failures_taken) else None,
                "problems": [(type(p).__name__, p.offset, str(p)) for p in entry_log.problems],
                "valid_end": entry_log.valid_end, "last_record": walk.last_record}


@st.composite
def walkable_entry_logs(draw) -> bytes:
    """Logs that mostly walk: a sound header, records a client wrote (maybe of many ledgers, maybe one so long that
    a record after it lies across the end of the walk's first chunk), then anything, maybe torn near the end."""
    direct = draw(st.booleans())
    head = _pack(">4siqi", b"BKLO", 1, 0, 0).ljust(1024, b"\0")
    if direct:
        head = (head + _pack(">iq", 4096 - 1024 - 4, -1)).ljust(4096, b"\0")
    chunks = draw(st.lists(honest_record, min_size=1, max_size=30))
    # Ledgers past the 64 the walker's ledger slots start with (they grow, mid-walk when the table answers).
    chunks += [_record(build_entry(ledger_id, 0, -1, 1, b"x", DigestType(ledger_id % 4 + 1), b"pw"))
               for ledger_id in range(41, 41 + draw(st.sampled_from([0, 0, 40, 100])))]
    if draw(st.integers(0, 2)):
        at = draw(st.integers(0, len(chunks) - 1))  # a record after it
        short = draw(st.one_of(st.integers(1, RECORD_START_SIZE), st.integers(RECORD_START_SIZE + 1, 300)))
        chunks.insert(at, _long_record(sum(map(len, chunks[:at])), short, draw(st.integers(0, 40))))
    chunks += draw(st.lists(st.one_of(honest_record, record, ledgers_map_batch, filler), max_size=6))
    data = head + b"".join(chunks)
    return _LogBytes(data[:len(data) - draw(st.integers(0, min(300, len(data) - len(head))))]
                     if draw(st.booleans()) else data)


class _LogBytes(bytes):
    """A log's bytes shown (in a failing example) with their runs of zeros by length, not a megabyte of them."""

    def __repr__(self) -> str:
        return " + ".join(f"bytes({len(part)})" if len(part) >= 64 and not part.strip(b"\0") else repr(bytes(part))
                          for part in re.split(rb"(\x00{64,})", self) if part)


def _long_record(pos: int, short_of_the_chunk: int, ledger_id: int) -> bytes:
    """An honest record at ``pos`` bytes past the log's first record that ends ``short_of_the_chunk`` bytes before
    the end of the first chunk a walk from there reads (CHUNK_SIZE bytes): the next record lies across that end (its
    start of 20 bytes too, when it is that short of it)."""
    digest_type = DigestType(ledger_id % 4 + 1)
    framing = len(_record(build_entry(ledger_id, 9, 8, 0, b"", digest_type, b"pw")))
    payload = bytes(max(0, CHUNK_SIZE - short_of_the_chunk - pos - framing))
    return _record(build_entry(ledger_id, 9, 8, len(payload), payload, digest_type, b"pw"))


@st.composite
def ledger_tables(draw, met: set[int]) -> KnownLedgers | None:
    """The pass's ledger table as the native walker is given it (None: none, the walker asks for every ledger): some
    of the ledgers the log holds and some it does not, each of the kind ``_verifier_for`` gives, appended in any order;
    some of them asked of ``_verifier_for`` all the same, of a wrong kind in the table (the walker must not use it)."""
    share = draw(st.sampled_from([None, 0.3, 0.9, 1.0]))
    if share is None:
        return None
    chance = draw(st.randoms(use_true_random=False))
    ledger_ids = [ledger_id for ledger_id in sorted(met | set(range(0, 200, 7))) if chance.random() < share]
    chance.shuffle(ledger_ids)
    asked = {ledger_id for ledger_id in ledger_ids if chance.random() < 0.2}
    table = LedgerTable()
    for ledger_id in ledger_ids:
        verifier = _verifier_for(ledger_id)
        digest_type = None if verifier is None else verifier.digest_type
        if ledger_id in asked:
            digest_type = DigestType.CRC32C if digest_type is None else None
        table.add(ledger_id, digest_type, b"pw")
    return KnownLedgers(*table.columns(), asked=array("Q", sorted(asked)))


@fuzz_settings(share=2)
@given(data=st.one_of(walkable_entry_logs(), entry_log_files()), choices=st.data())
def test_the_native_walker_finds_what_the_python_walker_finds(data, choices):
    with file_holding(data, "1.log") as path:
        with EntryLog(path, 1) as entry_log:
            data_start = entry_log.header.data_start if entry_log.header else 0
            walked = [(r.pos, r.ledger_id, r.entry_id, len(r.entry)) for r in entry_log.records()]
        records = [(pos, ledger_id, entry_id) for pos, ledger_id, entry_id, _ in walked]
        # (Mostly from the first record when the log is longer than a chunk: it holds a record across the first's end.)
        start = None if len(data) > CHUNK_SIZE and choices.draw(st.booleans()) else choices.draw(
            st.one_of(st.none(), st.sampled_from([p - 4 for p, _, _ in records] or [1024])))
        expected = choices.draw(expected_locations(records, start or 0))
        known = choices.draw(ledger_tables({ledger_id for _, ledger_id, _ in records}))
        pace_interval = choices.draw(st.sampled_from([1, 50, 4096, 1 << 20]))
        stop_at_pace = choices.draw(st.one_of(st.none(), st.integers(1, 4)))
        failures_taken = choices.draw(st.one_of(st.none(), st.integers(1, 2)))
        chunk_end = (start or data_start) + CHUNK_SIZE
        across = [chunk_end - (pos - 4) for pos, _, _, length in walked if pos - 4 < chunk_end < pos + length]
        if across:
            event("a record across the end of the walk's first chunk" +
                  (", its first 20 bytes too" if across[0] < RECORD_START_SIZE else ""))
        event(f"the pass's table given: {known is not None}")
        reference = _walked(path, lambda log: PythonWalk(log, _verifier_for, expected, start), pace_interval,
                            stop_at_pace, failures_taken)
        native = _walked(path, lambda log: NativeWalk(log, _verifier_for, expected, start, known), pace_interval,
                         stop_at_pace, failures_taken)
    assert native == reference


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
@given(data=index_files(), grown=st.binary(max_size=70_000).map(lambda tail: tail.ljust(len(tail) // 3, b"\0")))
def test_index_files_read_natively_give_what_the_python_reader_gives(data, grown):
    # Some files longer than the native reader's one read: those it leaves to the Python reader.
    with file_holding(data + grown if len(grown) > 60_000 else data, "5.idx") as path, bounded_memory():
        def read():
            return [(ledger_id, None if ids is None else list(ids), repr(found) if ids is None else list(found))
                    for ledger_id, ids, found in read_index_files([(5, str(path))])]

        native = read()
        with reference_walker():
            assert native == read()


# Names near the listing's rule: hex digits of every length, both suffixes, case, dots, and what is not a name.
index_name = st.one_of(
    st.builds(lambda digits, suffix: digits + suffix, st.text("0123456789abcdefF", min_size=0, max_size=18),
              st.sampled_from([".idx", ".rloc", ".IDX", ".idx.", "idx", ".rlocx", ""])),
    st.text(st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1, max_size=20),
).filter(lambda name: name not in (".", ".."))
index_tree = st.lists(st.tuples(st.sampled_from(["0", "1f", "x"]), st.sampled_from(["5", "ab", ".y"]), index_name,
                                st.sampled_from(["file", "dir", "link", "dangling"])), max_size=25)


@fuzz_settings(0.5)
@given(tree=index_tree)
def test_index_files_listed_natively_are_those_the_python_listing_lists(tree):
    with tempfile.TemporaryDirectory() as scratch:
        current = Path(scratch)
        for first, second, name, kind in tree:
            parent = current / first / second
            parent.mkdir(parents=True, exist_ok=True)
            path = parent / name
            if path.exists() or path.is_symlink():
                continue
            if kind == "file":
                path.write_bytes(b"")
            elif kind == "dir":
                path.mkdir()
            else:
                path.symlink_to(current / "0" / "5" / ("0.idx" if kind == "link" else "nowhere"))
        native = list(listed_index_files(current))
        with reference_walker():
            assert native == list(listed_index_files(current))


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
