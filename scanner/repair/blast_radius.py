"""What bounds the moves one agent makes: a budget per hour, and a breaker for a disk that is failing.

An agent that moves damaged fragments writes the metadata of a live cluster. A dying disk (damage in
every entry log) or a wrong decode shared by every agent after an upgrade would otherwise start a move
of every ledger of every bookie at once. BookKeeper's own answer to a failing disk is to take the bookie
out (``bookkeeper shell decommissionbookie``), not to move its ledgers one by one. So:

- ``MoveBudget``: at most so many fragments and so many bytes moved in any hour, counted across restarts
  (the moves of the last hour are kept in the state dir);
- ``FailedDiskBreaker``: when the damage open on this bookie reaches a share of its ledgers or of its
  entry logs, moving stops (marking goes on, so BookKeeper's own workers still see every damaged
  ledger) and the operator is told once, with the figures, to decommission the bookie. It closes again
  when the damage falls under half of what tripped it (a wrong decode fixed, findings ended by later
  passes), and is kept in the state dir so a restart does not reopen it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import Counter

from scanner.statefile import read_json, write_json

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
BUDGET_FILE = "repair-budget.json"
BREAKER_FILE = "repair-breaker.json"

BREAKER_TRIPS = Counter("bookie_scanner_repair_breaker_trips",
                        "Times the failed-disk breaker stopped this agent's moves")


@dataclass(frozen=True, slots=True)
class BlastRadius:
    """The settings (``[repair]`` in the agent's configuration); defaults sized for a 500-bookie cluster.

    At most 10 fragments an hour per agent is 5,000 an hour if every agent of 500 met the same bug at
    once, before their breakers trip; a failing disk trips its agent's breaker at 5 % of its ledgers
    (at least 20) or 10 % of its entry logs (at least 5).
    """

    moves_per_hour: int = 10
    move_bytes_per_hour: int = 2 << 30
    failed_disk_ledger_share: float = 0.05
    failed_disk_min_ledgers: int = 20
    failed_disk_log_share: float = 0.10
    failed_disk_min_logs: int = 5


class MoveBudget:
    """Fragments and bytes moved in the last hour, against the hourly budget."""

    def __init__(self, state_dir: Path, settings: BlastRadius, clock: Callable[[], float] = time.time):
        self.path = Path(state_dir) / BUDGET_FILE
        self.settings = settings
        self.clock = clock
        state = read_json(self.path) or {}
        self._moves: list[tuple[int, int]] = [(int(at), int(size)) for at, size in state.get("moves", [])]

    def _recent(self) -> list[tuple[int, int]]:
        since = int(self.clock() * 1000) - HOUR_MS
        self._moves = [m for m in self._moves if m[0] > since]
        return self._moves

    def refusal(self) -> str | None:
        """Why no further fragment may move now, or None."""
        recent = self._recent()
        moved_bytes = sum(size for _, size in recent)
        if len(recent) < self.settings.moves_per_hour and moved_bytes < self.settings.move_bytes_per_hour:
            return None
        free_at = (recent[0][0] + HOUR_MS) / 1000
        wait = max(0, math.ceil(free_at - self.clock()))
        return (f"the repair budget is spent ({len(recent)} fragments, {moved_bytes} bytes moved in the last hour; "
                f"at most {self.settings.moves_per_hour} and {self.settings.move_bytes_per_hour}): the next move "
                f"in {wait}s")

    def spend(self, moved_bytes: int) -> None:
        self._recent().append((int(self.clock() * 1000), int(moved_bytes)))
        write_json(self.path, {"moves": [list(m) for m in self._moves]})

    def to_json(self) -> dict:
        recent = self._recent()
        return {"moves_last_hour": len(recent), "bytes_last_hour": sum(size for _, size in recent),
                "moves_per_hour": self.settings.moves_per_hour,
                "move_bytes_per_hour": self.settings.move_bytes_per_hour}


@dataclass(frozen=True, slots=True)
class DamageFigures:
    """The damage open on this bookie, and what it has."""

    damaged_ledgers: int
    ledgers: int  # in its index, as the last pass counted them (0: not counted yet)
    damaged_entry_logs: int
    entry_logs: int

    def text(self) -> str:
        return (f"damage open in {self.damaged_ledgers} of {self.ledgers} ledgers and {self.damaged_entry_logs} of "
                f"{self.entry_logs} entry logs")


class FailedDiskBreaker:
    """Stops moves when the damage says the disk is failing; see the module's note."""

    def __init__(self, state_dir: Path, settings: BlastRadius, clock: Callable[[], float] = time.time):
        self.path = Path(state_dir) / BREAKER_FILE
        self.settings = settings
        self.clock = clock
        self.state: dict = read_json(self.path) or {}

    @property
    def tripped(self) -> bool:
        return bool(self.state.get("tripped_ms"))

    def thresholds(self, figures: DamageFigures) -> tuple[float, float]:
        s = self.settings
        return (max(s.failed_disk_min_ledgers, s.failed_disk_ledger_share * figures.ledgers),
                max(s.failed_disk_min_logs, s.failed_disk_log_share * figures.entry_logs))

    def judge(self, figures: DamageFigures) -> bool:
        """Whether moves may go on, given the damage now; trips (and tells once) or closes as it says."""
        ledger_limit, log_limit = self.thresholds(figures)
        over = figures.damaged_ledgers >= ledger_limit or figures.damaged_entry_logs >= log_limit
        if over and not self.tripped:
            self.state = {"tripped_ms": int(self.clock() * 1000), "figures": figures.text()}
            write_json(self.path, self.state)
            BREAKER_TRIPS.inc()
            log.error("this bookie's disk looks failed: %s (the breaker trips at %d ledgers or %d entry logs). "
                      "Moves are stopped, marks go on: decommission the bookie (bookkeeper shell "
                      "decommissionbookie) rather than move its ledgers one by one", figures.text(),
                      math.ceil(ledger_limit), math.ceil(log_limit))
        elif self.tripped and figures.damaged_ledgers < ledger_limit / 2 and figures.damaged_entry_logs < log_limit / 2:
            log.warning("the failed-disk breaker closes: %s; moves resume", figures.text())
            self.state = {}
            write_json(self.path, self.state)
        return not self.tripped

    def to_json(self) -> dict:
        return {"tripped": self.tripped, "tripped_ms": self.state.get("tripped_ms"),
                "figures": self.state.get("figures")}
