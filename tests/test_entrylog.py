"""The entry-log reader on hand-made files: clean logs of both loggers, and every kind of damage."""

from __future__ import annotations

import logging
import os
import struct
import tracemalloc

import pytest

from scanner.native.switch import native_code
from scanner.scan.record_walk import walk_records
from scanner.scan.record_walk_in_c import NativeWalk
from scanner.scan.record_walk_in_python import PythonWalk
from scanner.storage.entry import DigestType, DigestVerifier, build_entry
from scanner.storage.entrylog import (
    BadHeader,
    BadRecordHeader,
    BrokenLedgersMap,
    EntryLog,
    EntryLogError,
    InvalidRecordLength,
    MissingEntry,
    MissingEntryLog,
    RecordPastEnd,
    TruncatedRecord,
    UnexpectedPadding,
    UnexpectedZeroFill,
    WrongEntry,
    ZeroedHeader,
)

BLOCK = 4096


# --- building files --------------------------------------------------------------------------


def entry(ledger_id: int, entry_id: int, payload: bytes = b"payload!", digest=DigestType.CRC32C) -> bytes:
    return build_entry(ledger_id, entry_id, entry_id - 1, 100 + entry_id, payload, digest)


def record(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def header(map_offset: int = 0, count: int = 0, version: int = 1, fingerprint: bytes = b"BKLO") -> bytes:
    return struct.pack(">4siqi", fingerprint, version, map_offset, count).ljust(1024, b"\0")


def map_batch(items: list[tuple[int, int]], count: int | None = None, ids=(-1, -2)) -> bytes:
    body = struct.pack(">qqi", *ids, len(items) if count is None else count)
    return record(body + b"".join(struct.pack(">qq", *item) for item in items))


def ledger_bytes(records: list[bytes]) -> dict[int, int]:
    sizes: dict[int, int] = {}
    for rec in records:
        ledger_id = struct.unpack_from(">q", rec, 4)[0]
        sizes[ledger_id] = sizes.get(ledger_id, 0) + len(rec)
    return sizes


def classic_log(records: list[bytes], with_map: bool = True, tail: bytes = b"") -> bytes:
    """A DefaultEntryLogger file: header, records, then (optionally) the ledgers map."""
    data = b"".join(records) + tail
    if not with_map:
        return header() + data
    sizes = sorted(ledger_bytes(records).items())
    return header(1024 + len(data), len(sizes)) + data + map_batch(sizes)


def pad_block(data: bytes, fill: bytes = b"\xf0") -> bytes:
    return data + fill * (-len(data) % BLOCK)


def direct_log(flushes: list[list[bytes]], with_map: bool = True, preallocated: int = 16 * BLOCK) -> bytes:
    """A DirectEntryLogger file: 4 KiB header block with the dummy record, padded flushes, map, zeros."""
    body = b"".join(pad_block(b"".join(recs)) for recs in flushes)
    map_offset = BLOCK + len(body)
    sizes = sorted(ledger_bytes([r for recs in flushes for r in recs]).items())
    if with_map:
        body += pad_block(map_batch(sizes))
    dummy = struct.pack(">iq", BLOCK - 1024 - 4, -1)
    head = header(map_offset if with_map else 0, len(sizes) if with_map else 0)
    data = (head + dummy).ljust(BLOCK, b"\0") + body
    return data.ljust(max(preallocated, len(data)), b"\0")


@pytest.fixture
def write(tmp_path):
    def write_file(data: bytes, name: str = "0.log") -> str:
        path = tmp_path / name
        path.write_bytes(data)
        return str(path)

    return write_file


def walk(path: str, **kwargs) -> tuple[list[tuple[int, int, int, bytes]], list[EntryLogError], EntryLog]:
    with EntryLog(path, 0, **kwargs) as log:
        found = [(r.pos, r.ledger_id, r.entry_id, bytes(r.entry)) for r in log.records()]
        return found, list(log.problems), log


def only(problems: list[EntryLogError], kind: type) -> EntryLogError:
    assert [type(p) for p in problems] == [kind], problems
    return problems[0]


RECORDS = [record(entry(5, 0)), record(entry(0x1234, 0, b"other", DigestType.CRC32)), record(entry(5, 1, b"x" * 300))]


# --- clean files -----------------------------------------------------------------------------


def test_finished_log_yields_every_record_at_its_location_and_a_matching_map(write):
    path = write(classic_log(RECORDS))
    found, problems, log = walk(path)
    assert problems == []
    assert [(pos, lid, eid) for pos, lid, eid, _ in found] == [
        (1028, 5, 0), (1028 + len(RECORDS[0]), 0x1234, 0), (1028 + len(RECORDS[0]) + len(RECORDS[1]), 5, 1)]
    assert [body for *_, body in found] == [rec[4:] for rec in RECORDS]
    assert log.header.ledgers_map_offset == 1024 + sum(map(len, RECORDS))
    assert (log.header.direct, log.header.data_start) == (False, 1024)
    with EntryLog(path, 0) as again:
        assert again.ledgers_map() == ledger_bytes(RECORDS)
        list(again.records())
        assert again.valid_end == again.header.ledgers_map_offset
        assert again.problems == []


def test_log_without_map_is_walked_to_the_end_of_the_file(write):
    path = write(classic_log(RECORDS, with_map=False))
    found, problems, log = walk(path)
    assert problems == [] and len(found) == 3
    assert log.valid_end == os.path.getsize(path)
    with EntryLog(path, 0) as again:
        assert again.ledgers_map() is None


@pytest.mark.parametrize("size", [0, 1, 4, 19])
def test_preallocated_or_unflushed_logs_have_no_header_and_no_records(write, size):
    path = write(header()[:size])
    found, problems, log = walk(path)
    assert (log.header, found, problems) == (None, [], [])
    with EntryLog(path, 0) as again:
        assert again.ledgers_map() is None
        with pytest.raises(MissingEntry):
            again.read_entry(1028, 5, 0)


def test_a_log_flushed_only_up_to_part_of_its_header_is_not_damage(write):
    found, problems, log = walk(write(header()[:500]))
    assert (found, problems) == ([], [])
    assert log.header.version == 1


def test_map_batches_add_up_across_batches_and_sum_repeated_ledgers(write):
    data = b"".join(RECORDS)
    batches = map_batch([(5, 10), (7, 3)]) + map_batch([(5, 1)])
    path = write(header(1024 + len(data), 3) + data + batches)
    with EntryLog(path, 0) as log:
        assert log.ledgers_map() == {5: 11, 7: 3}
        assert log.problems == []


def test_a_walk_can_resume_at_a_record_boundary(write):
    path = write(classic_log(RECORDS))
    with EntryLog(path, 0) as log:
        first = next(log.records())
        rest = [(r.ledger_id, r.entry_id) for r in log.records(start=first.pos + len(first.entry))]
        assert rest == [(0x1234, 0), (5, 1)]
        with pytest.raises(ValueError):
            log.records(start=20)


# --- damaged headers and maps ----------------------------------------------------------------


def test_wrong_fingerprint_is_a_bad_header_and_nothing_is_walked(write):
    path = write(header(fingerprint=b"XKLO") + b"".join(RECORDS))
    found, problems, _ = walk(path)
    problem = only(problems, BadHeader)
    assert found == []
    assert path in str(problem) and "offset 0" in str(problem) and "BKLO" in str(problem)


def test_a_preallocated_log_of_zeros_is_a_zeroed_header_and_nothing_is_walked(write):
    # DirectEntryLogger's new log before its header block is written: its full size, every byte zero.
    found, problems, log = walk(write(bytes(16 * BLOCK)))
    problem = only(problems, ZeroedHeader)
    assert found == [] and log.header is None and problem.offset == 0
    assert "fingerprint b'\\x00\\x00\\x00\\x00', expected b'BKLO': the header is all zeros" in str(problem)


def test_zeros_where_only_the_fingerprint_should_be_are_a_bad_header_not_a_zeroed_one(write):
    # Nothing BookKeeper writes leaves a zero fingerprint beside other header bytes.
    _, problems, _ = walk(write(bytes(4) + header()[4:] + b"".join(RECORDS)))
    assert type(only(problems, BadHeader)) is BadHeader


def test_a_zeroed_header_is_read_again_as_the_file_is_now(write):
    path = write(bytes(16 * BLOCK))
    with EntryLog(path, 0) as log:
        assert log.header_zeroed()
        with open(path, "r+b") as f:  # the writer's queued header block lands
            f.write(direct_log([], with_map=False)[:BLOCK])
        assert not log.header_zeroed()


def test_unknown_header_version_is_reported_but_records_are_still_read(write):
    found, problems, _ = walk(write(header(version=7) + b"".join(RECORDS)))
    assert "version 7" in str(only(problems, BadHeader))
    assert len(found) == 3


def test_map_offset_past_the_end_is_a_broken_map_and_the_walk_goes_to_eof(write):
    data = classic_log(RECORDS, with_map=False)
    path = write(header(10**9, 2) + data[1024:])
    found, problems, log = walk(path)
    assert len(found) == 3
    assert "1000000000" in str(only(problems, BrokenLedgersMap))
    assert log.ledgers_map() is None and len(log.problems) == 1


def test_map_offset_inside_the_header_is_a_broken_map(write):
    path = write(header(100, 2) + b"".join(RECORDS))
    found, problems, _ = walk(path)
    assert len(found) == 3
    only(problems, BrokenLedgersMap)


def test_map_offset_into_the_middle_of_a_record(write):
    data = b"".join(RECORDS)
    into_second = 1024 + len(RECORDS[0]) + 10
    path = write(header(into_second, 2) + data)
    with EntryLog(path, 0) as log:
        assert [r.entry_id for r in log.records()] == [0]
        crossing = only(log.problems, RecordPastEnd)
        assert (crossing.offset, crossing.end, crossing.ledger_id) == (1024 + len(RECORDS[0]), into_second, 0x1234)
        assert log.ledgers_map() is None
        assert isinstance(log.problems[-1], BrokenLedgersMap) and len(log.problems) == 2


@pytest.mark.parametrize(
    "batches, count, expected",
    [
        (map_batch([(5, 88)]), 2, "the header says 2"),
        (map_batch([(5, 88)])[:30], 1, "past the end of the file"),
        (map_batch([(5, 88)], ids=(3, 0)), 1, "expected ledger -1 entry -2"),
        (map_batch([(5, 88)], count=4), 1, "lists 4 ledgers"),
        (record(b"\xff" * 8 + b"\xff" * 7 + b"\xfe"), 1, "expected 20 + 16*n"),
        (map_batch([(5, 88)]) + b"\x00\x01", 1, "stray bytes"),
        (b"", 1, "the header says 1"),
    ],
)
def test_broken_ledgers_maps(write, batches, count, expected):
    data = b"".join(RECORDS)
    path = write(header(1024 + len(data), count) + data + batches)
    with EntryLog(path, 0) as log:
        assert log.ledgers_map() is None
        problem = only(log.problems, BrokenLedgersMap)
        assert expected in str(problem)
        assert [r.entry_id for r in log.records()] == [0, 0, 1]


# --- damaged records -------------------------------------------------------------------------


@pytest.mark.parametrize("kept, readable_ids",
                         [(2, False), (4 + 10, False), (4 + 32, True), (len(RECORDS[2]) - 1, True)])
def test_record_cut_by_the_end_of_the_file(write, kept, readable_ids):
    path = write(classic_log(RECORDS[:2], with_map=False) + RECORDS[2][:kept])
    found, problems, log = walk(path)
    assert [(lid, eid) for _, lid, eid, _ in found] == [(5, 0), (0x1234, 0)]
    cut = only(problems, TruncatedRecord)
    assert cut.offset == 1024 + len(RECORDS[0]) + len(RECORDS[1]) == log.valid_end
    assert (cut.ledger_id, cut.entry_id) == ((5, 1) if readable_ids else (None, None))
    assert f"offset {cut.offset}" in str(cut) and path in str(cut)


def test_a_log_truncated_before_its_map_reports_the_cut_record_and_the_lost_map(write):
    whole = classic_log(RECORDS)
    cut_at = 1024 + len(RECORDS[0]) + 20
    path = write(whole[:cut_at])
    with EntryLog(path, 0) as log:
        assert len(list(log.records())) == 1
        assert log.ledgers_map() is None
        kinds = {type(p) for p in log.problems}
        assert kinds == {TruncatedRecord, BrokenLedgersMap}


def test_a_length_pointing_past_the_end_in_a_file_without_a_map_is_a_cut_record(write):
    bad = struct.pack(">i", 4_000_000) + RECORDS[2][4:]
    found, problems, _ = walk(write(classic_log(RECORDS[:2], with_map=False) + bad))
    assert len(found) == 2
    cut = only(problems, TruncatedRecord)
    assert (cut.length, cut.ledger_id, cut.entry_id) == (4_000_000, 5, 1)


def test_a_length_pointing_into_the_ledgers_map_is_a_record_past_the_end_not_a_cut(write):
    records = RECORDS[:2] + [struct.pack(">i", len(RECORDS[2]) + 40) + RECORDS[2][4:]]
    data = classic_log(records)
    found, problems, _ = walk(write(data))
    assert len(found) == 2
    assert type(only(problems, RecordPastEnd)) is RecordPastEnd


@pytest.mark.parametrize("length, expected", [(-7, UnexpectedPadding), (8, InvalidRecordLength),
                                              (0x7FFFFFFF, InvalidRecordLength)])
def test_impossible_lengths_stop_the_walk(write, length, expected):
    bad = struct.pack(">i", length) + RECORDS[2][4:]
    path = write(classic_log(RECORDS[:2], with_map=False) + bad + RECORDS[0])
    tracemalloc.start()
    found, problems, _ = walk(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(found) == 2
    problem = only(problems, expected)
    assert problem.offset == 1024 + len(RECORDS[0]) + len(RECORDS[1])
    assert peak < 1 << 20  # nothing sized by the bad length was allocated


def test_a_record_with_intact_framing_but_an_impossible_header_is_stepped_over(write):
    short = record(struct.pack(">qqi", 5, 9, 0))  # 20 bytes: no room for the 32-byte entry header
    negative = record(entry(5, 2)[:8] + struct.pack(">q", -4096) + entry(5, 2)[16:])
    found, problems, _ = walk(write(classic_log([RECORDS[0], short, negative, RECORDS[2]], with_map=False)))
    assert [(lid, eid) for _, lid, eid, _ in found] == [(5, 0), (5, 1)]
    assert [type(p) for p in problems] == [BadRecordHeader, BadRecordHeader]
    assert (problems[1].ledger_id, problems[1].entry_id) == (5, -4096)


def test_zero_fill_ends_a_log_without_map_quietly(write):
    path = write(classic_log(RECORDS[:2], with_map=False) + bytes(5000) + RECORDS[2])
    found, problems, log = walk(path)
    assert (len(found), problems) == (2, [])
    assert log.valid_end == 1024 + len(RECORDS[0]) + len(RECORDS[1])


def test_zeros_before_the_ledgers_map_are_damage(write):
    data = RECORDS[0] + bytes(64)
    path = write(header(1024 + len(data), 1) + data + map_batch([(5, len(RECORDS[0]))]))
    found, problems, log = walk(path)
    assert len(found) == 1
    assert only(problems, UnexpectedZeroFill).offset == 1024 + len(RECORDS[0])


def test_problems_are_not_repeated_by_a_second_walk(write):
    path = write(classic_log(RECORDS[:2], with_map=False) + RECORDS[2][:40])
    with EntryLog(path, 0) as log:
        list(log.records())
        list(log.records())
        assert len(log.problems) == 1


def test_a_deleted_log_is_a_missing_entry_log(tmp_path):
    with pytest.raises(MissingEntryLog) as raised:
        EntryLog(tmp_path / "1a.log", 26)
    assert "1a.log" in str(raised.value) and raised.value.entry_log_id == 26


# --- DirectEntryLogger files -----------------------------------------------------------------


def test_direct_log_skips_dummy_record_and_padding(write):
    flushes = [RECORDS[:2], [RECORDS[2]]]
    path = write(direct_log(flushes))
    found, problems, log = walk(path)
    assert problems == []
    assert (log.header.direct, log.header.data_start) == (True, BLOCK)
    assert [(pos, lid, eid) for pos, lid, eid, _ in found] == [
        (BLOCK + 4, 5, 0), (BLOCK + 4 + len(RECORDS[0]), 0x1234, 0), (2 * BLOCK + 4, 5, 1)]
    assert log.valid_end == 3 * BLOCK == log.header.ledgers_map_offset
    with EntryLog(path, 0) as again:
        assert again.ledgers_map() == ledger_bytes(RECORDS)
        assert again.problems == []
        assert [r.entry_id for r in again.records(start=1024)] == [0, 0, 1]  # a legacy start skips the dummy


def test_direct_log_without_map_ends_at_the_preallocated_zeros(write):
    found, problems, log = walk(write(direct_log([RECORDS[:2], [RECORDS[2]]], with_map=False)))
    assert (len(found), problems) == (3, [])
    assert log.valid_end == 3 * BLOCK  # after the last flush's padding, where the zeros begin


def _written_under_the_walk(write) -> tuple[str, int, bytes]:
    """A DirectEntryLogger log being written: a first flush (a record and one whose digest fails), zeros past it;
    and the next flush, which lands where the zeros are (its offset) once the walk has read them."""
    damaged = bytearray(RECORDS[1])
    damaged[-1] ^= 0xFF
    first = [RECORDS[0], bytes(damaged)]
    path = write(direct_log([first], with_map=False))
    return path, BLOCK + len(pad_block(b"".join(first))), pad_block(RECORDS[2])


@pytest.mark.parametrize("walker", ["records", "python", "native"])
def test_a_record_written_after_the_walk_read_zeros_there_ends_the_walk_quietly(write, walker, caplog):
    # Seen beside a live DirectEntryLogger bookie: the walk read zeros where the writer had not written yet, the
    # entry log's second look found a whole record there and called it "length 19554 is shorter than the 32-byte
    # entry header", a damaged log that was not.
    caplog.set_level(logging.INFO, logger="scanner.storage.entrylog")
    path, frontier, flush = _written_under_the_walk(write)
    verifiers = {5: DigestVerifier(DigestType.CRC32C), 0x1234: DigestVerifier(DigestType.CRC32)}
    with EntryLog(path, 0) as log:
        if walker == "records":
            walking = log.records()
            seen = [next(walking).ledger_id, next(walking).ledger_id]  # the whole first flush, read in one chunk
        else:
            if walker == "native" and native_code() is None:
                pytest.fail("the native walker is not built")
            walking = (PythonWalk if walker == "python" else NativeWalk)(log, verifiers.get).failures()
            seen = [next(walking).ledger_id]  # the failing record: the walk holds the whole file's chunk by now
        with open(path, "r+b") as f:
            f.seek(frontier)
            f.write(flush)
        seen += [getattr(rest, "ledger_id", None) for rest in walking]
        assert seen == ([5, 0x1234] if walker == "records" else [0x1234])
        assert log.problems == []
        assert log.valid_end == frontier
        assert f"a record was written at offset {frontier} after the walk read zeros there" in caplog.text
    found, problems, _ = walk(path)
    assert [lid for _, lid, _, _ in found] == [5, 0x1234, 5] and problems == []  # the next walk reads it


def test_direct_padding_shorter_than_a_length_prefix(write):
    # The first flush ends 2 bytes before a block boundary: the length read there straddles it.
    filler = record(entry(9, 0, b"f" * (BLOCK - 2 - 4 - 36)))
    assert len(filler) == BLOCK - 2
    found, problems, _ = walk(write(direct_log([[filler], [RECORDS[0]]], with_map=False)))
    assert problems == []
    assert [(pos, lid) for pos, lid, _, _ in found] == [(BLOCK + 4, 9), (2 * BLOCK + 4, 5)]


def test_direct_negative_length_that_is_not_padding(write):
    data = bytearray(direct_log([RECORDS[:2]], with_map=False))
    struct.pack_into(">i", data, BLOCK + len(RECORDS[0]) + len(RECORDS[1]), -5)
    found, problems, _ = walk(write(bytes(data)))
    assert len(found) == 2
    only(problems, InvalidRecordLength)


# --- reading one entry by location -----------------------------------------------------------


def test_read_entry_returns_the_stored_entry_or_a_typed_error(write):
    data = classic_log(RECORDS, with_map=False)
    path = write(data)
    third = 1024 + len(RECORDS[0]) + len(RECORDS[1]) + 4
    with EntryLog(path, 0) as log:
        assert bytes(log.read_entry(1028, 5, 0)) == RECORDS[0][4:]
        with pytest.raises(WrongEntry) as wrong:
            log.read_entry(1028, 5, 1)
        assert (wrong.value.found_ledger_id, wrong.value.found_entry_id) == (5, 0)
        assert "offset 1024" in str(wrong.value)
        with pytest.raises(MissingEntry):
            log.read_entry(len(data) + 100, 5, 0)
        with pytest.raises(MissingEntry):
            log.read_entry(500, 5, 0)
        with pytest.raises(InvalidRecordLength):
            log.read_entry(1036, 5, 0)  # its "length" is the low half of ledger id 5
    path = write(data[:third + 50], "1.log")
    with EntryLog(path, 1) as log:
        with pytest.raises(TruncatedRecord) as cut:
            log.read_entry(third, 5, 1)
        assert (cut.value.offset, cut.value.ledger_id, cut.value.entry_id) == (third - 4, 5, 1)


# --- verification and pacing -----------------------------------------------------------------


def test_a_walk_yields_only_failures_and_counts_the_rest(write):
    damaged = bytearray(RECORDS[2])
    damaged[-1] ^= 0xFF
    short_for_hmac = record(entry(8, 0, b"", DigestType.DUMMY))  # 32 bytes: too short for a 20-byte MAC
    records = [RECORDS[0], RECORDS[1], bytes(damaged), record(entry(99, 0)), short_for_hmac]
    asked = []
    verifiers = {5: DigestVerifier(DigestType.CRC32C), 0x1234: DigestVerifier(DigestType.CRC32),
                 8: DigestVerifier(DigestType.HMAC, b"pw")}

    def verifier_for(ledger_id):
        asked.append(ledger_id)
        return verifiers.get(ledger_id)

    path = write(classic_log(records))
    with EntryLog(path, 0) as log:
        walk = walk_records(log, verifier_for)
        failures = list(walk.failures())
        assert [(f.ledger_id, f.entry_id) for f in failures] == [(5, 1), (8, 0)]
        assert failures[0].pos == 1024 + len(RECORDS[0]) + len(RECORDS[1]) + 4
        assert "CRC32C digest mismatch" in failures[0].reason and "shorter" in failures[1].reason
        assert sorted(asked) == [5, 8, 99, 0x1234]
        stats = walk.stats
        assert (stats.entries_verified, stats.entries_failed, stats.entries_skipped) == (2, 2, 1)
        assert stats.bytes_scanned == log.header.ledgers_map_offset - 1024
        assert stats.ledgers_seen == {5, 0x1234, 99, 8}


def test_pace_is_told_every_byte_walked_in_chunks_of_at_least_a_mebibyte(write):
    records = [record(entry(5, i, os.urandom(3000))) for i in range(1200)]
    path = write(classic_log(records, with_map=False))
    calls = []
    with EntryLog(path, 0) as log:
        assert sum(1 for _ in log.records(pace=calls.append)) == 1200
        assert sum(calls) == log.valid_end - 1024 == os.path.getsize(path) - 1024
    assert len(calls) >= 3 and all(n >= 1 << 20 for n in calls[:-1])


def test_closing_while_records_are_still_held(write):
    log = EntryLog(write(classic_log(RECORDS)), 0)
    kept = list(log.records())
    log.close()
    assert bytes(kept[0].entry) == RECORDS[0][4:]


def test_counters_are_true_when_the_consumer_stops_early(write):
    damaged = bytearray(RECORDS[0])
    damaged[-1] ^= 0xFF
    path = write(classic_log([bytes(damaged), RECORDS[2], RECORDS[2]], with_map=False))
    with EntryLog(path, 0) as log:
        walk = walk_records(log, lambda ledger_id: DigestVerifier(DigestType.CRC32C))
        failures = walk.failures()
        next(failures)
        failures.close()
        stats = walk.stats
        assert (stats.entries_failed, stats.entries_verified, stats.bytes_scanned) == (1, 0, len(damaged))
        assert log.valid_end is None
