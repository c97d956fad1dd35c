"""A sleep that other threads can cut short: ``wake()`` for news, ``stop()`` for good."""

from __future__ import annotations

import threading

from .clock import SYSTEM_CLOCK, Clock


class Wakeup:
    """Interruptible waits shared by everything that paces one scanner.

    ``wake()`` makes every wait in progress return True; when none is in progress the next wait
    returns True at once. After ``stop()`` every wait returns True at once, forever.
    ``nudge()`` makes waits in progress return False early so their owner recomputes how long to
    wait (a rate or a window changed); it is not news for the caller.
    """

    __slots__ = ("_clock", "_condition", "_pending", "_stopped", "_wakes", "_nudges")

    def __init__(self, clock: Clock = SYSTEM_CLOCK):
        self._clock = clock
        self._condition = threading.Condition()
        self._pending = False
        self._stopped = False
        self._wakes = 0
        self._nudges = 0

    @property
    def stopped(self) -> bool:
        return self._stopped

    def wake(self) -> None:
        """Cut the current waits short (or the next one), reporting that they were woken."""
        with self._condition:
            self._pending = True
            self._wakes += 1
            self._condition.notify_all()

    def stop(self) -> None:
        """Make every wait, present and future, return True at once."""
        with self._condition:
            self._stopped = True
            self._condition.notify_all()

    def nudge(self) -> int:
        """Make the waits in progress return False early; returns the new nudge count."""
        with self._condition:
            self._nudges += 1
            self._condition.notify_all()
            return self._nudges

    def nudges(self) -> int:
        """How many nudges so far: pass it to ``wait(since=...)`` to not miss one that comes first."""
        with self._condition:
            return self._nudges

    def poll(self) -> bool:
        """True (consuming the wake) if woken since the last wait, or stopped; never blocks."""
        with self._condition:
            if self._pending:
                self._pending = False
                return True
            return self._stopped

    def wait(self, seconds: float, since: int | None = None) -> bool:
        """Wait up to ``seconds``; True if woken or stopped, False on timeout or nudge.

        With ``since`` (a value of ``nudges()``), a nudge that came after it returns False at once.
        """
        with self._condition:
            wakes = self._wakes
            nudges = self._nudges if since is None else since
            deadline = self._clock.monotonic() + seconds
            while True:
                if self._stopped:
                    return True
                if self._pending:
                    # The first waiter to see a wake consumes it; the others notice the count moved.
                    self._pending = False
                    return True
                if self._wakes != wakes:
                    return True
                if self._nudges != nudges:
                    return False
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    return False
                self._clock.wait(self._condition, remaining)
