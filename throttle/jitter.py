"""Random spread on sleeps, so the scanners of many bookies do not pulse in step."""

from __future__ import annotations

import random


class Jitter:
    """``spread(s)`` scales a sleep by a uniform factor in [1 - fraction, 1 + fraction];
    ``stagger()`` is a uniform extra delay in [0, max_stagger] seconds for a window opening,
    where scaling a many-hour pause by a fraction would move the start by far too much.
    """

    __slots__ = ("fraction", "max_stagger", "_random")

    def __init__(self, fraction: float = 0.1, max_stagger: float = 30.0, rng: random.Random | None = None):
        if not 0 <= fraction < 1:
            raise ValueError(f"jitter fraction must be in [0, 1); got {fraction!r}")
        if not 0 <= max_stagger < float("inf"):
            raise ValueError(f"jitter max_stagger must be a finite number of seconds >= 0; got {max_stagger!r}")
        self.fraction = fraction
        self.max_stagger = max_stagger
        self._random = rng if rng is not None else random.Random()

    def spread(self, seconds: float) -> float:
        """``seconds`` moved by up to ±fraction at random."""
        return seconds * self._random.uniform(1 - self.fraction, 1 + self.fraction)

    def stagger(self) -> float:
        """A random extra delay before starting at a window's opening."""
        return self._random.uniform(0, self.max_stagger)


NO_JITTER = Jitter(0.0, 0.0)
