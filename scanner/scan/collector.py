"""Python's cycle collector set for a pass: run every 10,000 container objects, not every 700.

The collector runs each time 700 more container objects (tuples, lists, dicts) were made than freed, and every tenth
and hundredth time over all the older ones too. A pass makes a few such objects per ledger and holds a batch of them
at once (the index step's ledgers, their metadata, the index's locations): at 10^5 ledgers the collector ran about 250
times and took 0.06-0.08 CPU s (timed by its own callbacks), though a pass makes next to no cycles. Run every 10,000
objects, it runs about 20 times and takes about 0.01 s; the few cycles a pass makes are still collected.
"""

from __future__ import annotations

import gc

_FIRST_GENERATION_THRESHOLD = 10_000  # container objects made (less those freed) between two collections


def collect_rarely() -> None:
    """Set up this process (before its first pass): the collector run every ``_FIRST_GENERATION_THRESHOLD`` objects
    made at least, not every 700 (the older generations' thresholds kept)."""
    first, second, third = gc.get_threshold()
    gc.set_threshold(max(first, _FIRST_GENERATION_THRESHOLD), second, third)
