"""Whether a scanner thread is alive as systemd's watchdog means it: making real progress, or idle by design.

Progress is a beat: a cursor advanced, a throttled read paid for, a batch of metadata read. Idle by
design is a wait the thread chose and that a timer or a wake-up ends: paused, the next pass not due
yet, the start delay, the throttle holding it (a rate, a closed window, disk back-off), metadata
unreachable (retrying). Anything else that lasts (a read the disk never answers, a deadlock) is a
stall.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator


class Heartbeat:
    """Beats and idle spells of one thread; read from any thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._last = clock()
        self._idle = 0  # nesting depth of idle spells; only the owning thread changes it

    def beat(self) -> None:
        self._last = self._clock()

    @contextlib.contextmanager
    def idle(self) -> Iterator[None]:
        """A wait by design: never a stall, however long."""
        self._idle += 1
        try:
            yield
        finally:
            self._idle -= 1
            self.beat()

    def stalled_for(self) -> float:
        """Seconds since the last beat, outside an idle spell; 0 while idle."""
        return 0.0 if self._idle else max(0.0, self._clock() - self._last)


class BeatingMetadata:
    """A metadata store whose every answered read is a beat (a pass reading metadata is making progress)."""

    def __init__(self, store, heartbeat: Heartbeat):
        self._store = store
        self._heartbeat = heartbeat

    def ledger(self, ledger_id: int):
        found = self._store.ledger(ledger_id)
        self._heartbeat.beat()
        return found

    def ledger_batch(self, ledger_ids):
        reads = self._store.ledger_batch(ledger_ids)
        self._heartbeat.beat()
        return reads

    def ledger_nodes(self, ledger_ids):
        nodes = self._store.ledger_nodes(ledger_ids)
        self._heartbeat.beat()
        return nodes

    def __getattr__(self, name: str):
        return getattr(self._store, name)
