"""Where a ledger dir's pass stands against its period: when the next pass starts, and whether the
configured rate can still finish this one in time (and which rate would)."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PassSchedule:
    pass_due: float  # epoch seconds: pass_started + period; the next pass starts then (or at once if later)
    next_pass_at: float | None  # while waiting for it; None during a pass
    needed_bytes_per_second: float | None  # to finish on time from here; None when waiting or already late
    behind: bool  # the configured rate cannot finish this pass within its period


def jittered_period(period_seconds: float, jitter: float, seed: str) -> float:
    """``period_seconds`` times a factor in [1 - jitter, 1 + jitter], the same for the same ``seed`` (one per pass)."""
    return period_seconds * (1 + jitter * (2 * random.Random(seed).random() - 1))


def pass_schedule(phase: str, pass_started: float, bytes_done: int, bytes_total: int, period_seconds: float,
                  rate_cap: float | None, now: float, next_start: float | None = None) -> PassSchedule:
    """``period_seconds`` is the period as configured: a pass is due within it; ``next_start`` (default: the end of
    it) is when the pass after a finished one starts (jitter, start delay)."""
    due = pass_started + period_seconds
    if phase == "waiting":
        return PassSchedule(due, max(due if next_start is None else next_start, now), None, False)
    left = due - now
    remaining = max(0, bytes_total - bytes_done)
    if left <= 0:
        return PassSchedule(due, None, None, True)
    needed = remaining / left
    return PassSchedule(due, None, needed, rate_cap is not None and needed > rate_cap)
