"""The index's locations put in location order: a run put in order of windows of positions; runs' slices, read one
after the other, sorted (with their positions).

In the scan's native code when it runs (:mod:`scanner.native.switch`), else with pyarrow; the same result.
"""

from __future__ import annotations

import bisect
from array import array
from typing import Sequence

from scanner.native.switch import native_code
from scanner.storage.location import arrow_view, uint64_array

_POS_MASK = 0xFFFFFFFF
Column = array | memoryview  # uint64: an array('Q') or a memoryview of one
Columns = tuple[Column, Column, Column]


def sorted_by_location(locations: Column, ledger_ids: Column, entry_ids: Column, coarse: int = 0) -> Columns:
    """The three uint64 columns ordered by location >> ``coarse``, stably (the columns given may be sorted in place):
    with ``coarse``, by window of 2^coarse positions, the order within one as given."""
    native = native_code()
    if native is not None:
        native.sort_by_location(locations, ledger_ids, entry_ids, None, coarse)
        return locations, ledger_ids, entry_ids
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = [arrow_view(c) for c in (locations, ledger_ids, entry_ids)]
    keys = pc.shift_right(columns[0], pa.scalar(coarse, pa.uint64())) if coarse else columns[0]
    order = pc.sort_indices(keys)  # stable
    return tuple(uint64_array(pc.take(column, order)) for column in columns)


def merged_by_location(locations: Column, ledger_ids: Column, entry_ids: Column, positions: Column) -> None:
    """Columns made of sorted slices one after the other merged in location order (ties in slice order), in place;
    ``positions`` (as long) filled with each merged location's position."""
    native = native_code()
    if native is not None:
        native.sort_by_location(locations, ledger_ids, entry_ids, positions)
        return
    import pyarrow as pa
    import pyarrow.compute as pc

    merged = sorted_by_location(locations, ledger_ids, entry_ids)
    for column, values in zip((locations, ledger_ids, entry_ids), merged):
        memoryview(column)[:] = values
    memoryview(positions)[:] = uint64_array(pc.bit_wise_and(arrow_view(locations), pa.scalar(_POS_MASK, pa.uint64())))


def log_ids_of(sorted_locations: Sequence[int]) -> set[int]:
    """The entry log ids locations in log order point into (one search per log)."""
    found, i = set(), 0
    while i < len(sorted_locations):
        log_id = sorted_locations[i] >> 32
        found.add(log_id)
        i = bisect.bisect_left(sorted_locations, (log_id + 1) << 32, i)
    return found
