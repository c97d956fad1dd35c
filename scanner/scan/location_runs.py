"""The index's locations, put in order of where they point, spilled to the scanner's scratch space.

The pass reads the index in its own order (ledger by ledger) and the entry logs in theirs (log by log,
front to back). To check that every location the index holds is a record of that entry without a
random read per entry, the locations are put in order of window (entry log, pos // WINDOW_BYTES) in
runs of bounded size, each appended to a file; the walks then gather their logs' slices of every run,
the next logs' together up to a bounded batch (a log with more locations than that alone, a window of
positions at a time), and sort those: memory holds one run while spilling and one batch while walking,
however many ledgers, entries and logs the bookie has, and each location is sorted once, in the walk's
batch (within a window, a run keeps its locations in the order they came).

A run's columns are stored narrow where the native code runs: each packed into 1, 2, 4 or 8 bytes a value by the
bits its values differ in (for locations about 4 bytes, not 8: a few logs' ids and the positions within them).

The file is read with ``pread``, not mapped: a mapped file's pages count in the process's memory, and the
kernel maps far more than the page a search touches (fault-around, large folios).
"""

from __future__ import annotations

import bisect
import os
import shutil
import tempfile
from array import array
from itertools import accumulate, chain, repeat
from pathlib import Path
from typing import Iterator

from scanner.native.switch import native_code
from scanner.scan.location_sort import log_ids_of, merged_by_location, sorted_by_location
from scanner.scan.record_walk_types import ExpectedRecords
from scanner.storage.location import zeroed_uint64

RUN_ENTRIES = 1 << 18  # locations put in order in memory at once: 6 MiB of arrays
BATCH_ENTRIES = 1 << 16  # locations of consecutive logs gathered at once for their walks: 2 MiB of arrays
WINDOW_BYTES = 64 << 20  # positions of one log gathered at once for its walk, when it alone has more
FENCE = 512  # one location in this many stays in memory: a search reads the 4 KiB between two of them (unless a run
# has no more windows than fences: it then keeps where each window starts, and a search reads nothing)
_WIDTH = 8  # bytes of a native uint64
_AS_THEY_ARE = (0, 0, 0, 0, 64, _WIDTH)  # a column's code when stored as native uint64: no packing


class _Run:
    """One run in the runs file, in order of window (location >> ``shift``): three columns (location, ledger, entry),
    each from its offset in ``starts``, stored as its code says (``_native.narrow``; ``_AS_THEY_ARE``: uint64).

    A run of few windows (no more than it has fences) keeps each window's first index; any other keeps its fences."""

    __slots__ = ("_fd", "_codec", "_starts", "_codes", "_shift", "count", "_fences", "_windows")

    def __init__(self, fd: int, codec, starts: list[int], codes: list[tuple], shift: int,
                 locations: array | memoryview):
        self._fd = fd
        self._codec = codec  # the native module that packed the columns, or None
        self._starts = starts
        self._codes = codes
        self._shift = shift
        self.count = len(locations)
        self._windows = _window_starts(locations, shift, len(locations) // FENCE)
        self._fences = array("Q", locations[::FENCE]) if self._windows is None else None

    def span(self, low: int, high: int, start: int = 0) -> tuple[int, int]:
        """Indexes [i, j) of the locations in the windows [low, high) touches, searching from ``start``."""
        shift = self._shift
        i = self._first_at_least(low >> shift << shift, start)
        return i, self._first_at_least(-(-high >> shift) << shift, i)

    def _first_at_least(self, value: int, start: int) -> int:
        """The index of the first location >= ``value``, a window's first, from ``start`` on (``count`` if none): the
        locations below it are those of the windows before it, all of them first in the run."""
        if self._windows is not None:
            windows, firsts = self._windows
            k = bisect.bisect_left(windows, value >> self._shift)
            return max(start, firsts[k] if k < len(windows) else self.count)
        block = bisect.bisect_left(self._fences, value) - 1  # it lies in the FENCE locations after this fence
        if block < 0:
            return start
        first = block * FENCE
        if start >= first + FENCE:
            return start
        return max(start, first + bisect.bisect_left(self.column(0, first, min(first + FENCE, self.count)), value))

    def column(self, which: int, i: int, j: int) -> array:
        """Entries [i, j) of column ``which`` (0 locations, 1 ledger ids, 2 entry ids)."""
        values = zeroed_uint64(j - i)
        self.read_into(values, which, i, j)
        return values

    def read_into(self, values: array | memoryview, which: int, i: int, j: int) -> None:
        """Entries [i, j) of column ``which`` read into ``values`` (as long)."""
        code = self._codes[which]
        width = code[-1]
        want = (j - i) * width
        at = self._starts[which] + i * width
        if code == _AS_THEY_ARE:
            read = os.preadv(self._fd, [values], at) if want else 0
        else:
            data = os.pread(self._fd, want, at) if want else b""
            read = len(data)
            if read == want:
                self._codec.widen(data, values, code)
        if read != want:
            raise OSError(f"the locations' scratch file ended before entry {j} of a run")


def _repeated_ids(native, ledger_ids: list[int], entry_ids: list[array]) -> array:
    """The ledger column of several ledgers' locations: each id as many times as it has entries (made in C where the
    native code runs; the chain of repeats is the reference)."""
    if native is None:
        return array("Q", chain.from_iterable(map(repeat, ledger_ids, map(len, entry_ids))))
    column = array("Q")
    column.frombytes(native.repeated_ids(ledger_ids, entry_ids))
    return column


def _window_starts(locations: array | memoryview, shift: int, most: int) -> tuple[array, array] | None:
    """The windows (location >> ``shift``) of ``locations``, which are in window order, and the index of each one's
    first location; None when there are more than ``most`` windows."""
    windows, firsts = array("Q"), array("Q")
    i = 0
    while i < len(locations):
        if len(windows) == most:
            return None
        window = locations[i] >> shift
        windows.append(window)
        firsts.append(i)
        i = bisect.bisect_left(locations, (window + 1) << shift, i)
    return windows, firsts


class LocationRuns:
    """Collects (ledger, entry, location) triples; then serves them per entry log, sorted by position."""

    def __init__(self, scratch: Path | None, run_entries: int = RUN_ENTRIES):
        if WINDOW_BYTES & (WINDOW_BYTES - 1) or not 0 < WINDOW_BYTES <= 1 << 32:
            raise ValueError("WINDOW_BYTES is a power of two up to 2^32")
        self._shift = WINDOW_BYTES.bit_length() - 1  # the runs are in order of location >> this
        self._codec = native_code()  # packs the runs' columns narrow, when it runs
        self._dir = Path(tempfile.mkdtemp(prefix="locations-", dir=scratch))
        self._file = open(self._dir / "runs", "w+b")  # every run, one after the other
        self._run_entries = run_entries
        # the run being filled: its first ``_filled`` locations, ledger ids and entry ids
        self._locations, self._ledger_ids, self._entry_ids = array("Q"), array("Q"), array("Q")
        self._filled = 0
        self._runs: list[_Run] = []
        self._log_ids: set[int] = set()  # every entry log some location points into
        self._sorted_log_ids: list[int] | None = None  # once the runs are complete
        self._batch: _Batch | None = None
        self._spare: list[array] | None = None  # the last gather's columns, for the next one
        self.count = 0

    def add(self, ledger_id: int, entry_ids: array, raw_locations: array) -> None:
        """The ledger's indexed entries and their encoded locations (``EntryLocation.encode``)."""
        n = len(entry_ids)
        start, end = self._filled, self._filled + n
        self._room_for(end)
        self._locations[start:end] = raw_locations
        self._entry_ids[start:end] = entry_ids
        self._ledger_ids[start:end] = array("Q", [ledger_id]) * n
        self._filled = end
        self.count += n
        if end >= self._run_entries:
            self._spill()

    def add_ledgers(self, ledger_ids: list[int], entry_ids: list[array], raw_locations: list[array]) -> None:
        """Several ledgers' indexed entries, as :meth:`add` takes each in turn (the same runs, spilled after the same
        ledgers), each run's share of them copied in one step a column."""
        ends = list(accumulate(map(len, entry_ids)))  # where each ledger's entries end among those given
        first, done = 0, 0  # the first ledger not added yet, and the entries before it
        while first < len(ledger_ids):
            # the ledger that fills the run (add spills after it), else the last one
            last = min(bisect.bisect_left(ends, self._run_entries - self._filled + done, first), len(ledger_ids) - 1)
            start, end = self._filled, self._filled + ends[last] - done
            self._room_for(end)
            as_bytes = slice(start * _WIDTH, end * _WIDTH)
            with memoryview(self._locations) as locations, memoryview(self._entry_ids) as entries:
                locations.cast("B")[as_bytes] = b"".join(raw_locations[first:last + 1])
                entries.cast("B")[as_bytes] = b"".join(entry_ids[first:last + 1])
            self._ledger_ids[start:end] = _repeated_ids(self._codec, ledger_ids[first:last + 1],
                                                        entry_ids[first:last + 1])
            self._filled = end
            self.count += end - start
            first, done = last + 1, ends[last]
            if end >= self._run_entries:
                self._spill()

    def _room_for(self, end: int) -> None:
        """The run's columns made ``end`` long at least: they grow to their size once, then serve every run."""
        start = self._filled
        if end > len(self._locations):
            more = zeroed_uint64(max(end, min(2 * len(self._locations), self._run_entries)) - start)
            for column in (self._locations, self._ledger_ids, self._entry_ids):
                del column[start:]
                column.extend(more)

    def finish(self) -> None:
        """No more locations: the rest goes to a run of its own; the run's columns are let go."""
        if self._filled:
            self._spill()
        self._locations, self._ledger_ids, self._entry_ids = array("Q"), array("Q"), array("Q")

    def _spill(self) -> None:
        at = self._file.tell()
        filled = [memoryview(column)[:self._filled] for column in (self._locations, self._ledger_ids, self._entry_ids)]
        locations, ledger_ids, entry_ids = sorted_by_location(*filled, coarse=self._shift)
        starts, codes = [], []
        for column in (locations, ledger_ids, entry_ids):
            code, data = (_AS_THEY_ARE, column) if self._codec is None else self._codec.narrow(column)
            self._file.write(data)
            starts.append(at)
            codes.append(code)
            at += len(column) * code[-1]
        self._file.flush()
        self._log_ids.update(log_ids_of(locations))
        self._runs.append(_Run(self._file.fileno(), self._codec, starts, codes, self._shift, locations))
        for view in filled:
            view.release()
        self._filled = 0
        if len(self._locations) > self._run_entries:  # one ledger filled it beyond a run: not kept for the next
            for column in (self._locations, self._ledger_ids, self._entry_ids):
                del column[self._run_entries:]

    def entry_log_ids(self) -> list[int]:
        """Every entry log some location points into, ascending (noted while spilling: looking them up in
        the runs would read every run's locations)."""
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
        log_ids = self.entry_log_ids()
        later = bisect.bisect_right(log_ids, entry_log_id)  # the first log after those taken
        step = 1
        while later < len(log_ids):  # widen while it fits: 1, 2, 4, ... more logs, and back when it does not
            candidate = log_ids[min(later + step, len(log_ids)) - 1] + 1
            if self._count(low, candidate << 32) <= BATCH_ENTRIES:
                end_log = candidate
                later = bisect.bisect_left(log_ids, candidate, later)
                step *= 2
            elif step > 1:
                step //= 2
            else:
                break
        taken = [(run, *run.span(low, end_log << 32)) for run in self._runs]
        columns = self._columns(taken)
        return _Batch(entry_log_id, end_log, low, columns, _merged(taken, columns))

    def _columns(self, taken: list[tuple[_Run, int, int]]) -> list[array]:
        """Four columns (locations, ledger ids, entry ids, positions) to gather the runs' slices ``taken`` into: the
        last gather's when they are long enough and nothing views them any more (the walks are done with its
        windows), else new ones, at least BATCH_ENTRIES long (fresh pages cost a page fault and a cleared page each,
        more than the sort of the locations in them)."""
        count = sum(j - i for _, i, j in taken)
        spare = self._spare
        if spare is None or len(spare[0]) < count or not all(_unviewed(column) for column in spare):
            spare = self._spare = [zeroed_uint64(max(count, BATCH_ENTRIES)) for _ in range(4)]
        return spare

    def _count(self, low: int, high: int) -> int:
        return sum(j - i for i, j in (run.span(low, high) for run in self._runs))

    def _gather_windows(self, base: int, start_pos: int) -> Iterator[ExpectedRecords]:
        """The log's windows of positions one after the other, the first from ``start_pos`` on."""
        spans = [run.span(base + start_pos, base + (1 << 32)) for run in self._runs]
        low = start_pos >> self._shift << self._shift
        while any(i < j for i, j in spans):
            high = min(low + (1 << self._shift), 1 << 32)
            cut = [run.span(base + low, base + high, i)[1] for run, (i, _) in zip(self._runs, spans)]
            taken = [(run, i, c) for run, (i, _), c in zip(self._runs, spans, cut) if c > i]
            spans = [(c, j) for (_, j), c in zip(spans, cut)]
            if taken:
                _, ledger_ids, entry_ids, positions = columns = self._columns(taken)
                count = _merged(taken, columns)
                first = bisect.bisect_left(positions, start_pos, 0, count) if low < start_pos else 0
                if first < count:
                    yield ExpectedRecords(memoryview(positions)[first:count], memoryview(ledger_ids)[first:count],
                                          memoryview(entry_ids)[first:count],
                                          high if any(i < j for i, j in spans) else 1 << 64)
            low = high

    def close(self) -> None:
        self._runs.clear()
        self._file.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "LocationRuns":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Batch:
    """The sorted locations of logs [first_log, end_log) from ``low`` on: the first ``count`` of its ``columns``
    (locations, ledger ids, entry ids, positions), served per log as views."""

    def __init__(self, first_log: int, end_log: int, low: int, columns: list[array], count: int):
        self.first_log, self.end_log, self._low = first_log, end_log, low
        self.columns, self._count = columns, count

    def start_pos(self, base: int) -> int:
        """The first position of the log at ``base`` the batch holds locations from."""
        return max(0, self._low - base)

    def records(self, base: int, start_pos: int) -> ExpectedRecords:
        locations, ledger_ids, entry_ids, positions = self.columns
        i = bisect.bisect_left(locations, base + start_pos, 0, self._count)
        j = bisect.bisect_left(locations, base + (1 << 32), i, self._count)
        return ExpectedRecords(memoryview(positions)[i:j], memoryview(ledger_ids)[i:j], memoryview(entry_ids)[i:j],
                               1 << 64)


def _unviewed(column: array) -> bool:
    """Whether no view of the array is held (an array refuses to change its size while one is)."""
    try:
        column.append(0)
    except BufferError:
        return False
    column.pop()
    return True


def _merged(taken: list[tuple[_Run, int, int]], columns: list[array]) -> int:
    """The runs' slices ``taken`` into the front of ``columns`` (locations, ledger ids, entry ids, positions), in
    location order: read one after the other, then sorted (ties in run order). Returns how many."""
    count = sum(j - i for _, i, j in taken)
    views = [memoryview(column)[:count] for column in columns]
    at = 0
    for run, i, j in taken:
        for which, view in enumerate(views[:3]):
            run.read_into(view[at:at + j - i], which, i, j)
        at += j - i
    merged_by_location(*views)
    for view in views:
        view.release()
    return count
