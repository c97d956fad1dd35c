"""The agent's work as monotonic counters: bytes read, counted where the throttle is paid for them,
and totals that a scanner keeps only for its own life, carried across its successors."""

from __future__ import annotations

from throttle import Pacer


class MeteredPacer(Pacer):
    """A pacer that also counts the bytes paid for through it: what its scanner read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.bytes_taken = 0

    def take_bytes(self, n: int) -> bool:
        self.bytes_taken += n  # one scanner thread takes from a pacer
        return super().take_bytes(n)


class CarriedTotal:
    """The sum of a total that restarts at 0 now and then (a new scanner per pass), observed often.

    A smaller value than the last one observed means it restarted: all of it is new.
    """

    def __init__(self):
        self.value = 0
        self._last = 0

    def observe(self, current: int) -> int:
        self.value += current - self._last if current >= self._last else current
        self._last = current
        return self.value
