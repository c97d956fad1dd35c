"""Following a damaged ledger until its damage is really out of the cluster's way.

Every ledger this bookie marks is remembered in the scanner's state dir, with a short history of
what happened to it (found, marked, its mark cleared by a worker, moved, escalated) for the repair
report of ``status`` and ``/health``; the ones that ended are kept for a while after.

With re-replication (the agent's default when it marks), each cycle moves the damaged fragments
out of the ledger's ensemble the way BookKeeper's own replicator does (``rereplicate``), holding
the ledger's under-replication lock so a ReplicationWorker never works on it at the same time: a
ReplicationWorker reads a few entries per fragment without verifying digests, so a readable corrupt
copy passes its check and it would clear the mark without changing anything. Before a move the
ledger is re-verified on this bookie; a ledger deleted, moved on by someone else, or whose damage is
gone ends the follow-up. A move with no verified copy anywhere is escalated at once; one with no
bookie to move to (often one of them restarting) or that fails is escalated after a few tries in a row; all are
tried again, at growing intervals, and a later success still ends the follow-up (:mod:`scanner.repair.backoff`).

Without re-replication, marks are left to the workers: is the mark still there (pending)? If it is
gone, is the damage still on this bookie, in entries the fresh metadata still assigns here? Then
the copy is ``unrepaired``: we mark once more, and if that mark also vanishes with the damage in
place we escalate.

Escalating means: a counter, an ERROR line, and the operator's command run once
(:mod:`scanner.repair.escalation_command`). Deferred marks of open ledgers are filed once the ledger is closed.

The state of each ledger under follow-up is :mod:`scanner.repair.followup_state`; the report of it
:mod:`scanner.repair.followup_report`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from prometheus_client import Counter

from scanner.checks.findings import Category, EntryRanges, Finding, count_in_ranges
from scanner.repair.backoff import BUSY_SECONDS, FIRST_RETRY_SECONDS, escalate_now, retry_seconds
from scanner.repair.escalation_command import DEFAULT_COMMAND_TIMEOUT, expand_command, run_command
from scanner.repair.filer import FilingReport, MarkFiler
from scanner.repair.followup_report import REPORT_ROWS, repair_report
from scanner.repair.followup_state import ENDED_KEPT, STATE_FILE, Stage, TrackedMark, load_state, save_state
from scanner.repair.marks import DamagedMark, UnderreplicationMarks
from scanner.repair.planner import Action, LedgerPlan, damage_by_ledger, plan_ledger
from scanner.repair.repair_journal import RepairJournal
from scanner.repair.move_outcome import Outcome
from scanner.repair.rereplicate import Attempt, Rereplicator

log = logging.getLogger(__name__)

UNREPAIRED = Counter("bookie_scanner_unrepaired_ledgers",
                     "Times a cleared under-replication mark left this bookie's damaged copy in place")
ESCALATIONS = Counter("bookie_scanner_repair_escalations",
                      "Ledgers whose damage could not be repaired and were escalated to the operator")
MOVES = Counter("bookie_scanner_fragments_moved",
                "Damaged fragments copied (verified) to another bookie and taken out of this bookie's ensemble")


@dataclass
class CycleReport:
    pending: list[int] = field(default_factory=list)  # the mark is still there / another repairer holds the lock
    waiting: list[int] = field(default_factory=list)  # still deferred (open ledger, auto-recovery disabled)
    filed: list[int] = field(default_factory=list)  # a deferred mark filed now
    remarked: list[int] = field(default_factory=list)
    moved: list[int] = field(default_factory=list)  # damaged fragments moved to other bookies
    escalated: list[int] = field(default_factory=list)
    ended: dict[int, str] = field(default_factory=dict)  # ledger id -> why the follow-up ended
    findings: list[Finding] = field(default_factory=list)  # UNREPAIRED ones

    def to_json(self) -> dict:
        return {"pending": self.pending, "waiting": self.waiting, "filed": self.filed, "remarked": self.remarked,
                "moved": self.moved, "escalated": self.escalated,
                "ended": {str(k): v for k, v in sorted(self.ended.items())},
                "findings": [f.to_json() for f in self.findings]}


class FollowUp:
    """The marks this bookie filed, and the cycle that follows them (state in ``state_dir``).

    ``rereplicator`` moves damaged fragments to other bookies (None: leave repairs to the workers).
    ``repair_command`` is an argv template with ``{ledger}`` and ``{bookie}``, run at escalation.
    ``first_retry_seconds``: how long after a failed move it is tried again (then doubling); a move another
    repairer's lock put off is asked again after as long, at most ``BUSY_SECONDS``.
    """

    def __init__(self, state_dir: Path, filer: MarkFiler, *, rereplicator: Rereplicator | None = None,
                 repair_command: Sequence[str] | None = None, command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
                 first_retry_seconds: float = FIRST_RETRY_SECONDS, clock: Callable[[], float] = time.time):
        self.path = Path(state_dir) / STATE_FILE
        self.filer = filer
        self.marks: UnderreplicationMarks = filer.marks
        self.bookie_id = filer.bookie_id
        self.rereplicator = rereplicator
        self.journal = RepairJournal(state_dir)
        self.repair_command = tuple(repair_command) if repair_command else None
        self.command_timeout = command_timeout
        self.first_retry_seconds = first_retry_seconds
        self.clock = clock
        self.tracked: dict[int, TrackedMark]
        self.ended: list[dict]  # newest first: {"ledger_id", "why", "ended_ms", "record"}
        self.tracked, self.ended = load_state(self.path, self.bookie_id)

    def _save(self) -> None:
        save_state(self.path, self.tracked, self.ended)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- after a scan -------------------------------------------------------------------------

    def file(self, plans: list[LedgerPlan]) -> tuple[FilingReport, list[int]]:
        """File the plans' marks and remember them; also returns the ledgers already under follow-up.

        A ledger already marked by us is left to the cycle, so a repeated scan changes nothing.
        """
        following = [p.ledger_id for p in plans
                     if p.action is Action.MARK and self._stage(p.ledger_id) not in (None, Stage.DEFERRED)]
        report = self.filer.file_marks([p for p in plans if p.ledger_id not in following])
        filed = set(report.filed)
        now = self._now_ms()
        before = dict(self.tracked)
        for plan in plans:
            if plan.ledger_id in following:
                continue
            if plan.ledger_id in filed:
                self._track(plan, Stage.MARKED, now, now, report.created_zxids.get(plan.ledger_id))
            elif plan.action is Action.DEFER or plan.ledger_id in report.disabled:
                reason = plan.reason if plan.action is Action.DEFER else "auto-recovery disabled when found"
                self._track(replace(plan, reason=reason), Stage.DEFERRED, now, None)
        if self.tracked != before:
            self._save()
        return report, following

    def _stage(self, ledger_id: int) -> Stage | None:
        record = self.tracked.get(ledger_id)
        return None if record is None else record.stage

    def _track(self, plan: LedgerPlan, stage: Stage, now: int, marked_ms: int | None,
               mark_zxid: int | None = None) -> None:
        old = self.tracked.get(plan.ledger_id)
        if old is not None and old.stage is stage and old.entries == plan.entries:
            return
        if old is None:
            record = TrackedMark(plan.ledger_id, self.bookie_id, plan.entries, plan.categories[0], stage, now,
                                 marked_ms, plan.reason, mark_zxid=mark_zxid)
            record = record.with_event(now, "found", f"{', '.join(c.value for c in plan.categories)}: entries "
                                                     f"{_ranges_text(plan.entries)}")
        else:
            record = replace(old, entries=plan.entries, stage=stage, marked_ms=marked_ms, reason=plan.reason,
                             mark_zxid=mark_zxid if mark_zxid is not None else old.mark_zxid)
        self.tracked[plan.ledger_id] = record.with_event(now, stage.value, plan.reason if stage is Stage.DEFERRED
                                                         else "under-replication mark filed")

    # -- the cycle ----------------------------------------------------------------------------

    def run_cycle(self, store, reverify: Callable[[int], list[Finding]],
                  stopping: Callable[[], bool] = lambda: False, may_move: bool = True) -> CycleReport:
        """Check every tracked ledger that is due once; state is saved after each change.

        ``store.ledger(id)`` gives fresh metadata (None: deleted); ``reverify(id)`` re-checks the
        ledger's copies on this bookie, digests included (``LedgerScanner.scan_ledger(id, verify_digests=True)``).
        Without ``may_move`` (the failed-disk breaker is open) nothing is moved: the marks stay for the workers.
        """
        report = CycleReport()
        # The longest due first: a cycle cut short by ``stopping`` leaves the others for the next.
        for ledger_id in sorted(self.tracked, key=lambda i: (self.tracked[i].next_try_ms, i)):
            if stopping():
                break
            record = self.tracked[ledger_id]
            if self.rereplicator is not None:
                if not may_move:
                    report.pending.append(ledger_id)
                elif record.next_try_ms <= self._now_ms():
                    self._follow_move(record, store, reverify, report)
                continue
            if record.stage in (Stage.MARKED, Stage.REMARKED) and self._mark_present(ledger_id):
                report.pending.append(ledger_id)
                continue
            self._follow_marks(record, store, reverify, report)
        return report

    def _mark_present(self, ledger_id: int) -> bool:
        try:
            return self.marks.get(ledger_id) is not None
        except DamagedMark as exc:
            log.error("ledger %d: %s", ledger_id, exc)
            return True  # unreadable, but there: workers still see the ledger as marked

    def _current_damage(self, record: TrackedMark, store, reverify, report: CycleReport) -> LedgerPlan | None:
        """The plan for what is damaged now, or None when the follow-up ended (deleted, moved on, gone)."""
        ledger_id = record.ledger_id
        meta = store.ledger(ledger_id)
        if meta is None:
            self._end(ledger_id, "ledger deleted", report)
            return None
        recorded = Finding(record.category, ledger_id, record.entries, None, None, record.reason)
        moved = plan_ledger(ledger_id, [recorded], meta, self.bookie_id)
        if moved.action is Action.SKIP:
            self._end(ledger_id, moved.reason, report)
            return None
        damage = damage_by_ledger(reverify(ledger_id)).get(ledger_id, [])
        if not damage:
            self._end(ledger_id, "no damage left on this bookie: repaired", report)
            return None
        plan = plan_ledger(ledger_id, damage, meta, self.bookie_id)
        if plan.action is Action.SKIP:
            self._end(ledger_id, plan.reason, report)
            return None
        return plan

    # -- re-replication -------------------------------------------------------------------------

    def _follow_move(self, record: TrackedMark, store, reverify, report: CycleReport) -> None:
        ledger_id = record.ledger_id
        if record.stage is not Stage.DEFERRED and not self._mark_present(ledger_id) \
                and (not record.events or record.events[-1].what != "mark_cleared"):
            record = self._update(record, self._now_ms(), "mark_cleared",
                                  "the mark was cleared by another repairer (a ReplicationWorker's check)",
                                  marks_cleared=record.marks_cleared + 1)
        plan = self._current_damage(record, store, reverify, report)
        if plan is None:  # ended: this bookie's copies need nothing more: take back what its mark asked
            if not self.rereplicator.release_mark(ledger_id, record.mark_zxid):
                log.info("ledger %d: its mark is left as it is: another repairer holds the ledger's lock", ledger_id)
            return
        if plan.action is Action.DEFER:
            report.waiting.append(ledger_id)
            self._update(record, self._now_ms(), "deferred", plan.reason, entries=plan.entries,
                         stage=Stage.DEFERRED, reason=plan.reason, once=True)
            return
        attempt = self.rereplicator.rereplicate(ledger_id, plan.entries, mark_zxid=record.mark_zxid)
        self._settle(self.tracked[ledger_id], plan, attempt, report)

    def _settle(self, record: TrackedMark, plan: LedgerPlan, attempt: Attempt, report: CycleReport) -> None:
        ledger_id, now = record.ledger_id, self._now_ms()
        if attempt.outcome not in (Outcome.BUSY, Outcome.DEFERRED):
            self.journal.append({**attempt.to_json(), "damaged_entries": [list(r) for r in plan.entries]})
        if attempt.remarked:
            record = self._update(record, now, "marked", "marked again under the ledger's lock", marked_ms=now,
                                  mark_zxid=attempt.mark_zxid)
        if attempt.outcome.final:
            if attempt.outcome is Outcome.MOVED:
                MOVES.inc(len(attempt.moves))
                report.moved.append(ledger_id)
                record = self._update(record, now, "moved", attempt.detail)
            self._end(ledger_id, attempt.detail, report)
            return
        if attempt.outcome is Outcome.BUSY:
            report.pending.append(ledger_id)
            busy_ms = int(min(BUSY_SECONDS, self.first_retry_seconds) * 1000)
            self._update(record, now, "busy", attempt.detail, once=True, next_try_ms=now + busy_ms)
            return
        if attempt.outcome is Outcome.DEFERRED:
            report.waiting.append(ledger_id)
            self._update(record, now, "deferred", attempt.detail, stage=Stage.DEFERRED, reason=attempt.detail,
                         once=True)
            return
        failures = record.failures + 1
        retry = retry_seconds(failures, self.first_retry_seconds)
        escalating = escalate_now(attempt.outcome, failures)
        log.log(logging.ERROR if escalating else logging.WARNING,
                "ledger %d: damaged copy on %s not moved (%s): %s; trying again in %gs", ledger_id, self.bookie_id,
                attempt.outcome.value, attempt.detail, retry)
        record = self._update(record, now, "failed", f"{attempt.outcome.value}: {attempt.detail}", failures=failures,
                              next_try_ms=now + int(retry * 1000), entries=plan.entries)
        if escalating:
            report.findings.append(self._unrepaired(record, plan, f"it could not be moved to another bookie "
                                                                  f"({attempt.outcome.value}: {attempt.detail})"))
            if record.stage is not Stage.ESCALATED:
                report.escalated.append(ledger_id)
                self._escalate(record, plan, attempt.detail)

    # -- marks only -----------------------------------------------------------------------------

    def _follow_marks(self, record: TrackedMark, store, reverify, report: CycleReport) -> None:
        ledger_id = record.ledger_id
        plan = self._current_damage(record, store, reverify, report)
        if plan is None:
            return None
        if plan.action is Action.DEFER:
            report.waiting.append(ledger_id)
            return self._update(record, self._now_ms(), "deferred", plan.reason, entries=plan.entries,
                                stage=Stage.DEFERRED, reason=plan.reason, once=True)
        if record.stage is Stage.DEFERRED:
            if self._mark(record, plan):
                report.filed.append(ledger_id)
                now = self._now_ms()
                self._update(self.tracked[ledger_id], now, "marked", "under-replication mark filed", entries=plan.entries,
                             stage=Stage.MARKED, marked_ms=now, reason=plan.reason)
            else:
                report.waiting.append(ledger_id)
            return None
        report.findings.append(self._unrepaired(record, plan, "a ReplicationWorker reads without verifying "
                                                              "digests, so a readable corrupt copy passes its check"))
        if record.stage is not Stage.ESCALATED:
            UNREPAIRED.inc()
        if record.stage is Stage.MARKED:
            record = self._update(record, self._now_ms(), "mark_cleared", "the mark was cleared with the damage "
                                                                          "still there",
                                  marks_cleared=record.marks_cleared + 1)
            if self._mark(record, plan):
                report.remarked.append(ledger_id)
                now = self._now_ms()
                self._update(self.tracked[ledger_id], now, "marked", "marked again", entries=plan.entries, stage=Stage.REMARKED,
                             marked_ms=now, reason="first mark cleared with the damage still there")
        elif record.stage is Stage.REMARKED:
            report.escalated.append(ledger_id)
            self._escalate(record, plan, "two marks cleared, damage remains")
        return None

    def _mark(self, record: TrackedMark, plan: LedgerPlan) -> bool:
        filing = self.filer.file_marks([plan])
        if filing.disabled:
            return False
        if filing.failed:
            log.error("ledger %d: could not mark: %s", record.ledger_id, filing.failed[record.ledger_id])
            return False
        # Ours only when this filing created it: a mark it merged into is someone else's request.
        self.tracked[record.ledger_id] = replace(self.tracked[record.ledger_id],
                                                 mark_zxid=filing.created_zxids.get(record.ledger_id))
        return True

    # -- shared ---------------------------------------------------------------------------------

    def _unrepaired(self, record: TrackedMark, plan: LedgerPlan, why: str) -> Finding:
        ranges = plan.entries
        detail = (f"{count_in_ranges(ranges)} entries of ledger {record.ledger_id} this bookie must hold are still "
                  f"damaged ({', '.join(c.value for c in plan.categories)}) after the under-replication mark: {why}")
        return Finding(Category.UNREPAIRED, record.ledger_id, ranges, None, None, detail)

    def _escalate(self, record: TrackedMark, plan: LedgerPlan, why: str) -> None:
        ESCALATIONS.inc()
        log.error("ledger %d: damaged copy on %s cannot be repaired by the scanner (entries %s): %s; "
                  "see the Repair section of the README", record.ledger_id, self.bookie_id,
                  _ranges_text(plan.entries), why)
        # Saved before running: a crash must not run the operator's command a second time.
        record = self._update(record, self._now_ms(), "escalated", why, entries=plan.entries, stage=Stage.ESCALATED)
        if self.repair_command is None:
            return
        argv = expand_command(self.repair_command, record.ledger_id, self.bookie_id)
        outcome = run_command(argv, self.command_timeout)
        level = logging.INFO if outcome.exit_status == 0 else logging.ERROR
        log.log(level, "ledger %d: repair command %s: exit status %s%s", record.ledger_id, argv,
                outcome.exit_status, f" ({outcome.error})" if outcome.error else "")
        self._update(self.tracked[record.ledger_id], self._now_ms(), "command",
                     f"exit status {outcome.exit_status}", escalation=outcome)

    def _update(self, record: TrackedMark, now: int, what: str, detail: str, *, once: bool = False,
                **changes) -> TrackedMark:
        """``record`` with ``changes`` and the event appended (``once``: not when it is the last event already)."""
        updated = replace(record, **changes)
        last = record.events[-1] if record.events else None
        if not (once and last is not None and (last.what, last.detail) == (what, detail)):
            updated = updated.with_event(now, what, detail)
        if updated != record:
            self.tracked[record.ledger_id] = updated
            self._save()
        return updated

    def _end(self, ledger_id: int, why: str, report: CycleReport) -> None:
        report.ended[ledger_id] = why
        log.info("ledger %d: follow-up ended: %s", ledger_id, why)
        now = self._now_ms()
        record = self.tracked.pop(ledger_id).with_event(now, "ended", why)
        self.ended = ([{"ledger_id": ledger_id, "why": why, "ended_ms": now, "record": record.to_json()}]
                      + self.ended)[:ENDED_KEPT]
        self._save()

    # -- the repair report ----------------------------------------------------------------------

    def report(self, limit: int = REPORT_ROWS) -> dict:
        """Where each damaged ledger is in the loop and since when, and the ones that ended lately
        (:func:`scanner.repair.followup_report.repair_report`)."""
        return repair_report(list(self.tracked.values()), list(self.ended), limit)  # copies: a cycle may run meanwhile


def _ranges_text(ranges: EntryRanges) -> str:
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
