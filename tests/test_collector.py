"""The cycle collector as a pass sets it: run every 10,000 container objects made, the older generations as they were,
and cycles still collected."""

from __future__ import annotations

import gc
import weakref

from scanner.scan.collector import collect_rarely


class _Node:
    pass


def test_the_collector_runs_rarely_and_still_collects_cycles():
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 7, 9)
        collect_rarely()
        assert gc.get_threshold() == (10_000, 7, 9)
        gc.set_threshold(50_000, 7, 9)
        collect_rarely()
        assert gc.get_threshold() == (50_000, 7, 9)  # a higher one is kept
        collect_rarely()
        cycle = _Node()
        cycle.me = cycle
        gone = weakref.ref(cycle)
        del cycle
        kept = [[] for _ in range(60_000)]  # containers made past the threshold and kept: the collector runs
        assert gone() is None
        del kept
    finally:
        gc.set_threshold(*before)
