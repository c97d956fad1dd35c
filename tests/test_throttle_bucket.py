import math
import time

import pytest

from throttle import ManualClock, TokenBucket, Wakeup
from threads import run_in_thread


def make_bucket(rate, burst=None):
    clock = ManualClock()
    return TokenBucket(rate, burst, clock=clock), clock


def waited(clock: ManualClock) -> float:
    return sum(clock.waits)


def test_n_tokens_at_rate_r_take_n_over_r_seconds():
    bucket, clock = make_bucket(rate=100, burst=0)
    assert bucket.take(50) is False
    assert waited(clock) == pytest.approx(0.5)
    bucket.take(300)
    assert waited(clock) == pytest.approx(3.5)


def test_a_full_burst_is_free_and_the_next_token_is_not():
    bucket, clock = make_bucket(rate=100, burst=20)
    bucket.take(20)
    assert clock.waits == []
    bucket.take(10)
    assert waited(clock) == pytest.approx(0.1)


def test_idle_time_saves_up_no_more_than_the_burst():
    bucket, clock = make_bucket(rate=100, burst=20)
    bucket.take(20)
    clock.advance(3600)
    assert bucket.available() == pytest.approx(20)
    bucket.take(20)
    assert clock.waits == []
    bucket.take(1)
    assert waited(clock) == pytest.approx(0.01)


def test_a_take_larger_than_the_burst_pays_its_debt_over_time():
    bucket, clock = make_bucket(rate=100, burst=10)
    assert bucket.take(1000) is False
    assert waited(clock) == pytest.approx((1000 - 10) / 100)
    # The burst was spent on that take: the next one is paid at the rate.
    bucket.take(10)
    assert waited(clock) == pytest.approx(9.9 + 0.1)


def test_default_burst_is_one_second_of_rate():
    bucket, _ = make_bucket(rate=250)
    assert bucket.burst == 250


@pytest.mark.parametrize("rate", [None, 0])
def test_none_or_zero_rate_is_unlimited(rate):
    bucket, clock = make_bucket(rate=rate)
    for _ in range(1000):
        assert bucket.take(10**12) is False
    assert clock.waits == []
    assert bucket.rate is None


def test_rate_change_applies_from_then_on():
    bucket, clock = make_bucket(rate=100, burst=0)
    bucket.take(100)
    assert waited(clock) == pytest.approx(1.0)
    bucket.set_rate(1000, burst=0)
    bucket.take(100)
    assert waited(clock) == pytest.approx(1.1)
    bucket.set_rate(None)
    bucket.take(10**9)
    assert waited(clock) == pytest.approx(1.1)
    bucket.set_rate(10, burst=0)
    bucket.take(5)
    assert waited(clock) == pytest.approx(1.6)


def test_lowering_the_burst_drops_the_saved_tokens():
    bucket, clock = make_bucket(rate=100, burst=100)
    bucket.set_rate(100, burst=10)
    bucket.take(20)
    assert waited(clock) == pytest.approx(0.1)


@pytest.mark.parametrize("rate", [-1, math.inf, math.nan])
def test_bad_rates_are_refused(rate):
    with pytest.raises(ValueError, match="rate must be"):
        TokenBucket(rate)


@pytest.mark.parametrize("burst", [-1, math.inf, math.nan])
def test_bad_bursts_are_refused(burst):
    with pytest.raises(ValueError, match="burst must be"):
        TokenBucket(10, burst)


def test_negative_take_is_refused():
    bucket, _ = make_bucket(rate=10)
    with pytest.raises(ValueError, match="negative"):
        bucket.take(-1)


def test_threads_together_never_exceed_the_rate():
    bucket = TokenBucket(1000, burst=0)
    started = time.monotonic()
    threads = [run_in_thread(lambda: [bucket.take(10) for _ in range(10)])[0] for _ in range(4)]
    for thread in threads:
        thread.join(30)
    # 400 tokens at 1000/s: a limiter can be late but never early.
    assert time.monotonic() - started >= 0.4 - 0.005
    assert not any(thread.is_alive() for thread in threads)


def test_raising_the_rate_releases_a_waiter_at_once():
    bucket = TokenBucket(1, burst=0)
    thread, result = run_in_thread(lambda: bucket.take(60))
    time.sleep(0.1)
    bucket.set_rate(None)
    thread.join(30)
    assert result["value"] is False
    assert result["elapsed"] < 5


def test_a_wake_cuts_a_take_short_and_the_debt_stays():
    wakeup = Wakeup()
    bucket = TokenBucket(1, burst=0, wakeup=wakeup)
    thread, result = run_in_thread(lambda: bucket.take(60))
    time.sleep(0.1)
    wakeup.wake()
    thread.join(30)
    assert result["value"] is True
    assert result["elapsed"] < 5
    assert bucket.available() < -50


def test_after_stop_every_take_returns_true_at_once():
    clock = ManualClock()
    wakeup = Wakeup(clock)
    bucket = TokenBucket(1, burst=0, clock=clock, wakeup=wakeup)
    wakeup.stop()
    assert bucket.take(1000) is True
    assert bucket.take(1) is True
    assert clock.waits == []
