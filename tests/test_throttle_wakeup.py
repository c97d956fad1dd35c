import threading
import time

from throttle import ManualClock, Wakeup


def wait_in_thread(wakeup: Wakeup, seconds: float):
    result = {}

    def target():
        started = time.monotonic()
        result["woken"] = wakeup.wait(seconds)
        result["elapsed"] = time.monotonic() - started

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, result


def test_wake_cuts_a_long_wait_short_from_another_thread():
    wakeup = Wakeup()
    thread, result = wait_in_thread(wakeup, 60)
    time.sleep(0.1)
    wakeup.wake()
    thread.join(30)
    assert result["woken"] is True
    assert result["elapsed"] < 5


def test_wake_reaches_every_waiter():
    wakeup = Wakeup()
    waiters = [wait_in_thread(wakeup, 60) for _ in range(3)]
    time.sleep(0.2)
    wakeup.wake()
    for thread, result in waiters:
        thread.join(30)
        assert result["woken"] is True
        assert result["elapsed"] < 5


def test_stop_cuts_a_wait_short_from_another_thread():
    wakeup = Wakeup()
    thread, result = wait_in_thread(wakeup, 60)
    time.sleep(0.1)
    wakeup.stop()
    thread.join(30)
    assert result["woken"] is True
    assert result["elapsed"] < 5


def test_a_wake_with_nobody_waiting_is_kept_for_the_next_wait_only():
    clock = ManualClock()
    wakeup = Wakeup(clock)
    wakeup.wake()
    assert wakeup.wait(60) is True
    assert clock.waits == []
    assert wakeup.wait(60) is False
    assert clock.waits == [60]


def test_a_wait_without_news_times_out_false():
    clock = ManualClock()
    wakeup = Wakeup(clock)
    assert wakeup.wait(2.5) is False
    assert clock.waits == [2.5]


def test_after_stop_every_wait_returns_true_at_once():
    clock = ManualClock()
    wakeup = Wakeup(clock)
    wakeup.stop()
    assert [wakeup.wait(60) for _ in range(3)] == [True, True, True]
    assert wakeup.poll() is True
    assert wakeup.stopped
    assert clock.waits == []


def test_poll_consumes_a_wake_without_blocking():
    clock = ManualClock()
    wakeup = Wakeup(clock)
    assert wakeup.poll() is False
    wakeup.wake()
    assert wakeup.poll() is True
    assert wakeup.poll() is False
    assert clock.waits == []


def test_a_nudge_ends_a_wait_early_without_reporting_a_wake():
    wakeup = Wakeup()
    thread, result = wait_in_thread(wakeup, 60)
    time.sleep(0.1)
    wakeup.nudge()
    thread.join(30)
    assert result["woken"] is False
    assert result["elapsed"] < 5


def test_a_nudge_before_the_wait_is_not_missed_when_passed_since():
    clock = ManualClock()
    wakeup = Wakeup(clock)
    before = wakeup.nudges()
    wakeup.nudge()
    assert wakeup.wait(60, since=before) is False
    assert clock.waits == []
