"""Where the throttle gets its time from: the system, or a hand-driven clock for tests."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    """Monotonic time for rates, wall time for allowed windows, and the way to block on a condition."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def wait(self, condition: threading.Condition, timeout: float) -> None: ...


def local_now(clock: Clock) -> datetime:
    """The clock's wall time as a naive local datetime (what allowed windows are written in)."""
    return datetime.fromtimestamp(clock.time())


class SystemClock:
    """The real clocks; ``wait`` blocks on the condition until notified or timed out."""

    __slots__ = ()

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def wait(self, condition: threading.Condition, timeout: float) -> None:
        condition.wait(timeout)


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when told to or when something waits on it (single-threaded tests).

    Every wait advances time by its full timeout at once and is recorded in ``waits``.
    """

    __slots__ = ("_monotonic", "_time", "waits")

    def __init__(self, start: datetime | float = 1_700_000_000.0):
        self._time = start.timestamp() if isinstance(start, datetime) else float(start)
        self._monotonic = 1000.0
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self._monotonic

    def time(self) -> float:
        return self._time

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds``."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back: advance({seconds})")
        self._monotonic += seconds
        self._time += seconds

    def wait(self, condition: threading.Condition, timeout: float) -> None:
        self.waits.append(timeout)
        self.advance(timeout)
