"""The native record walker: built by the install, used unless the reference is forced; its CRCs are the
libraries' (with and without the CPU's CRC32C instruction), and its sorting, merging and counting of the index's
locations give what the Python forms give. That it finds what the Python walker finds is
checked on every corpus bookie and fault (tests/faults, test_scan_corpus) and on fuzzed logs (tests/fuzz)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from array import array

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus import reference_walker
from scanner.cli import main
from scanner.native import switch as native
from scanner.scan import record_walk
from scanner.scan.completeness import owned_count
from scanner.scan.ledger_table import LedgerTable
from scanner.scan.location_sort import merged_by_location, sorted_by_location
from scanner.scan.record_walk_in_c import NativeWalk
from scanner.scan.record_walk_in_python import PythonWalk
from scanner.scan.record_walk_types import KnownLedgers
from scanner.storage.entry import DigestType, DigestVerifier, build_entry
from scanner.storage.entrylog import EntryLog

# Around the three-lane stretches (3 x 256 and 3 x 4096 bytes) and the 8-byte steps.
LENGTHS = [0, 1, 7, 8, 9, 767, 768, 769, 1000, 12287, 12288, 12289, 12288 + 768 + 9, 100_000]


def test_the_native_walker_is_built_and_walks_unless_told_otherwise(tmp_path, capsys):
    assert native.native_code() is not None, native.walker_in_use()
    path = tmp_path / "0.log"
    path.write_bytes(b"BKLO" + bytes(1020))
    with EntryLog(path, 0) as entry_log:
        assert type(record_walk.walk_records(entry_log, lambda ledger: None)) is NativeWalk
        with reference_walker():
            assert type(record_walk.walk_records(entry_log, lambda ledger: None)) is PythonWalk
            assert native.walker_in_use() == "python, forced by BOOKIE_SCANNER_NATIVE=0"
            assert native.native_code() is None
    assert main(["--version"]) == 0
    assert "(record walker: native, CRC32C with " in capsys.readouterr().out


@settings(max_examples=200, deadline=None)
@given(data=st.one_of(st.binary(max_size=300), st.sampled_from(LENGTHS).map(os.urandom)),
       value=st.integers(0, 2**32 - 1), offset=st.integers(0, 15))
def test_the_crcs_are_the_libraries(data, value, offset):
    from scanner.native import _native

    view = memoryview(os.urandom(offset) + data)[offset:]  # at every alignment, as records lie in a chunk
    assert _native.crc32c(view, value) == crc32c.crc32c(data, value)
    assert _native.crc32c_portable(view, value) == crc32c.crc32c(data, value)
    assert _native.crc32(view, value) == zlib.crc32(data, value)


locations = st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
                     max_size=300)


def merged_in_place(locations: array, ledger_ids: array, entry_ids: array) -> tuple[array, array, array, array]:
    positions = array("Q", [7]) * len(locations)  # overwritten, whatever it held
    merged_by_location(locations, ledger_ids, entry_ids, positions)
    return locations, ledger_ids, entry_ids, positions


@settings(max_examples=100, deadline=None)
@given(runs=st.lists(locations, max_size=5),
       small=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**33)), max_size=300),
       tied=st.lists(st.tuples(st.sampled_from([0, 1, 2**31, 2**40 + 5, 2**63]), st.integers(0, 3)), max_size=300),
       few=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 253)), max_size=100),
       coarse=st.sampled_from([0, 1, 17, 26, 40]))
def test_sorting_and_merging_locations_natively_gives_what_pyarrow_gives(runs, small, tied, few, coarse):
    # Locations that mostly differ in a few bytes too (a few logs, positions below 2**33: packed with their index,
    # the gap between the bits of the log and the position squeezed out), many equal ones (ties keep their order), and
    # some that differ in one digit's bits (moved straight to their places, in stretches of one digit or not).
    # The runs are put in order of location >> coarse only (by window of positions), as the scan spills them.
    runs = runs + [[((log << 32) | pos, log, pos) for log, pos in small],
                   [((log << 32) | pos + k, pos, k) for log, pos in few for k in range(3)],
                   [(key, i, tag) for i, (key, tag) in enumerate(tied)]]

    def both(operation, *arguments):
        native = operation(*[copy(argument) for argument in arguments])
        with reference_walker():
            reference = operation(*[copy(argument) for argument in arguments])
        assert [list(c) for c in native] == [list(c) for c in reference]
        return native

    sorted_runs = [both(sorted_by_location, *(array("Q", column) for column in list(zip(*run)) or [(), (), ()]),
                        coarse) for run in runs]
    for run, ordered in zip(runs, sorted_runs):
        assert list(zip(*ordered)) == sorted(run, key=lambda triple: triple[0] >> coarse)  # stable: ties in order
    concatenated = [array("Q", [v for run in sorted_runs for v in run[c]]) for c in range(3)]
    merged = both(merged_in_place, *concatenated)
    assert list(merged[0]) == sorted(loc for run in runs for loc, _, _ in run)
    assert list(merged[3]) == [loc & 0xFFFFFFFF for loc in merged[0]]
    # a run is sorted where it is filled, the front of larger columns
    wider = [array("Q", list(column) + [7] * 5) for column in zip(*runs[-3])] if runs[-3] else []
    if wider:
        native = sorted_by_location(*(memoryview(column)[:len(runs[-3])] for column in wider))
        assert list(zip(*native)) == sorted(runs[-3], key=lambda triple: triple[0])
        assert all(list(column[len(runs[-3]):]) == [7] * 5 for column in wider)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(0, 2**64 - 1), max_size=60)
       | st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2**32 - 1)), max_size=60).map(
           lambda pairs: [(log + 2**20) << 32 | pos for log, pos in pairs])
       | st.lists(st.sampled_from([0, 2**63, 12345]), max_size=60),
       cut=st.integers(1, 8))
def test_a_column_packed_narrow_comes_back_whole_and_short_bytes_are_refused(values, cut):
    # The location runs' scratch file stores each run's columns narrow (a few logs' locations: 4 bytes, not 8).
    column = array("Q", values)
    code, data = native.native_code().narrow(column)
    width = code[-1]
    assert len(data) == width * len(values) and width in (0, 1, 2, 4, 8)
    assert width < 8 or len(set(values)) > 1 and max(values) ^ min(values) >= 2**32  # narrow when the bits allow
    back = array("Q", bytes(8 * len(values)))
    native.native_code().widen(data, back, code)
    assert back == column
    if data:
        with pytest.raises(ValueError, match="do not hold"):
            native.native_code().widen(data[:-cut] if cut <= len(data) else data + b"x", back, code)
    with pytest.raises(ValueError, match="out of range"):
        native.native_code().widen(b"", array("Q"), (0, 60, 0, 0, 8, 1))
    with pytest.raises(ValueError, match="width"):
        native.native_code().widen(b"", array("Q"), (0, 0, 0, 0, 24, 3))


@settings(max_examples=200, deadline=None)
@given(entry_ids=st.lists(st.integers(0, 2**64 - 1), max_size=50), size=st.integers(1, 9), data=st.data())
def test_the_completeness_count_natively_is_the_python_count(entry_ids, size, data):
    index = data.draw(st.integers(0, size - 1))
    quorum = data.draw(st.integers(1, size))
    low = data.draw(st.integers(0, len(entry_ids)))
    high = data.draw(st.integers(low, len(entry_ids)))
    ids = array("Q", sorted(entry_ids))
    native = owned_count(ids, low, high, index, size, quorum)
    with reference_walker():
        assert owned_count(ids, low, high, index, size, quorum) == native


def copy(value):
    if isinstance(value, array):
        return array(value.typecode, value)
    if isinstance(value, list):
        return [tuple(copy(c) for c in item) for item in value]
    return value


def test_mac_digests_of_every_length_around_sha1_blocks_verify_natively_and_a_flipped_bit_fails(tmp_path):
    # The MAC covers the 32-byte header and the payload: payloads of 0..200 bytes put SHA-1's padding on every side
    # of its 64-byte blocks (the digest itself is also hashed again by the outer hash).
    entries = [build_entry(7, n, n - 1, n, os.urandom(n), DigestType.HMAC, b"pw") for n in range(201)]
    flipped = {n: entry[:-1] + bytes([entry[-1] ^ 1]) if n else entry[:40] + bytes([entry[40] ^ 1]) + entry[41:]
               for n, entry in enumerate(entries) if n % 3 == 0}
    records = b"".join(struct.pack(">i", len(e)) + flipped.get(n, e) for n, e in enumerate(entries))
    path = tmp_path / "1.log"
    path.write_bytes(struct.pack(">4siqi", b"BKLO", 1, 0, 0).ljust(1024, b"\0") + records)
    with EntryLog(path, 1) as entry_log:
        walk = record_walk.walk_records(entry_log, lambda ledger: DigestVerifier(DigestType.HMAC, b"pw"))
        assert type(walk) is NativeWalk
        failed = [failure.entry_id for failure in walk.failures()]
    assert failed == sorted(flipped)
    assert walk.stats.entries_verified == len(entries) - len(flipped)


def test_the_native_walker_looks_the_pass_table_up_itself_and_asks_only_for_the_rest(tmp_path):
    # Ledgers 1-4 in the table (CRC32C, MAC, no digest, CRC32), 2 of them answered otherwise (asked); 5, 6 not in it.
    kinds = [(DigestType.CRC32C, b""), (DigestType.HMAC, b"pw"), (None, b""), (DigestType.CRC32, b"")]
    table = LedgerTable()
    for ledger_id, (digest_type, password) in zip([4, 1, 3, 2], [kinds[3], kinds[0], kinds[2], kinds[1]]):
        table.add(ledger_id, digest_type, password)
    by_ledger = {1: DigestVerifier(DigestType.CRC32C, b""), 2: DigestVerifier(DigestType.HMAC, b"pw"), 3: None,
                 4: DigestVerifier(DigestType.CRC32, b""), 5: DigestVerifier(DigestType.DUMMY, b""), 6: None}
    entries = [build_entry(ledger_id, entry_id, entry_id - 1, 5, b"12345",
                           (by_ledger[ledger_id] or by_ledger[1]).digest_type, b"pw")
               for entry_id in range(3) for ledger_id in range(1, 7)]
    entries[7] = entries[7][:-1] + b"!"  # ledger 2 entry 1
    entries[9] = entries[9][:-1] + b"!"  # ledger 4 entry 1: failed where the table answered
    path = tmp_path / "1.log"
    path.write_bytes(struct.pack(">4siqi", b"BKLO", 1, 0, 0).ljust(1024, b"\0")
                     + b"".join(struct.pack(">i", len(e)) + e for e in entries))
    asked = []

    def verifier_for(ledger_id):
        asked.append(ledger_id)
        return by_ledger[ledger_id]

    def walked(walk_class, **known):
        with EntryLog(path, 1) as entry_log:
            walk = walk_class(entry_log, verifier_for, **known)
            failures = list(walk.failures())
        stats = walk.stats
        return failures, (stats.entries_verified, stats.entries_skipped, stats.entries_failed, stats.ledger_bytes)

    native = walked(NativeWalk, known=KnownLedgers(*table.columns(), asked=array("Q", [2])))
    assert sorted(asked) == [2, 4, 5, 6]  # 4: for its failure's reason only
    assert walked(PythonWalk) == native
    assert [(f.ledger_id, f.entry_id) for f in native[0]] == [(2, 1), (4, 1)]
    assert "CRC32 digest mismatch" in native[0][1].reason


# A walk with the pass's table, in a process of its own under Python's debug allocator: the walker learns the
# table's ledgers inside walk(), with the GIL released, and its ledgers' slots grow there (64, 128, ... 1024).
# Python's own allocator called without the GIL is a fatal error under PYTHONMALLOC=debug (a race otherwise).
_WALK_WITH_THE_TABLE = """
import sys
from scanner.scan.ledger_table import LedgerTable
from scanner.scan.record_walk_in_c import NativeWalk
from scanner.scan.record_walk_types import KnownLedgers
from scanner.storage.entry import DigestType
from scanner.storage.entrylog import EntryLog

table = LedgerTable()
for ledger_id in range(1, int(sys.argv[2]) + 1):
    table.add(ledger_id, DigestType.CRC32C, b"")
with EntryLog(sys.argv[1], 1) as entry_log:
    walk = NativeWalk(entry_log, lambda ledger_id: None, known=KnownLedgers(*table.columns(), asked=[]))
    failures = list(walk.failures())
print(len(failures), walk.stats.entries_verified, walk.stats.entries_skipped)
"""


def test_the_walker_learns_the_pass_table_without_the_gil_under_pythons_debug_allocator(tmp_path):
    ledgers = 600
    entries = [build_entry(ledger_id, 0, -1, 5, b"12345", DigestType.CRC32C, b"") for ledger_id in
               range(1, ledgers + 1)]
    path = tmp_path / "1.log"
    path.write_bytes(struct.pack(">4siqi", b"BKLO", 1, 0, 0).ljust(1024, b"\0")
                     + b"".join(struct.pack(">i", len(e)) + e for e in entries))
    done = subprocess.run([sys.executable, "-c", _WALK_WITH_THE_TABLE, str(path), str(ledgers)],
                          env={**os.environ, "PYTHONMALLOC": "debug"}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0", str(ledgers), "0"]


def walked_log(tmp_path, records: list[tuple[int, int]]):
    """A log of ``records`` ((ledger, entry), CRC32C, 20-byte payloads) with no map, walked whole by both walkers."""
    from scanner.sample.bookie_writer import EntryLogWriter

    writer = EntryLogWriter(tmp_path, 1)
    for ledger_id, entry_id in records:
        writer.append(ledger_id, build_entry(ledger_id, entry_id, -1, 0, b"x" * 20, DigestType.CRC32C))
    writer.close(with_ledgers_map=False)
    walks = []
    for walk_class in (NativeWalk, PythonWalk):
        entry_log = EntryLog(writer.path, 1)
        walk = walk_class(entry_log, lambda ledger: DigestVerifier(DigestType.CRC32C, b""))
        for _ in walk.failures():
            pass
        entry_log.close()
        walks.append(walk)
    return walks


@settings(max_examples=150, deadline=None)
@given(records=st.lists(st.tuples(st.sampled_from([0, 1, 5, 2**40, 2**63 - 1]), st.integers(0, 9)), max_size=30),
       change=st.sampled_from(["none", "bytes", "drop", "add", "twice", "negative ledger", "zero bytes", "cut",
                               "split"]),
       which=st.integers(0, 100))
def test_the_native_ledgers_map_confirmation_is_the_reference_comparison(tmp_path_factory, records, change, which):
    from scanner.scan.record_walk_types import map_agrees

    native_walk, python_walk = walked_log(tmp_path_factory.mktemp("log"), records)
    seen = sorted(python_walk.stats.ledger_bytes.items())
    assert sorted(native_walk.stats.ledger_bytes.items()) == seen
    items = list(seen)
    k = which % len(items) if items else 0
    if change == "bytes" and items:
        items[k] = (items[k][0], items[k][1] + 1)
    elif change == "drop" and items:
        del items[k]
    elif change == "add":
        items.append((12345, 28))
    elif change == "twice" and items:
        items.append(items[k])
    elif change == "negative ledger":
        items.append((-1, 28))
    elif change == "zero bytes":
        items.append((777, 0))
    elif change == "split" and items:  # one ledger's bytes listed in two items that sum to them
        ledger_id, ledger_bytes = items[k]
        items[k:k + 1] = [(ledger_id, ledger_bytes - 10), (ledger_id, 10)]
    data = struct.pack(f">{2 * len(items)}q", *(v for item in items for v in item))
    if change == "cut":
        data += b"\0"  # a stray byte: not a whole number of items
    for walk in (native_walk, python_walk):
        if change == "cut":  # not a map's items: only the C walker's confirmation meets such bytes
            assert walk is python_walk or not walk._core.agrees_with_map(data)
            continue
        assert walk.agrees_with_map(data) == map_agrees(data, python_walk.stats)
    if change != "cut":
        confirmed = native_walk._core.agrees_with_map(data)
        assert not confirmed or map_agrees(data, python_walk.stats)  # never confirms what the reference denies
        assert confirmed == (change == "none" or (change in ("bytes", "drop", "twice", "split") and not seen))
        assert native_walk._core.agrees_with_map(data) == confirmed  # the call's marks are cleared after it
