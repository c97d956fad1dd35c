import random
import time
from datetime import datetime, timedelta, timezone

import pytest

from throttle import NO_JITTER, AllowedWindows, Jitter, ManualClock, Pacer, local_now
from threads import run_in_thread

# A Monday in mid-June: far from any daylight-saving switch.
MONDAY_0700 = datetime(2024, 6, 10, 7, 0)
NIGHTLY = AllowedWindows.parse("01:00-06:00")


def fake_pacer(rate=1000, entries=None, start=MONDAY_0700, **options):
    clock = ManualClock(start)
    options.setdefault("jitter", NO_JITTER)
    return Pacer(rate, entries, clock=clock, **options), clock


def test_take_bytes_is_paced_at_the_rate_after_the_burst():
    pacer, clock = fake_pacer(rate=1000, burst_seconds=0.1)
    assert pacer.take_bytes(100) is False
    assert clock.waits == []
    pacer.take_bytes(1000)
    assert sum(clock.waits) == pytest.approx(1.0)
    assert pacer.effective_rate() == 1000


def test_entries_have_their_own_bucket_and_none_is_unlimited():
    pacer, clock = fake_pacer(rate=None, entries=100, burst_seconds=0.1)
    pacer.take_bytes(10**12)
    assert clock.waits == []
    pacer.take_entries(10)
    pacer.take_entries(100)
    assert sum(clock.waits) == pytest.approx(1.0)
    assert pacer.effective_rate() is None


def test_set_rate_applies_at_once():
    pacer, clock = fake_pacer(rate=1000, burst_seconds=0.1)
    pacer.take_bytes(100)
    pacer.set_rate(10_000)
    assert pacer.effective_rate() == 10_000
    pacer.take_bytes(10_000)
    assert sum(clock.waits) == pytest.approx(1.0)
    pacer.set_rate(0)
    assert pacer.effective_rate() is None
    with pytest.raises(ValueError, match="rate must be"):
        pacer.set_rate(-5)


def test_paused_outside_the_window_waits_until_it_opens():
    pacer, clock = fake_pacer(windows=NIGHTLY, outside_factor=0)
    assert pacer.effective_rate() == 0
    assert pacer.take_bytes(10) is False
    assert local_now(clock) == datetime(2024, 6, 11, 1, 0)
    assert clock.waits == [pytest.approx(18 * 3600)]
    assert pacer.effective_rate() == 1000


def test_paused_wait_is_staggered_by_the_jitter():
    pacer, clock = fake_pacer(windows=NIGHTLY, jitter=Jitter(max_stagger=30, rng=random.Random(3)))
    pacer.take_bytes(10)
    assert 18 * 3600 <= sum(clock.waits) <= 18 * 3600 + 30
    assert NIGHTLY.contains(local_now(clock))


def test_outside_the_window_a_slower_rate_applies():
    pacer, clock = fake_pacer(rate=1000, windows=NIGHTLY, outside_factor=0.25, burst_seconds=0.1)
    assert pacer.effective_rate() == 250
    pacer.take_bytes(25)
    pacer.take_bytes(250)
    assert sum(clock.waits) == pytest.approx(1.0)


def test_the_full_rate_returns_when_the_window_opens():
    pacer, clock = fake_pacer(windows=NIGHTLY, outside_factor=0.5, start=datetime(2024, 6, 11, 0, 59, 30))
    assert pacer.effective_rate() == 500
    clock.advance(31)
    assert pacer.effective_rate() == 1000
    clock.advance(5 * 3600)
    assert pacer.effective_rate() == 500


def test_set_windows_reopens_a_paused_pacer():
    pacer, _ = fake_pacer(windows=NIGHTLY)
    assert pacer.effective_rate() == 0
    pacer.set_windows(None)
    assert pacer.effective_rate() == 1000
    with pytest.raises(ValueError, match="outside_factor"):
        pacer.set_windows(NIGHTLY, outside_factor=2)


def test_wait_is_jittered_and_reports_no_wake():
    pacer, clock = fake_pacer(jitter=Jitter(0.1, rng=random.Random(5)))
    assert [pacer.wait(100) for _ in range(20)] == [False] * 20
    assert all(90 <= w <= 110 for w in clock.waits)
    assert len(set(clock.waits)) > 1


def test_after_stop_takes_and_waits_return_true_at_once():
    pacer, clock = fake_pacer(rate=1, windows=NIGHTLY)
    pacer.stop()
    assert pacer.stopped
    assert pacer.take_bytes(10**6) is True
    assert pacer.take_entries(1) is True
    assert pacer.wait(3600) is True
    assert clock.waits == []


def test_a_wake_between_reads_is_reported_by_the_next_take():
    pacer, _ = fake_pacer()
    pacer.wake()
    assert pacer.take_bytes(1) is True
    assert pacer.take_bytes(1) is False


def a_window_that_is_closed_now() -> AllowedWindows:
    opens = datetime.now() + timedelta(hours=2)
    closes = opens + timedelta(hours=1)
    return AllowedWindows.parse(f"{opens:%H:%M}-{closes:%H:%M}")


@pytest.mark.parametrize("interrupt", ["wake", "stop"])
def test_wake_or_stop_cuts_a_paused_take_short(interrupt):
    pacer = Pacer(1_000_000, windows=a_window_that_is_closed_now(), outside_factor=0)
    thread, result = run_in_thread(lambda: pacer.take_bytes(65536))
    time.sleep(0.1)
    getattr(pacer, interrupt)()
    thread.join(30)
    assert result["value"] is True
    assert result["elapsed"] < 5


def test_wake_cuts_a_long_pacer_wait_short():
    pacer = Pacer(1_000_000)
    thread, result = run_in_thread(lambda: pacer.wait(60))
    time.sleep(0.1)
    pacer.wake()
    thread.join(30)
    assert result["value"] is True
    assert result["elapsed"] < 5


def test_wake_cuts_a_take_in_debt_short():
    pacer = Pacer(1000)
    thread, result = run_in_thread(lambda: pacer.take_bytes(60_000))
    time.sleep(0.1)
    pacer.wake()
    thread.join(30)
    assert result["value"] is True
    assert result["elapsed"] < 5


def test_opening_the_window_releases_a_paused_take():
    pacer = Pacer(1_000_000, windows=a_window_that_is_closed_now(), outside_factor=0)
    thread, result = run_in_thread(lambda: pacer.take_bytes(65536))
    time.sleep(0.1)
    pacer.set_windows(None)
    thread.join(30)
    assert result["value"] is False
    assert result["elapsed"] < 5


@pytest.mark.parametrize("option, value", [("burst_seconds", 0), ("control_interval", -1), ("outside_factor", -0.5)])
def test_bad_options_are_refused(option, value):
    with pytest.raises(ValueError, match=option):
        Pacer(1000, **{option: value})


@pytest.fixture
def berlin_time(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_window_after_the_autumn_clock_change_does_not_spin(berlin_time):
    # 01:05 UTC is the second 02:05 of 2024-10-27 in Berlin; naive 02:10 maps to the first one, in the past.
    second_0205 = datetime(2024, 10, 27, 1, 5, tzinfo=timezone.utc).timestamp()
    if datetime.fromtimestamp(second_0205).fold != 1:
        pytest.skip("no tz database for Europe/Berlin")
    pacer, clock = fake_pacer(windows=AllowedWindows.parse("02:10-02:20"), start=second_0205)
    thread, result = run_in_thread(lambda: pacer.take_bytes(10))
    thread.join(10)
    assert not thread.is_alive()
    assert result["value"] is False
    assert clock.time() - second_0205 == pytest.approx(300, abs=1)
