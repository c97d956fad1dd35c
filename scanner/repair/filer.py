"""Filing marks for many ledgers at once: paced, batched, and a no-op when repeated.

A dead disk can damage thousands of ledgers in one scan; marks go out in pipelined batches through a
marks-per-second token bucket so the ZooKeeper ensemble the whole cluster depends on is not flooded.
While auto-recovery is disabled (``underreplication/disable``) nothing is written and the report says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from scanner.repair.marks import MarkError, MarkOutcome, UnderreplicationMarks
from scanner.repair.planner import Action, LedgerPlan
from throttle import TokenBucket

log = logging.getLogger(__name__)

DEFAULT_MARKS_PER_SECOND = 50.0
DEFAULT_BATCH = 100


@dataclass
class FilingReport:
    """What ``file_marks`` did, for the scan report's ``repair`` section."""

    marked: list[int] = field(default_factory=list)  # new marks
    merged: list[int] = field(default_factory=list)  # this bookie added to an existing mark
    already_marked: list[int] = field(default_factory=list)
    skipped: list[LedgerPlan] = field(default_factory=list)
    deferred: list[LedgerPlan] = field(default_factory=list)
    disabled: list[int] = field(default_factory=list)  # would be marked, but auto-recovery is disabled
    failed: dict[int, str] = field(default_factory=dict)  # ledger id -> why ZooKeeper would not take it
    created_zxids: dict[int, int] = field(default_factory=dict)  # the marks created: ours to delete once repaired

    @property
    def filed(self) -> list[int]:
        """Ledgers whose mark names this bookie now, in any way."""
        return sorted(self.marked + self.merged + self.already_marked)

    def to_json(self) -> dict:
        return {
            "marked": self.marked, "merged": self.merged, "already_marked": self.already_marked,
            "skipped": [p.to_json() for p in self.skipped], "deferred": [p.to_json() for p in self.deferred],
            "disabled": self.disabled,
            "failed": {str(k): v for k, v in sorted(self.failed.items())},
        }


class MarkFiler:
    """Files the MARK plans of one bookie, at most ``marks_per_second`` (None: unlimited)."""

    def __init__(self, marks: UnderreplicationMarks, bookie_id: str,
                 marks_per_second: float | None = DEFAULT_MARKS_PER_SECOND, batch: int = DEFAULT_BATCH,
                 bucket: TokenBucket | None = None):
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        self.marks = marks
        self.bookie_id = bookie_id
        self.batch = batch
        self.bucket = bucket or TokenBucket(marks_per_second, burst=batch)

    def file_marks(self, plans: list[LedgerPlan]) -> FilingReport:
        """Mark every MARK plan's ledger as missing this bookie; DEFER and SKIP plans are only reported."""
        report = FilingReport(
            skipped=[p for p in plans if p.action is Action.SKIP],
            deferred=[p for p in plans if p.action is Action.DEFER],
        )
        to_mark = [p.ledger_id for p in plans if p.action is Action.MARK]
        if to_mark and not self.marks.replication_enabled():
            log.warning("auto-recovery is disabled (underreplication/disable exists): %d damaged ledgers "
                        "left unmarked", len(to_mark))
            report.disabled = to_mark
            return report
        buckets = {MarkOutcome.CREATED: report.marked, MarkOutcome.MERGED: report.merged,
                   MarkOutcome.UNCHANGED: report.already_marked}
        for start in range(0, len(to_mark), self.batch):
            chunk = to_mark[start:start + self.batch]
            self.bucket.take(len(chunk))
            for ledger_id, outcome in sorted(self.marks.mark_many(chunk, [self.bookie_id],
                                                                               report.created_zxids).items()):
                if isinstance(outcome, MarkError):
                    log.error("could not mark ledger %d: %s", ledger_id, outcome)
                    report.failed[ledger_id] = str(outcome)
                else:
                    buckets[outcome].append(ledger_id)
        for ledger_id in report.marked + report.merged:
            log.info("marked ledger %d under-replicated (replica %s)", ledger_id, self.bookie_id)
        return report
