"""Logging an event that can repeat thousands of times a second as at most one line per interval,
with the count of the repeats it stands for."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable


class RateLimitedLog:
    """``log(message, *args)`` writes the first event at once, then one line per ``interval`` at most,
    saying how many events it stands for (the message shown is the latest's). ``flush()``, called now
    and then, writes the line for repeats that no later event carried out."""

    def __init__(self, logger: logging.Logger, level: int, interval: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self.logger, self.level, self.interval, self._clock = logger, level, interval, clock
        self._lock = threading.Lock()
        self._last_line = float("-inf")
        self._unlogged = 0
        self._latest: tuple[str, tuple] = ("", ())

    def log(self, message: str, *args) -> None:
        with self._lock:
            self._unlogged += 1
            self._latest = (message, args)
        self.flush()

    def flush(self) -> None:
        with self._lock:
            now = self._clock()
            if not self._unlogged or now - self._last_line < self.interval:
                return
            count, self._unlogged, self._last_line = self._unlogged, 0, now
            message, args = self._latest
        if count == 1:
            self.logger.log(self.level, message, *args)
        else:
            self.logger.log(self.level, message + " (%d times since the last such line)", *args, count)
