"""The index's locations, sorted by where they point, spilled to the scanner's scratch space.

The pass reads the index in its own order (ledger by ledger) and the entry logs in theirs (log by log,
front to back). To check that every location the index holds is a record of that entry without a
random read per entry, the locations are sorted by (entry log, pos) in runs of bounded size, each
written to a file; the walk of a log then gathers that log's slice of every run, a window of
positions at a time, so memory holds one run while sorting and one window while walking, however
many ledgers, entries and logs the bookie has.
"""

from __future__ import annotations

import bisect
import mmap
import shutil
import tempfile
from array import array
from pathlib import Path
from typing import Iterator

from scanner.storage.entrylog import ExpectedRecords
from scanner.storage.location import arrow_view, uint64_array

RUN_ENTRIES = 1 << 18  # locations sorted in memory at once: 6 MiB of arrays
BATCH_ENTRIES = 1 << 18  # locations of consecutive logs gathered at once for their walks: 8 MiB of arrays
WINDOW_BYTES = 64 << 20  # positions of one log gathered at once for its walk, when it alone has more
_POS_MASK = 0xFFFFFFFF


class _Run:
    """One sorted run on disk: three native uint64 columns (location, ledger, entry), mapped read-only."""

    def __init__(self, path: Path, count: int):
        self.count = count
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if count else None
        view = memoryview(self._map).cast("Q") if count else memoryview(array("Q"))
        self.locations = view[:count]
        self.ledger_ids = view[count:2 * count]
        self.entry_ids = view[2 * count:]

    def span(self, low: int, high: int, start: int = 0) -> tuple[int, int]:
        """Indexes [i, j) of the locations in [low, high), searching from ``start``."""
        i = bisect.bisect_left(self.locations, low, start)
        return i, bisect.bisect_left(self.locations, high, i)

    def forget(self) -> None:
        """Let the kernel take back the pages read so far (they are our own file's, not the bookie's)."""
        if self._map is not None:
            self._map.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        for view in (self.locations, self.ledger_ids, self.entry_ids):
            view.release()
        if self._map is not None:
            self._map.close()


class LocationRuns:
    """Collects (ledger, entry, location) triples; then serves them per entry log, sorted by position."""

    def __init__(self, scratch: Path | None, run_entries: int = RUN_ENTRIES):
        self._dir = Path(tempfile.mkdtemp(prefix="locations-", dir=scratch))
        self._run_entries = run_entries
        self._locations, self._ledger_ids, self._entry_ids = array("Q"), array("Q"), array("Q")
        self._runs: list[_Run] = []
        self._batch: _Batch | None = None
        self._log_ids: set[int] = set()  # every entry log some location points into
        self._sorted_log_ids: list[int] | None = None  # once the runs are complete
        self.count = 0

    def add(self, ledger_id: int, entry_ids: array, raw_locations: array) -> None:
        """The ledger's indexed entries and their encoded locations (``EntryLocation.encode``)."""
        self._locations.extend(raw_locations)
        self._entry_ids.extend(entry_ids)
        self._ledger_ids.extend(array("Q", [ledger_id]) * len(entry_ids))
        self.count += len(entry_ids)
        if len(self._locations) >= self._run_entries:
            self._spill()

    def finish(self) -> None:
        """No more locations: the rest goes to a run of its own."""
        if self._locations:
            self._spill()

    def _spill(self) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        count = len(self._locations)
        columns = [arrow_view(c) for c in (self._locations, self._ledger_ids, self._entry_ids)]
        order = pc.sort_indices(columns[0])
        path = self._dir / f"run-{len(self._runs)}"
        with open(path, "wb") as f:
            for column in columns:
                uint64_array(pc.take(column, order)).tofile(f)
        self._log_ids.update(pc.unique(pc.shift_right(columns[0], pa.scalar(32, pa.uint64()))).to_pylist())
        self._locations, self._ledger_ids, self._entry_ids = array("Q"), array("Q"), array("Q")
        self._runs.append(_Run(path, count))

    def entry_log_ids(self) -> list[int]:
        """Every entry log some location points into, ascending (noted while spilling: looking them up in
        the runs would page every run's locations in)."""
        if self._sorted_log_ids is None:
            self._sorted_log_ids = sorted(self._log_ids)
        return self._sorted_log_ids

    def windows(self, entry_log_id: int, start_pos: int = 0) -> Iterator[ExpectedRecords]:
        """The log's expected records from ``start_pos`` on, ascending by pos, a window of positions at a time.

        Logs are mostly asked for in id order: the locations of the next logs are gathered from the runs
        together, up to BATCH_ENTRIES of them, so that a bookie of many small logs costs one gather per
        batch, not one per log. A log with more locations than that is gathered a window at a time.
        """
        base = entry_log_id << 32
        batch = self._batch
        if batch is None or not batch.first_log <= entry_log_id < batch.end_log or start_pos < batch.start_pos(base):
            batch = self._batch = self._gather_batch(entry_log_id, start_pos)
        if batch is not None:
            records = batch.records(base, start_pos)
            if len(records.pos):
                yield records
            return
        yield from self._gather_windows(base, start_pos)

    def _gather_batch(self, entry_log_id: int, start_pos: int) -> "_Batch | None":
        """The locations from (``entry_log_id``, ``start_pos``) up to the end of the furthest log that keeps
        them within BATCH_ENTRIES; None when the first log alone has more."""
        low = (entry_log_id << 32) + start_pos
        end_log = entry_log_id + 1
        if self._count(low, end_log << 32) > BATCH_ENTRIES:
            return None
        later = [log_id for log_id in self.entry_log_ids() if log_id > entry_log_id]
        step = 1
        while later:  # widen while it fits: 1, 2, 4, ... more logs, and back when it does not
            candidate = later[min(step, len(later)) - 1] + 1
            if self._count(low, candidate << 32) <= BATCH_ENTRIES:
                end_log = candidate
                later = [log_id for log_id in later if log_id >= candidate]
                step *= 2
            elif step > 1:
                step //= 2
            else:
                break
        taken = [(run, *run.span(low, end_log << 32)) for run in self._runs]
        batch = _Batch(entry_log_id, end_log, low, *_sorted_columns([(run, i, j) for run, i, j in taken if j > i]))
        for run in self._runs:
            run.forget()
        return batch

    def _count(self, low: int, high: int) -> int:
        return sum(j - i for i, j in (run.span(low, high) for run in self._runs))

    def _gather_windows(self, base: int, start_pos: int) -> Iterator[ExpectedRecords]:
        try:
            spans = [run.span(base + start_pos, base + (1 << 32)) for run in self._runs]
            low = start_pos
            while any(i < j for i, j in spans):
                high = min(low + WINDOW_BYTES, 1 << 32)
                cut = [run.span(base + low, base + high, i)[1] for run, (i, _) in zip(self._runs, spans)]
                taken = [(run, i, c) for run, (i, _), c in zip(self._runs, spans, cut) if c > i]
                spans = [(c, j) for (_, j), c in zip(spans, cut)]
                if taken:
                    locations, ledger_ids, entry_ids = _sorted_columns(taken)
                    yield ExpectedRecords(_positions(locations), ledger_ids, entry_ids,
                                          high if any(i < j for i, j in spans) else 1 << 64)
                low = high
        finally:  # also when the walk stops taking windows: a log's records end before its last indexed one
            for run in self._runs:
                run.forget()

    def close(self) -> None:
        for run in self._runs:
            run.close()
        self._runs.clear()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "LocationRuns":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Batch:
    """The sorted locations of logs [first_log, end_log) from ``low`` on, as native arrays sliced per log."""

    def __init__(self, first_log: int, end_log: int, low: int, locations: array, ledger_ids: array, entry_ids: array):
        self.first_log, self.end_log, self._low = first_log, end_log, low
        self._locations, self._ledger_ids, self._entry_ids = locations, ledger_ids, entry_ids
        self._positions = _positions(locations)

    def start_pos(self, base: int) -> int:
        """The first position of the log at ``base`` the batch holds locations from."""
        return max(0, self._low - base)

    def records(self, base: int, start_pos: int) -> ExpectedRecords:
        i = bisect.bisect_left(self._locations, base + start_pos)
        j = bisect.bisect_left(self._locations, base + (1 << 32), i)
        return ExpectedRecords(memoryview(self._positions)[i:j], memoryview(self._ledger_ids)[i:j],
                               memoryview(self._entry_ids)[i:j], 1 << 64)


def _sorted_columns(taken: list[tuple[_Run, int, int]]) -> tuple[array, array, array]:
    """(locations, ledger ids, entry ids) of the runs' slices ``taken``, merged in location order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not taken:
        return array("Q"), array("Q"), array("Q")

    def column(part: str) -> "pa.Array":
        return pa.concat_arrays([pa.Array.from_buffers(pa.uint64(), j - i, [None, pa.py_buffer(getattr(run, part)[i:j])])
                                 for run, i, j in taken])

    locations, ledger_ids, entry_ids = column("locations"), column("ledger_ids"), column("entry_ids")
    if len(taken) > 1:  # each run is sorted; their slices interleave
        order = pc.sort_indices(locations)
        locations, ledger_ids, entry_ids = (pc.take(c, order) for c in (locations, ledger_ids, entry_ids))
    return uint64_array(locations), uint64_array(ledger_ids), uint64_array(entry_ids)


def _positions(locations: array) -> array:
    """The positions (low 32 bits) of encoded locations."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not locations:
        return array("Q")
    return uint64_array(pc.bit_wise_and(arrow_view(locations), pa.scalar(_POS_MASK, pa.uint64())))
