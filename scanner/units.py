"""Rates, sizes and durations as people write and read them: ``50MB/s``, ``64MiB``, ``2.5 days``.

Prefixes are SI (k, M, G, T: powers of 1000) or IEC (Ki, Mi, Gi, Ti: powers of 1024), in any case;
the unit (``B`` for bytes) and a trailing ``/s`` are optional, so ``50M``, ``50MB``, ``50 MB/s`` and
``50000000`` are the same rate.
"""

from __future__ import annotations

import math
import re
import time

SECONDS_PER_DAY = 86400
_SCALES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
           "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
_QUANTITY = re.compile(r"\s*(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?P<prefix>[kmgt]i?)?\s*(?P<unit>[a-z]*)\s*(?P<per>/\s*s)?\s*",
                       re.IGNORECASE)


def parse_quantity(text: str, unit: str = "B") -> float:
    """The number ``text`` writes, scaled by its prefix: ``"50MB/s"`` -> 50e6 (``unit`` may be left out).

    ValueError, saying what was expected, for anything else (a negative number, another unit, NaN).
    """
    match = _QUANTITY.fullmatch(text)
    if match is None or match["unit"].lower() not in ("", unit.lower()):
        raise ValueError(f"{text!r}: expected a number with an optional prefix k, M, G, T (x1000) or Ki, Mi, Gi, Ti "
                         f"(x1024){' and unit ' + unit if unit else ''}, e.g. 50M{unit}")
    value = float(match["number"]) * _SCALES[(match["prefix"] or "").lower()]
    if not math.isfinite(value):
        raise ValueError(f"{text!r}: too large")
    return value


def rate_text(bytes_per_second: float | None) -> str:
    """``"unlimited"``, ``"512 B/s"``, ``"150.0 kB/s"``, ``"50.0 MB/s"``: SI prefixes, as rates are configured."""
    if bytes_per_second is None:
        return "unlimited"
    value = float(bytes_per_second)
    for unit in ("B/s", "kB/s", "MB/s", "GB/s"):
        if value < 1000 or unit == "GB/s":
            return f"{value:.0f} {unit}" if unit == "B/s" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def duration_text(seconds: float) -> str:
    """``"00:04:10"`` under a day, ``"2.5 days"`` from a day on."""
    seconds = max(0, int(seconds))
    if seconds >= SECONDS_PER_DAY:
        return f"{seconds / SECONDS_PER_DAY:.1f} days"
    return time.strftime("%H:%M:%S", time.gmtime(seconds))


def moment_text(epoch_seconds: float) -> str:
    """A local date and time to the minute, e.g. ``"2024-05-02 14:30"``."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch_seconds))


def iso_time(epoch_seconds: float) -> str:
    """UTC to the second in ISO 8601, as the envelope's ``generated_at``: ``"2024-05-02T14:30:05Z"``."""
    import datetime

    when = datetime.datetime.fromtimestamp(epoch_seconds, datetime.timezone.utc)
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")
