"""The pacer: one object that every read of a scanner goes through."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from .backoff import Backoff, BackoffPolicy
from .bucket import TokenBucket
from .clock import SYSTEM_CLOCK, Clock, local_now
from .diskload import DiskLoad
from .jitter import Jitter
from .wakeup import Wakeup
from .windows import AllowedWindows

_MIN_PAUSE_SECONDS = 1.0


class Pacer:
    """Token buckets for bytes/s and entries/s, scaled by allowed windows and disk back-off.

    The rate that applies is ``configured × window × back-off``: the window factor is 1 inside an
    allowed window and ``outside_factor`` outside (0 pauses until the next window opens); the
    back-off factor follows the busiest of ``disk_loads``. Both are re-evaluated at most once per
    ``control_interval`` seconds, so a take costs a lock and a clock read. A rate of None or 0 is
    unlimited (and then nothing can scale it). Every take and wait returns True early when
    ``wake()`` or ``stop()`` is called, so the caller can switch to a suspect or shut down.
    """

    def __init__(self, bytes_per_second: float | None, entries_per_second: float | None = None, *,
                 burst_seconds: float = 0.1,
                 windows: AllowedWindows | None = None, outside_factor: float = 0.0,
                 disk_loads: Iterable[DiskLoad] = (), backoff: BackoffPolicy = BackoffPolicy(),
                 jitter: Jitter | None = None, clock: Clock = SYSTEM_CLOCK, control_interval: float = 1.0):
        if not 0 < burst_seconds < float("inf"):
            raise ValueError(f"burst_seconds must be a positive number of seconds; got {burst_seconds!r}")
        if not 0 < control_interval < float("inf"):
            raise ValueError(f"control_interval must be a positive number of seconds; got {control_interval!r}")
        self._clock = clock
        self._wakeup = Wakeup(clock)
        self._jitter = jitter if jitter is not None else Jitter()
        self._burst_seconds = burst_seconds
        self._control_interval = control_interval
        self._disk_loads = tuple(disk_loads)
        self._backoff = Backoff(backoff)
        self._lock = threading.Lock()
        self._windows = windows
        self._outside_factor = _checked_outside_factor(outside_factor)
        self._base_bytes = self._base_entries = None
        self._bytes = TokenBucket(None, clock=clock, wakeup=self._wakeup)
        self._entries = TokenBucket(None, clock=clock, wakeup=self._wakeup)
        self._window_factor = 1.0
        self._applied_factor = 1.0
        self._next_control = clock.monotonic() + control_interval
        self.set_rate(bytes_per_second, entries_per_second)

    @property
    def stopped(self) -> bool:
        return self._wakeup.stopped

    def take_bytes(self, n: int) -> bool:
        """Pay for reading ``n`` bytes (waiting as needed); True if woken or stopped first."""
        return self._take(self._bytes, n)

    def take_entries(self, n: int) -> bool:
        """Pay for reading ``n`` entries (waiting as needed); True if woken or stopped first."""
        return self._take(self._entries, n)

    def wait(self, seconds: float) -> bool:
        """Sleep about ``seconds`` (with jitter); True if woken or stopped first."""
        return self._wakeup.wait(self._jitter.spread(seconds))

    def pause(self, seconds: float) -> bool:
        """Sleep ``seconds`` exactly (a settling time, no jitter); True if woken or stopped first."""
        return self._wakeup.wait(seconds)

    def wake(self) -> None:
        """Cut the current take or wait short (or the next one): it returns True."""
        self._wakeup.wake()

    def stop(self) -> None:
        """Make every take and wait return True at once, from now on."""
        self._wakeup.stop()

    def effective_rate(self) -> float | None:
        """Bytes per second that apply now after windows and back-off; None when unlimited."""
        with self._lock:
            self._control(force=False)
            if self._base_bytes is None:
                return None
            return self._base_bytes * self._window_factor * self._backoff.factor

    def set_rate(self, bytes_per_second: float | None, entries_per_second: float | None = None) -> None:
        """Change the configured rates (None or 0: unlimited); takes in progress adjust at once."""
        for rate in (bytes_per_second, entries_per_second):
            if rate is not None and not 0 <= rate < float("inf"):
                raise ValueError(f"a rate must be a finite number >= 0 or None; got {rate!r}")
        with self._lock:
            self._base_bytes = bytes_per_second or None
            self._base_entries = entries_per_second or None
            self._control(force=True)
            self._apply_rates()  # the factor may be unchanged, the base rates are not

    def set_windows(self, windows: AllowedWindows | None, outside_factor: float = 0.0) -> None:
        """Change the allowed windows (None: always allowed) and the rate factor outside them."""
        factor = _checked_outside_factor(outside_factor)
        with self._lock:
            self._windows, self._outside_factor = windows, factor
            self._control(force=True)
        self._wakeup.nudge()

    def _take(self, bucket: TokenBucket, n: int) -> bool:
        with self._lock:
            paused = self._control(force=False)
        while paused:
            if self._wait_for_window():
                return True
            with self._lock:
                paused = self._control(force=True)
        return bucket.take(n)

    def _wait_for_window(self) -> bool:
        nudges = self._wakeup.nudges()
        with self._lock:
            windows = self._windows
        if windows is None:
            return False
        opening = windows.next_opening(local_now(self._clock))
        # At least a second: around a daylight-saving switch a naive opening can map to a past instant.
        seconds = max(_MIN_PAUSE_SECONDS, opening.timestamp() - self._clock.time()) + self._jitter.stagger()
        return self._wakeup.wait(seconds, since=nudges)

    def _control(self, *, force: bool) -> bool:
        """Re-evaluate window and back-off when due (caller holds the lock); True while paused.

        ``force`` re-reads the window only: a disk sample over less than an interval is noise.
        """
        now = self._clock.monotonic()
        due = now >= self._next_control
        if not (due or force):
            return self._window_factor == 0
        if due:
            self._next_control = now + self._control_interval
            if self._disk_loads:
                self._backoff.update(self._busiest_utilisation())
        inside = self._windows is None or self._windows.contains(local_now(self._clock))
        self._window_factor = 1.0 if inside else self._outside_factor
        if self._window_factor and self._window_factor * self._backoff.factor != self._applied_factor:
            self._apply_rates()
        return self._window_factor == 0

    def _apply_rates(self) -> None:
        # While paused the buckets keep their last rates: the pause itself holds the takes back.
        factor = (self._window_factor or 1.0) * self._backoff.factor
        self._applied_factor = factor
        for bucket, base in ((self._bytes, self._base_bytes), (self._entries, self._base_entries)):
            rate = None if base is None else base * factor
            bucket.set_rate(rate, None if rate is None else rate * self._burst_seconds)

    def _busiest_utilisation(self) -> float | None:
        samples = [u for u in (load.utilisation() for load in self._disk_loads) if u is not None]
        return max(samples, default=None)


def _checked_outside_factor(factor: float) -> float:
    if not 0 <= factor <= 1:
        raise ValueError(f"outside_factor must be a fraction of the rate in [0, 1] (0 pauses); got {factor!r}")
    return float(factor)
