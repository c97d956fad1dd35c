"""Allowed windows: the hours of day and days of week (local time) when the full rate applies."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL_DAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MINUTES_PER_DAY = 24 * 60
_HOUR_RANGE = re.compile(r"(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})")


@dataclass(frozen=True, slots=True)
class HourRange:
    """Minutes after midnight, ``start`` included, ``end`` excluded; ``end <= start`` wraps past midnight."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not (0 <= self.start < _MINUTES_PER_DAY and 0 <= self.end <= _MINUTES_PER_DAY
                and self.start != self.end % _MINUTES_PER_DAY or (self.start, self.end) == (0, _MINUTES_PER_DAY)):
            raise ValueError(f"hour range needs 0 <= start < 1440, 0 <= end <= 1440 minutes and must not be empty; "
                             f"got start={self.start}, end={self.end}")

    @property
    def wraps(self) -> bool:
        return self.end <= self.start


ALL_DAY_HOURS = (HourRange(0, _MINUTES_PER_DAY),)
EVERY_DAY = frozenset(range(7))


@dataclass(frozen=True, slots=True)
class AllowedWindows:
    """Windows that open at each ``hours`` range's start on each of ``days`` (0 = Monday).

    A window that wraps past midnight belongs to the day it opens on: "22:00-02:00" on "fri"
    covers Friday 22:00 to Saturday 02:00.
    """

    hours: tuple[HourRange, ...] = ALL_DAY_HOURS
    days: frozenset[int] = EVERY_DAY

    def __post_init__(self) -> None:
        if not self.hours or not self.days or not self.days <= EVERY_DAY:
            raise ValueError(f"allowed windows need at least one hour range and days among 0-6 (Monday = 0); "
                             f"got hours={self.hours}, days={sorted(self.days)}")

    @classmethod
    def parse(cls, hours: str | None = None, days: str | None = None) -> "AllowedWindows":
        """From strings like ``"01:00-06:00, 22:00-23:30"`` and ``"mon-fri"`` / ``"sat,sun"``.

        Either may be None: all day, every day.
        """
        return cls(
            hours=ALL_DAY_HOURS if hours is None else parse_hours(hours),
            days=EVERY_DAY if days is None else parse_days(days),
        )

    def contains(self, moment: datetime) -> bool:
        """True if ``moment`` (naive local time) falls inside a window."""
        minute = moment.hour * 60 + moment.minute + (moment.second + moment.microsecond / 1e6) / 60
        today = moment.weekday()
        yesterday = (today - 1) % 7
        for hour_range in self.hours:
            if hour_range.wraps:
                if (minute >= hour_range.start and today in self.days) or (
                        minute < hour_range.end and yesterday in self.days):
                    return True
            elif hour_range.start <= minute < hour_range.end and today in self.days:
                return True
        return False

    def next_opening(self, moment: datetime) -> datetime:
        """``moment`` itself when inside a window, else the start of the next window."""
        if self.contains(moment):
            return moment
        midnight = moment.replace(hour=0, minute=0, second=0, microsecond=0)
        # Today's and the next seven days' starts include every possible next opening.
        starts = (
            midnight + timedelta(days=offset, minutes=hour_range.start)
            for offset in range(8)
            for hour_range in self.hours
            if (moment.weekday() + offset) % 7 in self.days
        )
        return min(start for start in starts if start > moment)


def parse_hours(text: str) -> tuple[HourRange, ...]:
    """Comma-separated ``HH:MM-HH:MM`` ranges; ``24:00`` is allowed as an end."""
    ranges = []
    for item in _items(text, "hours"):
        match = _HOUR_RANGE.fullmatch(item)
        if match is None:
            raise ValueError(f"bad hour range {item!r} in {text!r}: expected HH:MM-HH:MM, e.g. 01:00-06:00")
        start = _minute_of_day(item, text, int(match[1]), int(match[2]), allow_24=False)
        end = _minute_of_day(item, text, int(match[3]), int(match[4]), allow_24=True)
        try:
            ranges.append(HourRange(start, end))
        except ValueError:
            # The bounds were checked above, so only an empty range is left to refuse.
            raise ValueError(f"empty hour range {item!r} in {text!r}: use 00:00-24:00 for all day") from None
    return tuple(ranges)


def parse_days(text: str) -> frozenset[int]:
    """Comma-separated day names or ranges (``mon-fri``, ``fri-mon`` wraps past Sunday)."""
    days: set[int] = set()
    for item in _items(text, "days"):
        first, dash, last = item.partition("-")
        start = _day_number(first, item, text)
        end = _day_number(last, item, text) if dash else start
        days.update((start + offset) % 7 for offset in range((end - start) % 7 + 1))
    return frozenset(days)


def _items(text: str, what: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise ValueError(f"bad {what} {text!r}: expected a comma-separated list with no empty items")
    return items


def _minute_of_day(item: str, text: str, hour: int, minute: int, *, allow_24: bool) -> int:
    if minute > 59 or hour > 24 or (hour == 24 and (minute or not allow_24)):
        raise ValueError(f"bad time in hour range {item!r} in {text!r}: hours 00-23 (24:00 only as an end), minutes 00-59")
    return hour * 60 + minute


def _day_number(name: str, item: str, text: str) -> int:
    name = name.strip().lower()
    for names in (DAY_NAMES, _FULL_DAY_NAMES):
        if name in names:
            return names.index(name)
    raise ValueError(f"bad day {name!r} in {item!r} of {text!r}: expected one of {', '.join(DAY_NAMES)} or a range like mon-fri")
