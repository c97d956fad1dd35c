"""How busy the block device under a path is, from the "time spent doing I/Os" in /proc/diskstats."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .clock import SYSTEM_CLOCK, Clock

PROC_DISKSTATS = "/proc/diskstats"
# major, minor, name, then at least 11 counters; the 10th counter is the busy time in ms.
_MIN_FIELDS = 14
_IO_TICKS_FIELD = 12
# The kernel prints the busy time as a 32-bit unsigned int of milliseconds: it wraps every ~49 days.
_IO_TICKS_WRAP = 1 << 32


@dataclass(frozen=True, slots=True)
class DiskStat:
    """One line of /proc/diskstats, reduced to what the back-off needs."""

    major: int
    minor: int
    name: str
    io_ticks_ms: int


def parse_diskstats(text: str) -> dict[tuple[int, int], DiskStat]:
    """Every device line of a /proc/diskstats text, by (major, minor).

    Lines too short to carry the busy time (old kernels' partition lines) or not numeric are
    skipped: a device missing here only means no back-off for it.
    """
    stats: dict[tuple[int, int], DiskStat] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < _MIN_FIELDS:
            continue
        try:
            major, minor, ticks = int(fields[0]), int(fields[1]), int(fields[_IO_TICKS_FIELD])
        except ValueError:
            continue
        if min(major, minor, ticks) < 0:
            continue
        stats[(major, minor)] = DiskStat(major, minor, fields[2], ticks)
    return stats


def read_proc_diskstats() -> str:
    """The text of /proc/diskstats."""
    with open(PROC_DISKSTATS, encoding="ascii", errors="replace") as f:
        return f.read()


def device_number(path: str | os.PathLike) -> tuple[int, int]:
    """(major, minor) of the device holding ``path``: a partition, dm or loop device, or an anonymous one."""
    st_dev = os.stat(path).st_dev
    return os.major(st_dev), os.minor(st_dev)


class DiskLoad:
    """Samples the fraction of wall time the device under ``path`` was busy between two calls.

    A path on a device that /proc/diskstats does not list (tmpfs, overlay, btrfs subvolumes), or a
    system without /proc, gives ``None``: unknown load, never an error.
    """

    __slots__ = ("path", "device_number", "device", "_read", "_clock", "_last_ticks", "_last_time")

    def __init__(self, path: str | os.PathLike, *,
                 read_diskstats: Callable[[], str] = read_proc_diskstats, clock: Clock = SYSTEM_CLOCK):
        self.path = os.fspath(path)
        self.device_number = device_number(path)
        self._read = read_diskstats
        self._clock = clock
        self.device: str | None = None
        self._last_ticks: int | None = None
        self._last_time = clock.monotonic()
        self._take_sample()

    def utilisation(self) -> float | None:
        """Busy fraction in [0, 1] since the previous call (or construction); None when unknown."""
        previous_ticks, previous_time = self._last_ticks, self._last_time
        self._take_sample()
        elapsed_ms = (self._last_time - previous_time) * 1000.0
        if previous_ticks is None or self._last_ticks is None or elapsed_ms <= 0:
            return None
        busy_ms = (self._last_ticks - previous_ticks) % _IO_TICKS_WRAP
        return min(1.0, busy_ms / elapsed_ms)

    def _take_sample(self) -> None:
        self._last_time = self._clock.monotonic()
        try:
            stat = parse_diskstats(self._read()).get(self.device_number)
        except OSError:
            stat = None
        self._last_ticks = None if stat is None else stat.io_ticks_ms
        if stat is not None:
            self.device = stat.name
