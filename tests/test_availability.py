"""BP-34's condensed entry availability: BookKeeper's exact bytes, round trips, malformed input, run sets."""

import random
import struct

import pytest

from scanner.audit.availability import (
    EntryAvailability,
    InvalidEntries,
    MalformedAvailability,
    SequenceGroup,
    clip_runs,
    decode_runs,
    gaps_in,
    merge_runs,
    subtract_runs,
)


def encoded(*groups):
    """Availability bytes written field by field: header (version 0, count, zeros) then each group."""
    header = struct.pack(">ii", 0, len(groups)) + bytes(56)
    return header + b"".join(struct.pack(">qqii", *group) for group in groups)


def entries_of(availability):
    return [entry for first, last in availability.runs() for entry in range(first, last + 1)]


# --- BookKeeper's bytes, byte for byte ---------------------------------------------------------

def test_formats_doc_verified_encodings():
    held = EntryAvailability.from_entry_ids([0, 1, 2, 5, 6, 7, 10, 11, 12, 20])
    assert held.encode() == bytes.fromhex(
        "00000000" "00000004" + "00" * 56
        + "0000000000000000" "0000000000000000" "00000003" "00000000"
        + "0000000000000005" "0000000000000005" "00000003" "00000000"
        + "000000000000000a" "000000000000000a" "00000003" "00000000"
        + "0000000000000014" "0000000000000014" "00000001" "00000000")
    assert EntryAvailability.from_entry_ids([]).encode() == bytes(64)
    assert EntryAvailability.from_entry_ids([7]).encode() == bytes.fromhex(
        "00000000" "00000001" + "00" * 56 + "0000000000000007" "0000000000000007" "00000001" "00000000")


@pytest.mark.parametrize("entry_ids, groups", [
    # BP-34's two examples: BookKeeper's builder gives every run its own period-0 group
    ([1, 2, 4, 5, 7, 8, 10, 11], [(1, 1, 2, 0), (4, 4, 2, 0), (7, 7, 2, 0), (10, 10, 2, 0)]),
    ([1, 2, 3, 6, 7, 8, 11, 13, 16, 17, 18, 21, 22],
     [(1, 1, 3, 0), (6, 6, 3, 0), (11, 11, 1, 0), (13, 13, 1, 0), (16, 16, 3, 0), (21, 21, 2, 0)]),
    # from BookKeeper's AvailabilityOfEntriesOfLedgerTest, repeats included
    ([1, 1, 2, 4, 5, 8, 9, 9, 9, 9, 9], [(1, 1, 2, 0), (4, 4, 2, 0), (8, 8, 2, 0)]),
    ([1, 2, 3, 5, 6, 11, 12, 13, 14, 15, 16, 17, 17, 100, 1000, 1000, 1001, 10000, 10000, 20000, 20001],
     [(1, 1, 3, 0), (5, 5, 2, 0), (11, 11, 7, 0), (100, 100, 1, 0), (1000, 1000, 2, 0),
      (10000, 10000, 1, 0), (20000, 20000, 2, 0)]),
])
def test_builder_writes_what_bookkeeper_writes(entry_ids, groups):
    held = EntryAvailability.from_entry_ids(entry_ids)
    assert held.encode() == encoded(*groups)
    assert held.entry_count == len(set(entry_ids))
    assert all(entry in held for entry in entry_ids)


def test_bp34_example_1_periodic_group_decodes():
    held = EntryAvailability.decode(encoded((1, 10, 2, 3)))
    assert entries_of(held) == [1, 2, 4, 5, 7, 8, 10, 11]
    assert held.entry_count == 8
    assert [entry for entry in range(0, 14) if entry in held] == [1, 2, 4, 5, 7, 8, 10, 11]
    assert held.encode() == encoded((1, 10, 2, 3))


def test_bp34_example_2_mixed_groups_decode():
    held = EntryAvailability.decode(encoded((1, 6, 3, 5), (11, 13, 1, 2), (16, 16, 3, 0), (21, 21, 2, 0)))
    expected = [1, 2, 3, 6, 7, 8, 11, 13, 16, 17, 18, 21, 22]
    assert entries_of(held) == expected
    assert held.entry_count == len(expected)
    assert [entry for entry in range(0, 30) if entry in held] == expected
    assert list(held.runs()) == [(1, 3), (6, 8), (11, 11), (13, 13), (16, 18), (21, 22)]


def test_bookkeeper_non_existing_entries():
    held = EntryAvailability.from_entry_ids(
        [1, 2, 3, 5, 6, 11, 12, 13, 14, 15, 16, 17, 100, 1000, 1001, 10000, 20000, 20001])
    assert not any(entry in held for entry in [0, 4, 18, 1002, 19999, 20002, 20003])


def test_adjacent_periodic_groups_join_into_one_run():
    held = EntryAvailability.decode(encoded((0, 4, 2, 4), (6, 6, 3, 0)))
    assert list(held.runs()) == [(0, 1), (4, 8)]


# --- round trips ---------------------------------------------------------------------------------

def test_random_sets_round_trip():
    rng = random.Random(20240601)
    for _ in range(300):
        limit = rng.choice([8, 64, 1000, 2**40])
        entry_ids = sorted({rng.randrange(limit) for _ in range(rng.randrange(40))})
        held = EntryAvailability.from_entry_ids(entry_ids)
        back = EntryAvailability.decode(held.encode())
        assert back == held
        assert entries_of(back) == entry_ids
        assert decode_runs(held.encode()) == tuple(back.runs()) == canonical(entry_ids)
        assert back.entry_count == len(entry_ids)
        probes = entry_ids + [rng.randrange(limit) for _ in range(20)]
        assert all((probe in back) == (probe in set(entry_ids)) for probe in probes)


def test_random_periodic_groups_round_trip():
    rng = random.Random(7)
    for _ in range(200):
        groups, start = [], rng.randrange(5)
        for _ in range(rng.randrange(1, 6)):
            size = rng.randrange(1, 4)
            period = rng.randrange(size + 1, size + 5)
            count = rng.randrange(1, 5)
            last = start + (count - 1) * period
            groups.append((start, last, size, period if count > 1 else rng.choice([0, period])))
            start = last + size + rng.randrange(0, 3)
        expected = sorted(entry for first, last, size, period in groups
                          for sequence in range(first, last + 1, period or 1)
                          for entry in range(sequence, sequence + size))
        held = EntryAvailability.decode(encoded(*groups))
        assert entries_of(held) == expected
        assert held.entry_count == len(expected)
        assert [entry for entry in range(start + 3) if entry in held] == expected
        assert held.encode() == encoded(*groups)
        assert as_set(decode_runs(encoded(*groups))) == set(expected)


def test_builder_streams_a_million_entries_into_one_group():
    held = EntryAvailability.from_entry_ids(iter(range(10, 1_000_010)))
    assert held.groups == (SequenceGroup(10, 10, 1_000_000, 0),)


def test_run_longer_than_a_32_bit_size_is_split_and_rejoined():
    held = EntryAvailability.from_runs([(5, 5 + 2**31)])
    assert held.groups == (SequenceGroup(5, 5, 2**31 - 1, 0), SequenceGroup(2**31 + 4, 2**31 + 4, 2, 0))
    assert list(EntryAvailability.decode(held.encode()).runs()) == [(5, 5 + 2**31)]
    assert held.entry_count == 2**31 + 1


@pytest.mark.parametrize("entry_ids, message", [
    ([3, 5, 4], "expected ascending order"),
    ([-1, 0], "expected 0 <= first"),
    ([2**63], "expected 0 <= first"),
])
def test_builder_rejects_bad_entry_ids(entry_ids, message):
    with pytest.raises(InvalidEntries, match=message):
        EntryAvailability.from_entry_ids(entry_ids)


# --- malformed bytes -----------------------------------------------------------------------------

@pytest.mark.parametrize("data, offset, message", [
    (bytes(63), 0, "expected a 64-byte header, got 63 bytes"),
    (struct.pack(">ii", 1, 0) + bytes(56), 0, "expected header version 0, got 1"),
    (struct.pack(">ii", -1, 0) + bytes(56), 0, "expected header version 0, got -1"),
    (struct.pack(">ii", 0, -2) + bytes(56), 4, "non-negative group count, got -2"),
    (encoded((1, 1, 1, 0)) + b"\0", 4, "1 groups need exactly 88 bytes, got 89"),
    (encoded((1, 1, 1, 0))[:-1], 4, "1 groups need exactly 88 bytes, got 87"),
    (struct.pack(">ii", 0, 2**31 - 1) + bytes(56), 4, "need exactly 51539607592 bytes, got 64"),
    (encoded((-1, -1, 1, 0)), 64, "firstSequenceStart -1 is negative"),
    (encoded((1, 1, 0, 0)), 64, "sequenceSize 0 is not positive"),
    (encoded((1, 1, -5, 0)), 64, "sequenceSize -5 is not positive"),
    (encoded((1, 1, 1, -3)), 64, "sequencePeriod -3 is negative"),
    (encoded((9, 4, 1, 0)), 64, "lastSequenceStart 4 is below firstSequenceStart 9"),
    (encoded((1, 5, 1, 0)), 64, "sequencePeriod is 0"),
    (encoded((1, 6, 1, 2)), 64, "not firstSequenceStart 1 plus a multiple of period 2"),
    (encoded((1, 7, 3, 3)), 64, "touch or overlap"),
    (encoded((2**63 - 2, 2**63 - 2, 5, 0)), 64, "ends past the largest entry id"),
    (encoded((0, 0, 3, 0), (2, 2, 1, 0)), 88, "group 1: group starts at 2, not after the previous group's last entry 2"),
    (encoded((10, 10, 1, 0), (3, 3, 1, 0)), 88, "not after the previous group's last entry 10"),
], ids=lambda value: value if isinstance(value, str) else "bytes" if isinstance(value, bytes) else None)
def test_malformed_bytes_are_typed_errors_naming_offset(data, offset, message):
    with pytest.raises(MalformedAvailability, match=message) as caught:
        EntryAvailability.decode(data, source="bookie 127.0.0.1:3181 ledger 7")
    assert caught.value.offset == offset
    assert str(caught.value).startswith(f"bookie 127.0.0.1:3181 ledger 7: offset {offset}: ")
    with pytest.raises(MalformedAvailability, match=message):
        decode_runs(data)


def test_reserved_header_bytes_are_ignored_like_bookkeeper():
    data = bytearray(encoded((4, 4, 2, 0)))
    data[20] = 0xFF
    assert list(EntryAvailability.decode(bytes(data)).runs()) == [(4, 5)]


# --- run sets ------------------------------------------------------------------------------------

def as_set(runs):
    return {entry for first, last in runs for entry in range(first, last + 1)}


def canonical(entries):
    return merge_runs((entry, entry) for entry in entries)


def test_run_operations_agree_with_sets():
    rng = random.Random(99)
    for _ in range(500):
        a = {rng.randrange(60) for _ in range(rng.randrange(40))}
        b = {rng.randrange(60) for _ in range(rng.randrange(40))}
        first, last = sorted((rng.randrange(-2, 62), rng.randrange(-2, 62)))
        runs_a, runs_b = canonical(a), canonical(b)
        assert as_set(clip_runs(runs_a, first, last)) == {e for e in a if first <= e <= last}
        assert as_set(subtract_runs(runs_a, runs_b)) == a - b
        assert as_set(gaps_in(runs_a, max(first, 0), last)) == set(range(max(first, 0), last + 1)) - a
        for result in (clip_runs(runs_a, first, last), subtract_runs(runs_a, runs_b)):
            assert all(x[1] + 1 < y[0] for x, y in zip(result, result[1:]))


def test_merge_runs_joins_overlaps_and_neighbours_in_any_order():
    assert merge_runs([(10, 12), (0, 3), (4, 4), (2, 6), (13, 13), (20, 25)]) == ((0, 6), (10, 13), (20, 25))
    with pytest.raises(InvalidEntries, match=r"run \(5, 4\)"):
        merge_runs([(5, 4)])


def test_gaps_of_a_huge_range_are_few():
    assert list(gaps_in(((10, 20), (10**15, 10**15 + 5)), 0, 10**18)) == [
        (0, 9), (21, 10**15 - 1), (10**15 + 6, 10**18)]
