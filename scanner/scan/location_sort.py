"""The index's locations put in location order: a run sorted, sorted runs' slices merged (with their positions).

In the scan's native code when it runs (:mod:`scanner.scan.native`), else with pyarrow; the same result.
"""

from __future__ import annotations

import bisect
from array import array

from scanner.scan.native import native_code
from scanner.storage.location import arrow_view, uint64_array

_POS_MASK = 0xFFFFFFFF
Columns = tuple[array, array, array]


def sorted_by_location(locations: array, ledger_ids: array, entry_ids: array) -> Columns:
    """The three ``array('Q')`` columns ordered by location (the arrays given may be sorted in place)."""
    native = native_code()
    if native is not None:
        native.sort_by_location(locations, ledger_ids, entry_ids)
        return locations, ledger_ids, entry_ids
    import pyarrow.compute as pc

    columns = [arrow_view(c) for c in (locations, ledger_ids, entry_ids)]
    order = pc.sort_indices(columns[0])
    return tuple(uint64_array(pc.take(column, order)) for column in columns)


def merged_by_location(slices: list[Columns]) -> tuple[array, array, array, array]:
    """(locations, ledger ids, entry ids, positions) of sorted ``slices``, merged in location order."""
    total = sum(len(locations) for locations, _, _ in slices)
    native = native_code()
    if native is not None:
        merged = tuple(array("Q", bytes(8 * total)) for _ in range(4))
        native.merge_by_location(slices, *merged)
        return merged
    import pyarrow as pa
    import pyarrow.compute as pc

    if not total:
        return array("Q"), array("Q"), array("Q"), array("Q")
    columns = [pa.concat_arrays([arrow_view(s[which]) for s in slices]) for which in range(3)]
    order = pc.sort_indices(columns[0])  # each slice is sorted; they interleave
    locations, ledger_ids, entry_ids = (uint64_array(pc.take(column, order)) for column in columns)
    positions = uint64_array(pc.bit_wise_and(arrow_view(locations), pa.scalar(_POS_MASK, pa.uint64())))
    return locations, ledger_ids, entry_ids, positions


def log_ids_of(sorted_locations: array) -> set[int]:
    """The entry log ids sorted locations point into (one search per log)."""
    found, i = set(), 0
    while i < len(sorted_locations):
        log_id = sorted_locations[i] >> 32
        found.add(log_id)
        i = bisect.bisect_left(sorted_locations, (log_id + 1) << 32, i)
    return found
