"""IO-aware back-off: shrink the rate while the disk is busy, grow it back while it is idle."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """When and how fast the rate factor moves, per utilisation sample.

    Above ``busy_above`` the factor is multiplied by ``decrease`` (down to ``floor``); below
    ``idle_below`` it grows by ``recover_step`` (up to 1); in between it holds, so the rate does
    not flap around a single threshold.
    """

    busy_above: float = 0.7
    idle_below: float = 0.5
    decrease: float = 0.5
    recover_step: float = 0.1
    floor: float = 0.1

    def __post_init__(self) -> None:
        if not 0 < self.idle_below <= self.busy_above <= 1:
            raise ValueError(
                f"back-off thresholds need 0 < idle_below <= busy_above <= 1; "
                f"got idle_below={self.idle_below!r}, busy_above={self.busy_above!r}")
        if not 0 < self.decrease < 1:
            raise ValueError(f"back-off decrease must be a factor in (0, 1); got {self.decrease!r}")
        if not 0 < self.recover_step <= 1:
            raise ValueError(f"back-off recover_step must be in (0, 1]; got {self.recover_step!r}")
        if not 0 < self.floor <= 1:
            raise ValueError(f"back-off floor must be a fraction of the rate in (0, 1]; got {self.floor!r}")


class Backoff:
    """The current rate factor in [floor, 1], moved by one utilisation sample at a time."""

    __slots__ = ("policy", "factor")

    def __init__(self, policy: BackoffPolicy = BackoffPolicy()):
        self.policy = policy
        self.factor = 1.0

    def update(self, utilisation: float | None) -> float:
        """Apply one sample (None = unknown, treated as idle) and return the new factor."""
        policy = self.policy
        if utilisation is not None and utilisation > policy.busy_above:
            self.factor = max(policy.floor, self.factor * policy.decrease)
        elif utilisation is None or utilisation < policy.idle_below:
            self.factor = min(1.0, self.factor + policy.recover_step)
        return self.factor
