"""A one-line progress display with rate and ETA, drawn on a terminal's stderr only."""

from __future__ import annotations

import sys
import time


class ProgressLine:
    """Redraws ``phase: done/total (pct) rate ETA`` at most a few times a second; silent when not a TTY."""

    def __init__(self, stream=None, min_interval: float = 0.25):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self.min_interval = min_interval
        self._phase = ""
        self._total = 0
        self._done = 0
        self._unit = ""
        self._started = time.monotonic()
        self._drawn = 0.0

    def start(self, phase: str, total: int, unit: str) -> None:
        self._phase, self._total, self._done, self._unit = phase, total, 0, unit
        self._started = time.monotonic()
        self._draw(force=True)

    def advance(self, n: int) -> None:
        self._done += n
        self._draw()

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._drawn < self.min_interval):
            return
        self._drawn = now
        elapsed = max(now - self._started, 1e-6)
        rate = self._done / elapsed
        text = f"{self._phase}: {self._done}"
        if self._total:
            pct = 100.0 * self._done / self._total
            eta = (self._total - self._done) / rate if rate > 0 else float("inf")
            eta_text = "--:--" if eta == float("inf") else time.strftime("%H:%M:%S", time.gmtime(eta))
            text += f"/{self._total} {self._unit} ({pct:5.1f}%) {_human(rate)}{self._unit}/s ETA {eta_text}"
        else:
            text += f" {self._unit}"
        self.stream.write("\r\033[K" + text)
        self.stream.flush()


def _human(value: float) -> str:
    for unit in ("", "Ki", "Mi", "Gi"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} Ti"
