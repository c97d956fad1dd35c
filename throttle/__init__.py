"""Rate limiting for a background scanner: token buckets, interruptible waits, disk back-off,
allowed time windows and jitter, combined in a ``Pacer``; the idle I/O class. Depends on nothing outside the stdlib."""

from .backoff import Backoff, BackoffPolicy
from .bucket import TokenBucket
from .clock import SYSTEM_CLOCK, Clock, ManualClock, SystemClock, local_now
from .ioclass import io_class, use_idle_io_class
from .diskload import DiskLoad, DiskStat, device_number, parse_diskstats, read_proc_diskstats
from .jitter import NO_JITTER, Jitter
from .pacer import Pacer
from .wakeup import Wakeup
from .windows import AllowedWindows, HourRange, parse_days, parse_hours

__all__ = [
    "AllowedWindows", "Backoff", "BackoffPolicy", "Clock", "DiskLoad", "DiskStat", "HourRange",
    "Jitter", "ManualClock", "NO_JITTER", "Pacer", "SYSTEM_CLOCK", "SystemClock", "TokenBucket",
    "Wakeup", "device_number", "local_now", "parse_days", "parse_diskstats", "parse_hours",
    "io_class", "read_proc_diskstats", "use_idle_io_class",
]
