"""Hands the agent's findings to repair: marks filed when ZooKeeper answers, and the follow-up cycle, whose
word ends a ledger's findings (repaired, deleted, moved) and whose UNREPAIRED findings go to the book.

With ``rereplicate`` the follow-up moves damaged fragments to other bookies (``scanner.repair.rereplicate``).
"""

from __future__ import annotations

import logging
import shlex
import threading
import time
from collections.abc import Callable, Mapping

from kazoo.exceptions import KazooException

from scanner.agent.findingbook import FindingBook
from scanner.agent.lograte import RateLimitedLog
from scanner.checks.findings import Category
from scanner.metadata.store import MetadataUnavailable
from scanner.repair.blast_radius import BlastRadius, DamageFigures, FailedDiskBreaker, MoveBudget
from scanner.repair.filer import MarkFiler
from scanner.repair.backoff import FIRST_RETRY_SECONDS
from scanner.repair.followup import FollowUp
from scanner.repair.marks import MarkError, UnderreplicationMarks
from scanner.repair.placement.settings import PlacementSettings
from scanner.repair.planner import damage_by_ledger, plan_repairs
from scanner.repair.rereplicate import Rereplicator
from scanner.repair.zk_acls import zk_acls

log = logging.getLogger(__name__)

CYCLE_SECONDS = 120.0
# The damage a move repairs.
REREPLICATED = tuple(c for c in Category if c.needs_rereplication)
# What the follow-up's end of a ledger ends: the damage it followed, and its own word that it stayed.
FOLLOWED = REREPLICATED + (Category.UNREPAIRED,)
# What a failing disk leaves in its entry logs.
DISK_DAMAGE = (Category.DAMAGED_ENTRY_LOG, Category.CORRUPT_ENTRY, Category.LOST_ENTRY)


class Marking:
    """Files marks for recorded damage (each ledger once: the follow-up state remembers it)."""

    def __init__(self, metadata, book: FindingBook, bookie_id: str, state_dir, repair_command: str | None, *,
                 ledger_dirs: list[str], rereplicate: bool = True, copy_bytes_per_second: float | None = None,
                 stopping: Callable[[], bool] = lambda: False, blast_radius: BlastRadius = BlastRadius(),
                 bookie_size: Callable[[], tuple[int, int]] = lambda: (0, 0), conf: Mapping[str, str] | None = None,
                 placement: PlacementSettings = PlacementSettings(),
                 first_retry_seconds: float = FIRST_RETRY_SECONDS):
        self.metadata = metadata
        self.ledger_dirs = ledger_dirs  # an UNREPAIRED finding goes to the dir that owns its ledger
        self.book = book
        self.bookie_id = bookie_id
        self.stopping = stopping
        self.bookie_size = bookie_size  # (ledgers in the index, entry logs): what the breaker's shares are of
        self.budget = MoveBudget(state_dir, blast_radius)
        self.breaker = FailedDiskBreaker(state_dir, blast_radius)
        # TransportRefused when marks cannot be made as BookKeeper makes them (zkEnableSecurity without SASL).
        filer = MarkFiler(UnderreplicationMarks(metadata.client, metadata.root,
                                                acl=zk_acls(conf or {}, metadata.client)), bookie_id)
        mover = Rereplicator(metadata.store, bookie_id, bytes_per_second=copy_bytes_per_second,
                             stopping=stopping, budget=self.budget, conf=conf,
                             placement=placement) if rereplicate else None
        self.followup = FollowUp(state_dir, filer, rereplicator=mover,
                                 repair_command=shlex.split(repair_command) if repair_command else None,
                                 first_retry_seconds=first_retry_seconds)
        self._lock = threading.Lock()  # filing and the follow-up cycle never interleave
        self._retries = RateLimitedLog(log, logging.WARNING)  # a round every few seconds while it fails
        self.filed_ledgers = 0

    def file_pending(self) -> int:
        """File marks for damage recorded but not yet marked; 0 (and nothing lost) while ZooKeeper is down."""
        with self._lock:
            pending = self.book.awaiting_marks()
            if not pending or not self.metadata.connected:
                return 0
            damage = [entry.finding for entry in pending]
            try:
                metadata = {ledger_id: self.metadata.store.ledger(ledger_id) for ledger_id in damage_by_ledger(damage)}
                report, _ = self.followup.file(plan_repairs(damage, metadata, self.bookie_id))
            except (MetadataUnavailable, MarkError, KazooException, OSError) as exc:
                self._retries.log("marks not filed yet (%s): will retry", exc)
                return 0
            failed = set(report.failed)
            self.book.marked([e for e in pending if e.finding.ledger_id not in failed])
            filed = len(report.marked) + len(report.merged)
            self.filed_ledgers += filed
            return filed

    def follow_up(self, reverify) -> None:
        """One follow-up cycle over the marks filed; UNREPAIRED findings go to the book.

        A cycle starts no new ledger after ``CYCLE_SECONDS``, so new marks are not held back for long
        behind many moves; the ledgers it did not reach are due first in the next one.
        """
        with self._lock:
            if not self.metadata.connected:
                return
            deadline = time.monotonic() + CYCLE_SECONDS
            may_move = self.breaker.judge(self.damage_figures())
            try:
                report = self.followup.run_cycle(self.metadata.store, reverify,
                                                 lambda: self.stopping() or time.monotonic() > deadline, may_move)
            except (MetadataUnavailable, MarkError, KazooException, OSError) as exc:
                self._retries.log("follow-up cycle cut short (%s): will retry", exc)
                return
        for finding in report.findings:
            self.book.record(self.ledger_dirs[finding.ledger_id % len(self.ledger_dirs)], [finding])
        for ledger_id, why in report.ended.items():
            self.book.end_ledger(ledger_id, FOLLOWED, f"repair follow-up: {why}")

    def damage_figures(self) -> DamageFigures:
        """The damage open in the book against the bookie's size, for the failed-disk breaker (asked every cycle,
        so counted by the book's database, not finding by finding)."""
        ledgers, logs = self.book.spread(REREPLICATED, DISK_DAMAGE)
        ledger_count, log_count = self.bookie_size()
        return DamageFigures(ledgers, ledger_count, logs, log_count)

    def repair_report(self) -> dict:
        """Not under the cycle's lock: a move can take minutes, /health must answer meanwhile."""
        return dict(self.followup.report(), budget=self.budget.to_json(), breaker=self.breaker.to_json())

    def tracked_by_stage(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for record in list(self.followup.tracked.values()):
            counts[record.stage.value] = counts.get(record.stage.value, 0) + 1
        return counts
