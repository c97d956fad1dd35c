from datetime import datetime

import pytest

from throttle import AllowedWindows, HourRange

# 2024-06-10 is a Monday; mid-June is far from any daylight-saving switch.
MON, TUE, WED, THU, FRI, SAT, SUN = (datetime(2024, 6, 10 + offset) for offset in range(7))


def at(day: datetime, hhmm: str) -> datetime:
    hour, minute = map(int, hhmm.split(":"))
    return day.replace(hour=hour, minute=minute)


def test_inside_and_outside_an_hour_range():
    night = AllowedWindows.parse("01:00-06:00")
    assert night.contains(at(WED, "01:00"))
    assert night.contains(at(WED, "05:59"))
    assert not night.contains(at(WED, "00:59"))
    assert not night.contains(at(WED, "06:00"))  # the end is excluded
    assert not night.contains(at(WED, "12:00"))


def test_a_range_wraps_past_midnight():
    late = AllowedWindows.parse("22:00-02:00")
    assert late.contains(at(WED, "22:00"))
    assert late.contains(at(WED, "23:30"))
    assert late.contains(at(THU, "01:59"))
    assert not late.contains(at(THU, "02:00"))
    assert not late.contains(at(WED, "21:59"))


def test_day_sets_and_ranges():
    weekdays = AllowedWindows.parse(days="mon-fri")
    assert weekdays.contains(at(MON, "00:00")) and weekdays.contains(at(FRI, "23:59"))
    assert not weekdays.contains(at(SAT, "12:00")) and not weekdays.contains(at(SUN, "12:00"))
    weekend = AllowedWindows.parse(days="sat,sun")
    assert weekend.contains(at(SAT, "12:00")) and not weekend.contains(at(MON, "12:00"))
    assert AllowedWindows.parse(days="fri-mon").days == {4, 5, 6, 0}
    assert AllowedWindows.parse(days="Monday, wed").days == {0, 2}


def test_a_wrapping_window_belongs_to_the_day_it_opens():
    friday_night = AllowedWindows.parse("22:00-02:00", "fri")
    assert friday_night.contains(at(FRI, "23:00"))
    assert friday_night.contains(at(SAT, "01:00"))
    assert not friday_night.contains(at(FRI, "01:00"))  # that is Thursday's window
    assert not friday_night.contains(at(SAT, "23:00"))


def test_several_ranges_and_all_day():
    two = AllowedWindows.parse("01:00-03:00, 13:00-14:00")
    assert two.contains(at(MON, "02:00")) and two.contains(at(MON, "13:30"))
    assert not two.contains(at(MON, "12:00"))
    always = AllowedWindows.parse("00:00-24:00")
    assert always.contains(at(MON, "00:00")) and always.contains(at(SUN, "23:59"))
    assert AllowedWindows.parse() == AllowedWindows()


def test_next_opening():
    nightly = AllowedWindows.parse("01:00-06:00", "mon-fri")
    assert nightly.next_opening(at(MON, "07:00")) == at(TUE, "01:00")
    assert nightly.next_opening(at(MON, "00:30")) == at(MON, "01:00")
    assert nightly.next_opening(at(FRI, "07:00")) == at(datetime(2024, 6, 17), "01:00")
    inside = at(WED, "03:00")
    assert nightly.next_opening(inside) == inside


@pytest.mark.parametrize("hours, message", [
    ("", "bad hours"),
    ("1-6", "expected HH:MM-HH:MM"),
    ("01:00", "expected HH:MM-HH:MM"),
    ("01:00-06:00,", "no empty items"),
    ("25:00-06:00", "bad time"),
    ("01:60-06:00", "bad time"),
    ("24:00-06:00", "bad time"),
    ("01:00-24:30", "bad time"),
    ("01:00-01:00", "empty hour range"),
    ("00:00-00:00", "empty hour range"),
])
def test_bad_hours_raise_a_clear_value_error(hours, message):
    with pytest.raises(ValueError, match=message):
        AllowedWindows.parse(hours=hours)


@pytest.mark.parametrize("days, message", [
    ("", "bad days"),
    ("mon,,tue", "no empty items"),
    ("funday", "bad day 'funday'"),
    ("mon-funday", "bad day 'funday'"),
    ("mon-", "bad day ''"),
])
def test_bad_days_raise_a_clear_value_error(days, message):
    with pytest.raises(ValueError, match=message):
        AllowedWindows.parse(days=days)


@pytest.mark.parametrize("start, end", [(60, 60), (-1, 60), (0, 1441), (1440, 60)])
def test_hour_ranges_built_directly_are_checked_too(start, end):
    with pytest.raises(ValueError, match="hour range needs"):
        HourRange(start, end)


def test_days_outside_the_week_are_refused():
    with pytest.raises(ValueError, match="days among 0-6"):
        AllowedWindows(days=frozenset({7}))
