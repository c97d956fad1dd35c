"""What a scan pays its reads to: a pacer (``throttle.Pacer`` or the agent's), or nothing."""

from __future__ import annotations

import time
from typing import Protocol


class Pacer(Protocol):
    def take_bytes(self, n: int) -> object: ...
    def take_entries(self, n: int) -> object: ...
    def pause(self, seconds: float) -> object: ...  # idle at least this long, unless the scan must stop


class Unpaced:
    def take_bytes(self, n: int) -> None:
        return None

    def take_entries(self, n: int) -> None:
        return None

    def pause(self, seconds: float) -> None:
        time.sleep(seconds)
