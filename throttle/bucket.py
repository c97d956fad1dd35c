"""A token bucket: ``rate`` tokens per second, at most ``burst`` saved up, debt allowed."""

from __future__ import annotations

import threading

from .clock import SYSTEM_CLOCK, Clock
from .wakeup import Wakeup

# A ticket this close (in seconds) counts as paid: float rounding must not leave a waiter spinning.
_PAID_WITHIN = 1e-9


def _checked_rate(rate: float | None) -> float | None:
    if rate is None or rate == 0:
        return None
    if not rate > 0 or rate == float("inf"):
        raise ValueError(f"rate must be a positive number of tokens per second, 0 or None (unlimited); got {rate!r}")
    return float(rate)


def _checked_burst(burst: float | None, rate: float | None) -> float:
    if burst is None:
        return rate if rate is not None else 0.0  # one second's worth
    if not burst >= 0 or burst == float("inf"):
        raise ValueError(f"burst must be a finite number of tokens >= 0; got {burst!r}")
    return float(burst)


class TokenBucket:
    """Tokens (bytes or entries) refilled at ``rate`` per second, saved up to ``burst``.

    ``take(n)`` charges ``n`` at once and then waits until the bucket is out of debt, so a take
    larger than the burst simply waits ``(n - saved) / rate`` and nothing can deadlock. Callers are
    served in the order they took. ``rate`` None or 0 means unlimited. Thread-safe.
    """

    __slots__ = ("_clock", "_wakeup", "_lock", "_rate", "_burst", "_tokens", "_credited", "_last")

    def __init__(self, rate: float | None, burst: float | None = None, *,
                 clock: Clock = SYSTEM_CLOCK, wakeup: Wakeup | None = None):
        self._clock = clock
        self._wakeup = wakeup if wakeup is not None else Wakeup(clock)
        self._lock = threading.Lock()
        self._rate = _checked_rate(rate)
        self._burst = _checked_burst(burst, self._rate)
        self._tokens = self._burst
        # Every token ever credited, uncapped while in debt: a waiter's ticket is a level of this.
        self._credited = 0.0
        self._last = clock.monotonic()

    @property
    def rate(self) -> float | None:
        return self._rate

    @property
    def burst(self) -> float:
        return self._burst

    def available(self) -> float:
        """Tokens saved up right now (negative while in debt)."""
        with self._lock:
            self._refill()
            return self._tokens

    def set_rate(self, rate: float | None, burst: float | None = None) -> None:
        """Change the rate (and burst; default one second's worth) from now on; waiters adjust at once."""
        new_rate = _checked_rate(rate)
        new_burst = _checked_burst(burst, new_rate)
        with self._lock:
            self._refill()
            if self._rate is None:
                self._tokens = new_burst
            self._rate = new_rate
            self._burst = new_burst
            self._tokens = min(self._tokens, new_burst)
            self._wakeup.nudge()

    def take(self, n: float) -> bool:
        """Charge ``n`` tokens and wait until they are paid for; True if woken or stopped first.

        A wake leaves the debt in place: the next take pays it, so the long-run rate holds.
        """
        if n < 0:
            raise ValueError(f"cannot take a negative number of tokens: {n!r}")
        with self._lock:
            self._refill()
            if self._rate is not None:
                self._tokens -= n
            if self._rate is None or self._tokens >= 0:
                ticket = None
            else:
                ticket = self._credited - self._tokens
        while ticket is not None:
            with self._lock:
                self._refill()
                if self._rate is None:
                    break
                remaining = (ticket - self._credited) / self._rate
                if remaining < _PAID_WITHIN:
                    break
                nudges = self._wakeup.nudges()
            if self._wakeup.wait(remaining, since=nudges):
                return True
        return self._wakeup.poll()

    def _refill(self) -> None:
        now = self._clock.monotonic()
        elapsed = now - self._last
        self._last = now
        if self._rate is None or elapsed <= 0:
            return
        earned = elapsed * self._rate
        self._credited += earned
        self._tokens = min(self._burst, self._tokens + earned)
