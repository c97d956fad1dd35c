import random

import pytest

from throttle import NO_JITTER, Jitter


def test_spread_stays_within_the_fraction_and_varies():
    jitter = Jitter(0.1, rng=random.Random(7))
    sleeps = [jitter.spread(10.0) for _ in range(200)]
    assert all(9.0 <= s <= 11.0 for s in sleeps)
    assert min(sleeps) < 9.5 and max(sleeps) > 10.5


def test_stagger_stays_within_its_maximum_and_varies():
    jitter = Jitter(max_stagger=30.0, rng=random.Random(7))
    delays = [jitter.stagger() for _ in range(200)]
    assert all(0 <= d <= 30 for d in delays)
    assert max(delays) - min(delays) > 15


def test_no_jitter_is_exact():
    assert NO_JITTER.spread(12.5) == 12.5
    assert NO_JITTER.stagger() == 0


@pytest.mark.parametrize("fraction", [-0.1, 1.0, float("nan")])
def test_bad_fractions_are_refused(fraction):
    with pytest.raises(ValueError, match="jitter fraction"):
        Jitter(fraction)


@pytest.mark.parametrize("stagger", [-1.0, float("inf"), float("nan")])
def test_bad_staggers_are_refused(stagger):
    with pytest.raises(ValueError, match="max_stagger"):
        Jitter(max_stagger=stagger)
