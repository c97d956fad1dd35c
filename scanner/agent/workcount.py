"""The agent's bytes read as a monotonic counter, counted where the throttle is paid for them."""

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
