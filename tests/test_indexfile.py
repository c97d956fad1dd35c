"""`.idx` files built byte by byte: the header BookKeeper writes, the slots, and every malformation."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import struct
import sys
import tempfile
from array import array
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus import CORPUS, reference_walker
from page_cache import cached_pages
from scanner.native.switch import native_code
from scanner.storage import indexfile
from scanner.storage.entry import master_key
from scanner.storage.indexfile import (
    FETCH_AHEAD_FILES,
    BadExplicitLacLength,
    BadIndexSignature,
    BadMasterKeyLength,
    IndexFile,
    IndexFileError,
    TruncatedIndexHeader,
    UnsupportedIndexVersion,
    fetched_ahead,
    find_index_file,
    index_file_path,
    index_files,
    indexed_ledger_ids,
    read_index_files,
    read_ledger_index_files,
)
from scanner.storage.location import EntryLocation, nonzero_slots

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from bench_scale import drop_from_page_cache  # noqa: E402

KEY = master_key(b"secret")
PAGE = 8192

NOBODY = 65534  # the unprivileged user and group of Debian and most Linux systems


def header(version=1, key=KEY, state_bits=0, lac=b"", key_length=None, lac_length=None) -> bytes:
    head = b"BKLE" + struct.pack(">ii", version, len(key) if key_length is None else key_length) + key
    head += struct.pack(">i", state_bits)
    if version >= 1:
        head += struct.pack(">i", len(lac) if lac_length is None else lac_length) + lac
    return head.ljust(1024, b"\0")


def body(slots: dict[int, EntryLocation], pages: int = 1) -> bytes:
    raw = bytearray(PAGE * pages)
    for entry_id, location in slots.items():
        struct.pack_into(">q", raw, 8 * entry_id, location.encode())
    return bytes(raw)


def write(tmp_path: Path, data: bytes, name="5.idx") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "ledger_id, relative",
    [(1, "0/1/1.idx"), (5, "0/5/5.idx"), (0x1234, "12/34/1234.idx"), (123456789, "cd/15/75bcd15.idx"),
     (2**40 + 5, "0/5/10000000005.idx")],
)
def test_index_path_is_grandparent_parent_and_hex_name(ledger_id, relative):
    assert index_file_path(ledger_id) == PurePosixPath(relative)


def test_negative_ledger_id_has_no_index_path():
    with pytest.raises(ValueError):
        index_file_path(-1)


def test_the_documented_fenced_ledger_5_file(tmp_path):
    locations = {0: EntryLocation(0, 1028), 1: EntryLocation(0, 1128), 2: EntryLocation(0, 1228),
                 3: EntryLocation(1, 1028)}
    with IndexFile(write(tmp_path, header(state_bits=1) + body(locations))) as index:
        assert index.version == 1
        assert index.state.master_key == bytes.fromhex("e793cbc379107648537183605cd361d3bb789a39")
        assert index.state.fenced is True
        assert index.state.explicit_lac is None
        assert list(index.locations()) == sorted(locations.items())


def test_explicit_lac_buffer_is_returned_as_stored(tmp_path):
    lac = bytes.fromhex("0000000000001234" "0000000000000001" "00000000cb3abbc8")
    with IndexFile(write(tmp_path, header(lac=lac) + body({}))) as index:
        assert index.state.explicit_lac == lac
        assert index.state.fenced is False


def test_version_0_header_has_no_explicit_lac_field(tmp_path):
    # in version 0 the 4 bytes after the state bits are already zero padding, whatever they hold
    data = bytearray(header(version=0, state_bits=1) + body({7: EntryLocation(2, 5000)}))
    struct.pack_into(">i", data, 12 + len(KEY) + 4, 3)
    with IndexFile(write(tmp_path, bytes(data))) as index:
        assert (index.version, index.state.fenced, index.state.explicit_lac) == (0, True, None)
        assert list(index.locations()) == [(7, EntryLocation(2, 5000))]


def test_empty_slots_are_no_entries_and_pages_follow_each_other(tmp_path):
    locations = {0: EntryLocation(0, 1028), 1023: EntryLocation(3, 9000), 1024: EntryLocation(4, 1028),
                 2047: EntryLocation(5, 2**32 - 1)}
    with IndexFile(write(tmp_path, header() + body(locations, pages=2))) as index:
        assert list(index.locations()) == sorted(locations.items())


def test_header_only_file_has_no_entries(tmp_path):
    with IndexFile(write(tmp_path, header())) as index:
        assert list(index.locations()) == []


def test_short_last_page_keeps_whole_slots_and_drops_a_partial_one(tmp_path):
    full = header() + body({0: EntryLocation(0, 1028), 9: EntryLocation(0, 2000), 10: EntryLocation(0, 3000)})
    cut_inside_slot_10 = full[: 1024 + 8 * 10 + 5]
    with IndexFile(write(tmp_path, cut_inside_slot_10)) as index:
        assert list(index.locations()) == [(0, EntryLocation(0, 1028)), (9, EntryLocation(0, 2000))]


def test_slot_values_are_read_unsigned(tmp_path):
    # a damaged slot with the top bit set names an entry log id no bookie uses, never a negative one
    data = bytearray(header() + body({}))
    struct.pack_into(">Q", data, 1024, 0xFFFFFFFF_00000404)
    with IndexFile(write(tmp_path, bytes(data))) as index:
        assert list(index.locations()) == [(0, EntryLocation(0xFFFFFFFF, 1028))]


def expect_error(tmp_path, data: bytes, error_type: type, offset: int) -> IndexFileError:
    path = write(tmp_path, data)
    with pytest.raises(error_type) as caught:
        IndexFile(path)
    assert caught.value.offset == offset
    assert str(path) in str(caught.value) and f"offset {offset}" in str(caught.value)
    return caught.value


def test_bad_signature(tmp_path):
    error = expect_error(tmp_path, b"BKLO" + header()[4:], BadIndexSignature, 0)
    assert "BKLE" in str(error)


@pytest.mark.parametrize("version", [2, 7, -1])
def test_unknown_header_version(tmp_path, version):
    error = expect_error(tmp_path, header(version=version), UnsupportedIndexVersion, 4)
    assert str(version) in str(error)


@pytest.mark.parametrize("key_length", [-1, -2**31, 1024 - 12 - 8 + 1, 2**31 - 1])
def test_master_key_length_negative_or_past_the_header(tmp_path, key_length):
    error = expect_error(tmp_path, header(key_length=key_length), BadMasterKeyLength, 8)
    assert str(key_length) in str(error)


def test_longest_master_key_that_fits(tmp_path):
    key = b"k" * (1024 - 12 - 8)
    with IndexFile(write(tmp_path, header(key=key))) as index:
        assert index.state.master_key == key


@pytest.mark.parametrize("lac_length", [-1, 1, 15, 1024 - 40 + 1])
def test_explicit_lac_length_below_16_or_past_the_header(tmp_path, lac_length):
    error = expect_error(tmp_path, header(lac_length=lac_length), BadExplicitLacLength, 12 + len(KEY) + 4)
    assert str(lac_length) in str(error)


def test_explicit_lac_that_fills_the_header_exactly(tmp_path):
    lac = b"\1" * (1024 - 40)
    with IndexFile(write(tmp_path, header(lac=lac))) as index:
        assert index.state.explicit_lac == lac


@pytest.mark.parametrize("size", [0, 4, 11])
def test_header_too_short_for_the_fixed_fields(tmp_path, size):
    expect_error(tmp_path, header()[:size], TruncatedIndexHeader, size)


def test_header_cut_inside_the_master_key(tmp_path):
    expect_error(tmp_path, header()[:30], TruncatedIndexHeader, 30)


def test_header_cut_inside_the_explicit_lac(tmp_path):
    expect_error(tmp_path, header(lac=b"\2" * 24)[:50], TruncatedIndexHeader, 50)


def test_short_header_whose_fields_all_fit_is_accepted(tmp_path):
    # BookKeeper reads min(size, 1024) header bytes: a file cut after the fields still parses
    with IndexFile(write(tmp_path, header(state_bits=1)[:40])) as index:
        assert index.state.fenced is True
        assert list(index.locations()) == []


def test_index_files_are_found_in_any_index_dir_and_an_rloc_is_the_fallback(tmp_path):
    first, second = tmp_path / "a" / "current", tmp_path / "b" / "current"
    for ledger_id, current, suffix in [(5, second, ".idx"), (6, first, ".rloc"), (7, first, ".rloc"),
                                       (7, second, ".idx")]:
        path = current / index_file_path(ledger_id, suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(header())
    assert find_index_file([first, second], 5) == second / "0/5/5.idx"
    assert find_index_file([first, second], 6) == first / "0/6/6.rloc"
    assert find_index_file([first, second], 7) == second / "0/7/7.idx"
    assert find_index_file([first, second], 8) is None
    assert sorted(indexed_ledger_ids(first)) == [6, 7]
    assert sorted(indexed_ledger_ids(second)) == [5, 7]


def test_only_hex_named_index_files_two_levels_deep_count_as_ledgers(tmp_path):
    current = tmp_path / "current"
    for relative in ["0/5/5.idx", "cd/15/75bcd15.idx", "0/5/notes.txt", "0/5/XYZ.idx", "0/6.idx", "1.idx",
                     "0/f/10000000f.idx"]:
        path = current / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    (current / "0" / "5" / "9.idx").mkdir()
    assert sorted(indexed_ledger_ids(current)) == [5, 123456789, 4294967311]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_files_read_ahead_come_in_listing_order_already_open_and_read_like_any_other(tmp_path):
    for ledger_id in range(1, 8):
        path = tmp_path / index_file_path(ledger_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(header() + body({0: EntryLocation(ledger_id, 1024 + ledger_id)}))
    listed = list(index_files(tmp_path))
    before = _open_fds()
    read = []
    for ledger_id, path, guest in fetched_ahead(index_files(tmp_path), window=3):
        assert guest is not None
        with IndexFile(path, guest) as index:
            read.append((ledger_id, path, [(e, loc.entry_log_id, loc.pos) for e, loc in index.locations()]))
    assert [(ledger_id, path) for ledger_id, path, _ in read] == listed
    assert all(slots == [(0, ledger_id, 1024 + ledger_id)] for ledger_id, _, slots in read)
    assert _open_fds() == before


def test_files_read_ahead_and_never_read_are_closed_when_the_reader_stops_early(tmp_path):
    for ledger_id in range(1, 20):
        path = tmp_path / index_file_path(ledger_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(header())
    before = _open_fds()
    ahead = fetched_ahead(list(index_files(tmp_path)), window=8)  # listed first: its scandirs hold fds too
    ledger_id, path, guest = next(ahead)
    assert _open_fds() == before + 9  # the one handed out and the eight behind it
    IndexFile(path, guest).close()
    ahead.close()
    assert _open_fds() == before


def test_a_file_gone_before_it_could_be_opened_ahead_is_handed_out_without_one(tmp_path):
    path = tmp_path / index_file_path(5)
    path.parent.mkdir(parents=True)
    path.write_bytes(header())
    ahead = list(fetched_ahead([(5, str(path)), (6, str(tmp_path / "0" / "6" / "6.idx"))]))
    assert [(ledger_id, guest is None) for ledger_id, _, guest in ahead] == [(5, False), (6, True)]
    IndexFile(path, ahead[0][2]).close()


@settings(max_examples=150, deadline=None)
@given(slots=st.one_of(st.lists(st.integers(0, 2**64 - 1), max_size=40),
                       st.integers(1, 1500).flatmap(lambda n: st.lists(st.sampled_from([0, 1, 2**64 - 1]),
                                                                       min_size=n, max_size=n))),
       first=st.integers(0, 2**40))
def test_the_used_slots_of_a_page_are_its_entries_whatever_their_number(slots, first):
    # Every slot used, a few slots (sifted by iterators) and many slots (sifted by pyarrow).
    entry_ids, values = nonzero_slots(array("Q", slots), first)
    assert list(zip(entry_ids, values)) == [(first + i, raw) for i, raw in enumerate(slots) if raw]


def _read_both_ways(files) -> list:
    """read_index_files natively and with the reference forced: both must give the same, errors worded alike."""
    return _reading_both_ways(lambda: read_index_files(list(files)))


def _reading_both_ways(reader) -> list:
    """What ``reader()`` reads, natively and with the reference forced: both must give the same, errors worded alike."""
    def read():
        return [(ledger_id, None if ids is None else list(ids), repr(found) if ids is None else list(found))
                for ledger_id, ids, found in reader()]

    assert native_code() is not None, "the native code is not built"
    native = read()
    with reference_walker():
        reference = read()
    assert native == reference
    return native


def test_the_native_reader_reads_every_kind_of_file_as_the_python_reader_does(tmp_path):
    location = EntryLocation(3, 1028)
    contents = {
        1: header() + body({0: location, 1: location})[:40] + b"\xff" * 8,  # read unsigned
        2: header(version=0, state_bits=1) + body({}),
        3: header(lac=bytes(16)) + body({0: location})[:8 * 3 + 5],  # size not a whole number of slots
        4: header(),
        5: b"",
        6: header()[:11],
        7: b"BKLX" + header()[4:],
        8: header(version=2),
        9: header(key_length=-1),
        10: header(key_length=2**31 - 1),
        11: header(lac_length=15),
        12: header(lac_length=1024 - 40 + 1),
        13: header()[:12 + len(KEY) + 2],
        14: header(lac=bytes(20))[:12 + len(KEY) + 8 + 10],
        15: header()[:12 + len(KEY) + 8],
        16: header() + body({i: EntryLocation(1, 1024 + i) for i in range(0, 9000, 7)}, pages=9),  # past one read
        17: header() + body({8191: location}, pages=8),  # the last slot of the first read
        18: header(lac=bytes(1024 - 12 - len(KEY) - 8)) + body({2: location}),
    }
    for ledger_id, data in contents.items():
        path = tmp_path / index_file_path(ledger_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    gone = (19, str(tmp_path / index_file_path(19)))
    read = _read_both_ways([*index_files(tmp_path), gone])
    by_ledger = {ledger_id: (ids, found) for ledger_id, ids, found in read}
    assert sorted(by_ledger) == list(range(1, 19))  # the file gone is left out
    assert by_ledger[1] == ([0, 1, 5], [location.encode()] * 2 + [2**64 - 1])
    assert by_ledger[3] == ([0], [location.encode()])
    assert by_ledger[16][0] == list(range(0, 9000, 7))
    assert by_ledger[17] == ([8191], [location.encode()])
    assert sorted(ledger_id for ledger_id, (ids, _) in by_ledger.items() if ids is None) == list(range(5, 15))
    assert by_ledger[7][1].startswith("BadIndexSignature(")


@pytest.mark.parametrize("cold", [True, False])
def test_the_native_reader_closes_every_file_it_opened_ahead_when_stopped_early(tmp_path, cold):
    for ledger_id in range(1, 200):
        path = tmp_path / index_file_path(ledger_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(header() + body({0: EntryLocation(1, 1024 + ledger_id)}))
    files = list(index_files(tmp_path))
    if cold:
        drop_from_page_cache(path for _, path in files)
        if any(cached_pages(Path(path))[0] for _, path in files):
            pytest.skip("this filesystem keeps file pages in memory whatever the advice (tmpfs?)")
    before = _open_fds()
    reader = read_index_files(files)
    assert next(reader)[0] == files[0][0]
    # The window after the one read is open, waiting for the disk; files the page cache holds whole were read as
    # they were opened, and closed. Cold, the disk may have answered for some of the window before their turn came
    # (1 run in 30 here: 3 of 64 still waiting): at least one waits, never more than the window.
    held = _open_fds() - before
    assert (0 < held <= FETCH_AHEAD_FILES) if cold else held == 0, held
    reader.close()
    assert _open_fds() == before
    assert [ledger_id for ledger_id, _, _ in _read_both_ways(files)] == [ledger_id for ledger_id, _ in files]


@pytest.mark.parametrize("cold", [True, False])
def test_files_that_outgrow_the_native_columns_read_as_the_python_reader_does(tmp_path, monkeypatch, cold):
    # The native reader's columns start with room for one page's slots a window: the files left out for want of room
    # go to the Python reader, and the columns grow for the windows after.
    monkeypatch.setattr(indexfile, "_WINDOW_SLOTS", PAGE // 8)
    rng = random.Random(5)
    for ledger_id in range(1, 3 * FETCH_AHEAD_FILES):
        pages = rng.choice([1, 1, 2, 3])
        entries = rng.sample(range(PAGE // 8 * pages), rng.randrange(1, 40))
        path = tmp_path / index_file_path(ledger_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(header() + body({e: EntryLocation(ledger_id % 3, 1024 + e) for e in entries}, pages=pages))
    files = list(index_files(tmp_path))
    if cold:
        drop_from_page_cache(path for _, path in files)
        if any(cached_pages(Path(path))[0] for _, path in files):
            pytest.skip("this filesystem keeps file pages in memory whatever the advice (tmpfs?)")
    read = _read_both_ways(files)
    assert [ledger_id for ledger_id, _, _ in read] == [ledger_id for ledger_id, _ in files]
    assert all(ids is not None and len(ids) > 0 for _, ids, _ in read)


def _read_by_name_both_ways(current_dirs: list[Path], ledger_ids: list[int]) -> list:
    """read_ledger_index_files natively and with the reference forced: both must give the same, errors worded alike."""
    return _reading_both_ways(lambda: read_ledger_index_files(current_dirs, ledger_ids))


def test_a_ledgers_index_file_is_read_where_the_bookie_looks_for_it(tmp_path):
    # BookKeeper's IndexPersistenceMgr.findIndexFile: the first index dir that has the ledger's .idx; here, else a
    # .rloc left by an interrupted move. Nothing is listed: what is not at its name is not read.
    first, second = tmp_path / "d0" / "current", tmp_path / "d1" / "current"
    first.mkdir(parents=True)
    second.mkdir(parents=True)

    def put(current: Path, ledger_id: int, suffix: str, entry_id: int) -> None:
        path = current / index_file_path(ledger_id, suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(header() + body({entry_id: EntryLocation(1, 1024 + entry_id)}))

    put(first, 1, ".idx", 0)
    put(second, 1, ".idx", 1)  # the first dir's is the one the bookie reads
    put(second, 2, ".idx", 2)
    put(first, 3, ".rloc", 3)
    put(second, 3, ".idx", 4)  # a .idx in any dir before a .rloc
    put(second, 4, ".rloc", 5)
    put(first, 0x1234, ".idx", 6)
    (first / "0" / "6").mkdir(parents=True)
    (first / "0" / "6" / "6.idx").mkdir()  # a directory of its name is no index file
    (first / "0" / "7").write_bytes(b"")  # a file where a directory should be
    misnamed = first / "0" / "8" / "08.idx"  # not the name the bookie reads
    misnamed.parent.mkdir(parents=True)
    misnamed.write_bytes(header() + body({0: EntryLocation(1, 1024)}))
    (first / "0" / "9").mkdir()
    (first / "0" / "9" / "9.idx").write_bytes(b"BKLX" + header()[4:])
    (first / "0" / "a").mkdir()
    (first / "0" / "a" / "a.idx").symlink_to(first / "0" / "1" / "1.idx")  # read through the link, as the bookie does
    wanted = [9, 0x1234, 5, 4, 3, 2, 1, 6, 7, 8, 10, 2**64 - 1]
    read = _read_by_name_both_ways([first, second], wanted)
    found = {ledger_id: ids for ledger_id, ids, _ in read}
    assert [ledger_id for ledger_id, _, _ in read] == [9, 0x1234, 4, 3, 2, 1, 10]  # the order asked
    assert found == {9: None, 0x1234: [6], 4: [5], 3: [4], 2: [2], 1: [0], 10: [0]}
    assert read[0][2].startswith("BadIndexSignature(")


def test_reading_by_name_keeps_the_windows_and_the_large_files_of_the_listed_reader(tmp_path, monkeypatch):
    # Many ledgers, some missing, some past one read, columns too short at first: as read_index_files reads them.
    monkeypatch.setattr(indexfile, "_WINDOW_SLOTS", PAGE // 8)
    rng = random.Random(7)
    current = tmp_path / "current"
    present = []
    for ledger_id in range(1, 4 * FETCH_AHEAD_FILES):
        if rng.random() < 0.2:
            continue
        pages = rng.choice([1, 1, 2, 9])
        entries = rng.sample(range(PAGE // 8 * pages), rng.randrange(1, 40))
        path = current / index_file_path(ledger_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(header() + body({e: EntryLocation(ledger_id % 3, 1024 + e) for e in entries}, pages=pages))
        present.append(ledger_id)
    by_name = _read_by_name_both_ways([current], list(range(4 * FETCH_AHEAD_FILES)))
    listed = _read_both_ways(sorted(index_files(current)))
    assert [ledger_id for ledger_id, _, _ in by_name] == present
    assert by_name == listed


def test_reading_by_name_needs_every_index_dir(tmp_path):
    for walker in (contextlib.nullcontext, reference_walker):
        with walker(), pytest.raises(FileNotFoundError):
            list(read_ledger_index_files([tmp_path / "nowhere"], [1]))


def _list_both_ways(current: Path) -> list[tuple[int, str]]:
    """index_files natively and with the reference forced: both must list the same, in the same order."""
    assert native_code() is not None, "the native code is not built"
    native = list(index_files(current))
    with reference_walker():
        assert native == list(index_files(current))
    return native


@pytest.mark.parametrize("bookie", ["bookie1", "bookie2", "corrupted/bookie1-corrupted"])
def test_the_native_listing_lists_a_real_bookie_as_the_python_listing_does(bookie):
    current = CORPUS / bookie / "ledgers" / "current"
    listed = _list_both_ways(current)
    assert sorted(ledger_id for ledger_id, _ in listed) == sorted(
        int(path.stem, 16) for path in current.glob("*/*/*.idx"))


def test_the_native_listing_keeps_every_rule_of_the_python_listing(tmp_path):
    current = tmp_path / "current"
    files = ["0/5/5.idx", "0/5/0005.idx", "cd/15/75bcd15.idx", "0/5/ABC.idx", "0/5/notes.txt", "0/5/5.idx.bak",
             "0/5/.idx", "0/5/a.IDX", "0/5/7fffffffffffffff.idx", "0/5/8000000000000000.idx",
             "0/5/00000000000000001.idx", "0/5/0000000000000002.idx", "0/6.idx", "1.idx", "0/6/6.rloc",
             "0/6/6.idx", "0/7/7.rloc", "0/8/8.rloc", "0/9/9.rloc", "0/a/a b.idx", "0/a/b.idx ", "0/a/c.idx/d.idx",
             "0/a/e.rlocx"]
    for relative in files:
        path = current / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(header())
    (current / "0" / "7" / "7.idx").mkdir()  # not a file: the .rloc beside it is read
    (current / "0" / "8" / "8.idx").symlink_to(current / "0" / "6" / "6.idx")  # a file through a symlink
    (current / "0" / "9" / "b.idx").symlink_to(current / "0" / "6" / "6.idx")  # a symlink is not listed
    (current / "0" / "9" / "c.idx").symlink_to(current / "nowhere")
    (current / "0" / "b").symlink_to(current / "0" / "5")  # nor a directory through one
    (current / "c").symlink_to(current / "0")
    odd = current / os.fsdecode(b"\xff") / os.fsdecode(b"\xfe\x01")
    odd.mkdir(parents=True)
    (odd / "d.idx").write_bytes(header())
    (current / "e").mkdir()  # empty
    listed = _list_both_ways(current)
    assert sorted((ledger_id, str(Path(path).relative_to(current))) for ledger_id, path in listed) == sorted([
        (5, "0/5/5.idx"), (5, "0/5/0005.idx"), (123456789, "cd/15/75bcd15.idx"),
        (2**63 - 1, "0/5/7fffffffffffffff.idx"), (2, "0/5/0000000000000002.idx"), (6, "0/6/6.idx"),
        (7, "0/7/7.rloc"), (9, "0/9/9.rloc"), (13, str(odd.relative_to(current) / "d.idx")),
    ])


def test_a_directory_the_listing_cannot_read_stops_both_listings_alike():
    with tempfile.TemporaryDirectory() as top:  # not pytest's: its tree is closed to other users
        Path(top).chmod(0o755)
        current = Path(top) / "current"
        for ledger_id in (5, 6):
            path = current / index_file_path(ledger_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(header())
        locked = current / "0" / "6"
        locked.chmod(0)
        try:
            assert _unprivileged(_listing_errors, current) == [[errno.EACCES, str(locked)]] * 2
        finally:
            locked.chmod(0o755)


def _listing_errors(current: Path) -> list[list]:
    errors = []
    for walker in (contextlib.nullcontext, reference_walker):
        with walker(), pytest.raises(PermissionError) as raised:
            list(index_files(current))
        errors.append([raised.value.errno, raised.value.filename])
    return errors


def _unprivileged(function, *args):
    """``function(*args)``'s result (JSON), in a child process without root's right to read any directory:
    as the unprivileged user ``nobody`` when this process is root."""
    if os.geteuid() != 0:
        return json.loads(json.dumps(function(*args)))
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write_end, json.dumps(function(*args)).encode())
            status = 0
        except BaseException as error:
            os.write(write_end, json.dumps({"failed": repr(error)}).encode())
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        result = json.loads(answer.read())
    os.waitpid(child, 0)
    return result
