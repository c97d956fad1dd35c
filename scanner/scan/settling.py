"""When a ledger whose metadata just changed can be judged.

A writer closes a ledger once an ack quorum holds each entry: with an ack quorum smaller than the write quorum, one
bookie of each write set may still be receiving the last entries after the close (or after an ensemble change). Such
a ledger is judged only once its metadata is ``settle_seconds`` old.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scanner.metadata.store import LedgerRead

# The default: a slow bookie lagged its ack quorum by about a second on a loaded machine. The agent's
# [agent] settle_seconds and the scan's --settle-seconds set it.
SETTLE_SECONDS = 15.0


def settles_at(read: "LedgerRead", settle_seconds: float) -> float | None:
    """When (``time.time()``) a ledger whose metadata changed less than ``settle_seconds`` ago settles; None for
    metadata older than that, or whose change time the store does not know (a dump)."""
    if read.meta is None or read.modified_ms is None:
        return None
    settles = read.modified_ms / 1000 + settle_seconds
    # ZooKeeper's clock, not ours: a change stamped in our future waits no longer than the whole settling time
    return min(settles, time.time() + settle_seconds) if settles > time.time() else None
