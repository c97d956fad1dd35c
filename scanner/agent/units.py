"""Rates and durations as a person reads them: KiB/s and MiB/s, days past a day."""

from __future__ import annotations

import time

SECONDS_PER_DAY = 86400


def rate_text(bytes_per_second: float | None) -> str:
    """``"unlimited"``, ``"512 B/s"``, ``"146.5 KiB/s"``, ``"47.7 MiB/s"``."""
    if bytes_per_second is None:
        return "unlimited"
    value = float(bytes_per_second)
    for unit in ("B/s", "KiB/s", "MiB/s"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B/s" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB/s"


def duration_text(seconds: float) -> str:
    """``"00:04:10"`` under a day, ``"2.5 days"`` from a day on."""
    seconds = max(0, int(seconds))
    if seconds >= SECONDS_PER_DAY:
        return f"{seconds / SECONDS_PER_DAY:.1f} days"
    return time.strftime("%H:%M:%S", time.gmtime(seconds))


def moment_text(epoch_seconds: float) -> str:
    """A local date and time to the minute, e.g. ``"2024-05-02 14:30"``."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch_seconds))
