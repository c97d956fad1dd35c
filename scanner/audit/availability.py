"""BP-34's condensed list of the entries a bookie holds for one ledger (``AvailabilityOfEntriesOfLedger``).

Bytes: a 64-byte header (``>i`` version 0, ``>i`` group count, zeros), then 24 bytes per sequence
group (``>q`` firstSequenceStart, ``>q`` lastSequenceStart, ``>i`` sequenceSize, ``>i`` sequencePeriod).
A group holds the sequences of ``size`` consecutive entries starting at first, first + period, ..., last.

A run is an inclusive ``(first, last)`` pair of entry ids. Runs are *canonical* when they are
ascending, disjoint and never adjacent; the run operations below take and return canonical runs.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

HEADER_SIZE = 64
HEADER_VERSION = 0
GROUP_SIZE = 24
MAX_ENTRY_ID = 2**63 - 1
MAX_SEQUENCE_SIZE = 2**31 - 1
_HEADER = struct.Struct(">ii")
_GROUP = struct.Struct(">qqii")

Run = tuple[int, int]


class AvailabilityError(ValueError):
    """Entry availability that cannot be built or read."""


class InvalidEntries(AvailabilityError):
    """Entry ids or runs from a caller that are negative, reversed or out of order."""


class MalformedAvailability(AvailabilityError):
    """Encoded availability bytes that break the format."""

    def __init__(self, source: str, offset: int, problem: str):
        super().__init__(f"{source}: offset {offset}: {problem}")
        self.source = source
        self.offset = offset
        self.problem = problem


@dataclass(frozen=True, slots=True)
class SequenceGroup:
    """Sequences of ``sequence_size`` entries starting every ``sequence_period`` entries (period 0: one)."""

    first_sequence_start: int
    last_sequence_start: int
    sequence_size: int
    sequence_period: int

    @property
    def last_entry_id(self) -> int:
        return self.last_sequence_start + self.sequence_size - 1

    @property
    def entry_count(self) -> int:
        span = self.last_sequence_start - self.first_sequence_start
        sequences = span // self.sequence_period + 1 if span else 1
        return sequences * self.sequence_size

    def __contains__(self, entry_id: int) -> bool:
        if not self.first_sequence_start <= entry_id <= self.last_entry_id:
            return False
        offset = entry_id - self.first_sequence_start
        if self.sequence_period:
            offset %= self.sequence_period
        return offset < self.sequence_size


_Fields = tuple[int, int, int, int]  # a group as stored: first start, last start, size, period


def _fields(group: SequenceGroup) -> _Fields:
    return group.first_sequence_start, group.last_sequence_start, group.sequence_size, group.sequence_period


def _sequence_runs(groups: Iterable[_Fields]) -> Iterator[Run]:
    for first, last, size, period in groups:
        if period:
            for start in range(first, last + 1, period):
                yield start, start + size - 1
        else:  # a single sequence: the only kind BookKeeper writes
            yield first, first + size - 1


def _check_groups(groups: Iterable[_Fields]) -> None:
    previous_last = -1
    for index, (first, last, size, period) in enumerate(groups):
        problem = _group_problem(first, last, size, period)
        if problem is None and first <= previous_last:
            problem = f"group starts at {first}, not after the previous group's last entry {previous_last}"
        if problem is not None:
            raise MalformedAvailability("sequence groups", HEADER_SIZE + GROUP_SIZE * index,
                                        f"group {index}: {problem}")
        previous_last = last + size - 1


def _group_problem(first: int, last: int, size: int, period: int) -> str | None:
    if first < 0:
        return f"firstSequenceStart {first} is negative"
    if size < 1:
        return f"sequenceSize {size} is not positive"
    if period < 0:
        return f"sequencePeriod {period} is negative"
    if last < first:
        return f"lastSequenceStart {last} is below firstSequenceStart {first}"
    if last != first:
        if period == 0:
            return f"sequences start at {first} and {last} but sequencePeriod is 0"
        if (last - first) % period:
            return f"lastSequenceStart {last} is not firstSequenceStart {first} plus a multiple of period {period}"
        if period <= size:
            return f"sequencePeriod {period} <= sequenceSize {size}: the group's sequences touch or overlap"
    if last > MAX_ENTRY_ID - size + 1:
        return f"the group ends past the largest entry id {MAX_ENTRY_ID}"
    return None


@dataclass(frozen=True, slots=True)
class EntryAvailability:
    """Which entries of one ledger a bookie holds, as ascending, disjoint sequence groups."""

    groups: tuple[SequenceGroup, ...] = ()

    def __post_init__(self) -> None:
        _check_groups(map(_fields, self.groups))

    @classmethod
    def from_runs(cls, runs: Iterable[Run]) -> EntryAvailability:
        """Groups for runs given in ascending order of their first entry, exactly as BookKeeper's builder makes them.

        Each maximal run becomes one group with period 0 (BookKeeper never merges runs into periodic
        groups); a run longer than a 32-bit sequence size is split across several groups.
        """
        return cls(tuple(SequenceGroup(first, first, size, 0) for first, size in _sequences(_coalesce(runs))))

    @classmethod
    def from_entry_ids(cls, entry_ids: Iterable[int]) -> EntryAvailability:
        """Groups for ascending entry ids (repeats allowed), streamed: memory grows with groups, not entries."""
        return cls.from_runs((entry_id, entry_id) for entry_id in entry_ids)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, source: str = "availability bytes") -> EntryAvailability:
        """Parse the ``AvailabilityOfEntriesOfLedger`` bytes; ``source`` names them in errors."""
        return cls(tuple(SequenceGroup(*fields) for fields in _unpack(data, source)))

    def encode(self) -> bytes:
        """The ``AvailabilityOfEntriesOfLedger`` bytes."""
        out = bytearray(HEADER_SIZE + GROUP_SIZE * len(self.groups))
        _HEADER.pack_into(out, 0, HEADER_VERSION, len(self.groups))
        for index, group in enumerate(self.groups):
            _GROUP.pack_into(out, HEADER_SIZE + GROUP_SIZE * index, group.first_sequence_start,
                             group.last_sequence_start, group.sequence_size, group.sequence_period)
        return bytes(out)

    @property
    def entry_count(self) -> int:
        return sum(group.entry_count for group in self.groups)

    def __contains__(self, entry_id: int) -> bool:
        index = bisect_right(self.groups, entry_id, key=_group_start) - 1
        return index >= 0 and entry_id in self.groups[index]

    def runs(self) -> Iterator[Run]:
        """Canonical runs of the entries held (adjacent groups joined)."""
        return _coalesce(_sequence_runs(map(_fields, self.groups)))


def encode_runs(runs: Sequence[Run]) -> bytes:
    """The ``AvailabilityOfEntriesOfLedger`` bytes of canonical ``runs``: ``EntryAvailability.from_runs(runs).encode()``,
    without building the groups (the audit's hot path)."""
    groups = [_GROUP.pack(first, first, size, 0) for first, size in _sequences(runs)]
    return _HEADER.pack(HEADER_VERSION, len(groups)) + bytes(HEADER_SIZE - _HEADER.size) + b"".join(groups)


def _sequences(runs: Iterable[Run]) -> Iterator[tuple[int, int]]:
    """(first entry, size) of each sequence of canonical runs: a run longer than a 32-bit size is several."""
    for first, last in runs:
        while first <= last:
            size = min(last - first + 1, MAX_SEQUENCE_SIZE)
            yield first, size
            first += size


def decode_runs(data: bytes | bytearray | memoryview, source: str = "availability bytes") -> tuple[Run, ...]:
    """Canonical runs straight from ``AvailabilityOfEntriesOfLedger`` bytes, without building groups.

    Same checks and errors as ``EntryAvailability.decode``; the audit's hot path.
    """
    return tuple(_coalesce(_sequence_runs(_unpack(data, source))))


def _unpack(data: bytes | bytearray | memoryview, source: str) -> list[_Fields]:
    view = memoryview(data).cast("B")
    if len(view) < HEADER_SIZE:
        raise MalformedAvailability(source, 0, f"expected a {HEADER_SIZE}-byte header, got {len(view)} bytes")
    version, count = _HEADER.unpack_from(view, 0)
    if version != HEADER_VERSION:
        raise MalformedAvailability(source, 0, f"expected header version {HEADER_VERSION}, got {version}")
    if count < 0:
        raise MalformedAvailability(source, 4, f"expected a non-negative group count, got {count}")
    expected = HEADER_SIZE + GROUP_SIZE * count
    if len(view) != expected:
        raise MalformedAvailability(source, 4, f"{count} groups need exactly {expected} bytes, got {len(view)}")
    # the reserved header bytes are ignored, as BookKeeper's reader does
    groups = list(_GROUP.iter_unpack(view[HEADER_SIZE:]))
    try:
        _check_groups(groups)
    except MalformedAvailability as error:
        raise MalformedAvailability(source, error.offset, error.problem) from None
    return groups


def _group_start(group: SequenceGroup) -> int:
    return group.first_sequence_start


def _coalesce(runs: Iterable[Run]) -> Iterator[Run]:
    """Canonical runs from runs ascending by first entry; overlapping or adjacent ones are joined."""
    current_first = current_last = None
    for first, last in runs:
        if not 0 <= first <= last <= MAX_ENTRY_ID:
            raise InvalidEntries(f"run ({first}, {last}): expected 0 <= first <= last <= {MAX_ENTRY_ID}")
        if current_first is None:
            current_first, current_last = first, last
        elif first < current_first:
            raise InvalidEntries(f"run ({first}, {last}) comes after a run starting at {current_first}: "
                                 "expected ascending order")
        elif first <= current_last + 1:
            current_last = max(current_last, last)
        else:
            yield current_first, current_last
            current_first, current_last = first, last
    if current_first is not None:
        yield current_first, current_last


def merge_runs(runs: Iterable[Run]) -> tuple[Run, ...]:
    """Canonical form of runs in any order: sorted, with overlapping and adjacent runs joined."""
    return tuple(_coalesce(sorted(runs)))


def clip_runs(runs: Sequence[Run], first: int, last: int) -> tuple[Run, ...]:
    """The part of canonical ``runs`` inside the inclusive range [first, last]."""
    start = bisect_left(runs, first, key=_run_last)
    clipped = list(runs[start:bisect_right(runs, last, lo=start, key=_run_first)])
    if clipped:
        if clipped[0][0] < first:
            clipped[0] = (first, clipped[0][1])
        if clipped[-1][1] > last:
            clipped[-1] = (clipped[-1][0], last)
    return tuple(clipped)


def _run_first(run: Run) -> int:
    return run[0]


def _run_last(run: Run) -> int:
    return run[1]


def subtract_runs(runs: Sequence[Run], removed: Sequence[Run]) -> tuple[Run, ...]:
    """Entries of canonical ``runs`` that are not in canonical ``removed``."""
    kept = []
    start = 0
    for first, last in runs:
        while start < len(removed) and removed[start][1] < first:
            start += 1
        index = start
        while first <= last and index < len(removed) and removed[index][0] <= last:
            removed_first, removed_last = removed[index]
            if removed_first > first:
                kept.append((first, removed_first - 1))
            first = max(first, removed_last + 1)
            index += 1
        if first <= last:
            kept.append((first, last))
    return tuple(kept)


def gaps_in(runs: Sequence[Run], first: int, last: int) -> tuple[Run, ...]:
    """Runs of the entries in [first, last] that canonical ``runs`` miss."""
    clipped = clip_runs(runs, first, last)
    if not clipped:
        return ((first, last),) if first <= last else ()
    # canonical runs are never adjacent, so there is a gap between every two of them
    gaps = [(before[1] + 1, after[0] - 1) for before, after in zip(clipped, clipped[1:])]
    if clipped[0][0] > first:
        gaps.insert(0, (first, clipped[0][0] - 1))
    if clipped[-1][1] < last:
        gaps.append((clipped[-1][1] + 1, last))
    return tuple(gaps)


def run_group(first: int, last: int) -> SequenceGroup:
    """The one-sequence group of the entries first..last."""
    return SequenceGroup(first, first, last - first + 1, 0)


def periodic_groups(first: int, last: int, period: int, member: Callable[[int], bool]) -> tuple[SequenceGroup, ...]:
    """Exactly the entries of [first, last] that ``member`` accepts, as groups ascending by first entry.

    ``member`` must depend on the entry id modulo ``period`` only (a bookie's write sets do). The cost
    grows with ``period``, never with ``last - first``: the whole periods in the middle become one group
    per run of members within a period; the partial periods at both ends are listed entry by entry.
    """
    if first > last:
        return ()
    outside = next((offset for offset in range(period) if not member(offset)), None)
    if outside is None:
        return (run_group(first, last),)
    # windows of one period that start at a non-member: no run of members crosses a window's edge
    window_start = first + (outside - first) % period
    windows = max(0, (last + 1 - window_start) // period)
    groups = list(_listed_groups(first, min(window_start, last + 1) - 1, member))
    if windows:
        for run_first, run_last in _member_runs(window_start, window_start + period - 1, member):
            groups.append(SequenceGroup(run_first, run_first + (windows - 1) * period, run_last - run_first + 1,
                                        period if windows > 1 else 0))
    groups += _listed_groups(window_start + windows * period, last, member)
    return tuple(_absorb_ends(sorted(groups, key=_group_start), period))


def _absorb_ends(groups: list[SequenceGroup], period: int) -> list[SequenceGroup]:
    """Fold a listed run into the repeated group it continues (one period before its first or after its last)."""
    singles = {(g.first_sequence_start, g.sequence_size): g for g in groups if g.sequence_period == 0}
    absorbed = set()
    result = []
    for group in groups:
        if group.sequence_period == 0:
            continue
        first, last = group.first_sequence_start, group.last_sequence_start
        before = singles.get((first - period, group.sequence_size))
        if before is not None:
            first, absorbed = first - period, absorbed | {before}
        after = singles.get((last + period, group.sequence_size))
        if after is not None:
            last, absorbed = last + period, absorbed | {after}
        result.append(SequenceGroup(first, last, group.sequence_size, period))
    result += [g for g in groups if g.sequence_period == 0 and g not in absorbed]
    return sorted(result, key=_group_start)


def _member_runs(first: int, last: int, member: Callable[[int], bool]) -> Iterator[Run]:
    start = None
    for entry_id in range(first, last + 1):
        if member(entry_id) and start is None:
            start = entry_id
        elif not member(entry_id) and start is not None:
            yield start, entry_id - 1
            start = None
    if start is not None:
        yield start, last


def _listed_groups(first: int, last: int, member: Callable[[int], bool]) -> Iterator[SequenceGroup]:
    for run_first, run_last in _member_runs(first, last, member):
        yield run_group(run_first, run_last)


def groups_entry_count(groups: Iterable[SequenceGroup]) -> int:
    return sum(group.entry_count for group in groups)
