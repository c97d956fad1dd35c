"""Following a mark until the damage is really gone.

A ReplicationWorker checks a marked ledger by reading a few entries per fragment and accepts any
successful read, without digests: a corrupt but readable copy passes, the worker removes the mark
and nothing is fixed. So every mark we file is remembered in the scanner's state dir and each cycle
asks: is it still there (pending)? If it is gone, is the damage still on this bookie, in entries the
fresh metadata still assigns here? Then the copy is ``unrepaired``: we mark once more, and if that
mark also vanishes with the damage in place we escalate (counter, ERROR log, and an optional
operator command run once). Deferred marks of open ledgers are filed once the ledger is closed; a
deleted ledger, or a fragment that moved to other bookies, ends the follow-up.
"""

from __future__ import annotations

import enum
import logging
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from prometheus_client import Counter

from scanner.checks.findings import Category, EntryRanges, Finding, count_in_ranges
from scanner.repair.filer import FilingReport, MarkFiler
from scanner.repair.marks import DamagedMark, UnderreplicationMarks
from scanner.repair.planner import Action, LedgerPlan, damage_by_ledger, plan_ledger
from scanner.statefile import DamagedStateFile, read_json, write_json

log = logging.getLogger(__name__)

STATE_FILE = "repair-followup.json"
STATE_VERSION = 1
DEFAULT_COMMAND_TIMEOUT = 600.0
OUTPUT_TAIL = 2000

UNREPAIRED = Counter("bookie_scanner_unrepaired_ledgers",
                     "Times a cleared under-replication mark left this bookie's damaged copy in place")
ESCALATIONS = Counter("bookie_scanner_repair_escalations",
                      "Ledgers whose damage survived two cleared marks and were escalated to the operator")


class Stage(str, enum.Enum):
    DEFERRED = "deferred"  # not marked yet: the ledger is open, or auto-recovery was disabled
    MARKED = "marked"
    REMARKED = "remarked"  # the first mark was cleared with the damage still there
    ESCALATED = "escalated"  # the second mark too: the operator has been told


@dataclass(frozen=True, slots=True)
class Escalation:
    argv: tuple[str, ...]
    exit_status: int | None  # None: it did not finish (timeout, or it could not be started)
    output_tail: str
    error: str | None

    def to_json(self) -> dict:
        return {"argv": list(self.argv), "exit_status": self.exit_status, "output_tail": self.output_tail,
                "error": self.error}

    @classmethod
    def from_json(cls, obj: dict) -> "Escalation":
        return cls(tuple(obj["argv"]), obj.get("exit_status"), obj.get("output_tail", ""), obj.get("error"))


@dataclass(frozen=True, slots=True)
class TrackedMark:
    """One damaged ledger of this bookie under follow-up."""

    ledger_id: int
    bookie_id: str
    entries: EntryRanges
    category: Category  # the most severe damage seen
    stage: Stage
    since_ms: int  # first recorded
    marked_ms: int | None  # when the current mark was filed
    reason: str
    escalation: Escalation | None = None

    def to_json(self) -> dict:
        return {"ledger_id": self.ledger_id, "bookie_id": self.bookie_id,
                "entries": [list(r) for r in self.entries], "category": self.category.value,
                "stage": self.stage.value, "since_ms": self.since_ms, "marked_ms": self.marked_ms,
                "reason": self.reason,
                "escalation": None if self.escalation is None else self.escalation.to_json()}

    @classmethod
    def from_json(cls, obj: dict) -> "TrackedMark":
        escalation = obj.get("escalation")
        return cls(int(obj["ledger_id"]), obj["bookie_id"], tuple((int(a), int(b)) for a, b in obj["entries"]),
                   Category(obj["category"]), Stage(obj["stage"]), int(obj["since_ms"]), obj.get("marked_ms"),
                   obj.get("reason", ""), None if escalation is None else Escalation.from_json(escalation))


@dataclass
class CycleReport:
    pending: list[int] = field(default_factory=list)  # the mark is still there: a worker has not got to it
    waiting: list[int] = field(default_factory=list)  # still deferred (open ledger, auto-recovery disabled)
    filed: list[int] = field(default_factory=list)  # a deferred mark filed now
    remarked: list[int] = field(default_factory=list)
    escalated: list[int] = field(default_factory=list)
    ended: dict[int, str] = field(default_factory=dict)  # ledger id -> why the follow-up ended
    findings: list[Finding] = field(default_factory=list)  # UNREPAIRED ones

    def to_json(self) -> dict:
        return {"pending": self.pending, "waiting": self.waiting, "filed": self.filed, "remarked": self.remarked,
                "escalated": self.escalated, "ended": {str(k): v for k, v in sorted(self.ended.items())},
                "findings": [f.to_json() for f in self.findings]}


def expand_command(template: Sequence[str], ledger_id: int, bookie_id: str) -> list[str]:
    """The argv with ``{ledger}`` and ``{bookie}`` replaced in every word (no shell involved)."""
    return [word.replace("{ledger}", str(ledger_id)).replace("{bookie}", bookie_id) for word in template]


def run_command(argv: Sequence[str], timeout: float) -> Escalation:
    """Run ``argv`` once with a timeout; its status and the tail of its output, never an exception."""
    try:
        done = subprocess.run(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        output = exc.output or b""
        return Escalation(tuple(argv), None, output.decode(errors="replace")[-OUTPUT_TAIL:],
                          f"still running after {timeout:g}s: killed")
    except OSError as exc:
        return Escalation(tuple(argv), None, "", f"could not start: {exc}")
    return Escalation(tuple(argv), done.returncode, done.stdout.decode(errors="replace")[-OUTPUT_TAIL:], None)


class FollowUp:
    """The marks this bookie filed, and the cycle that follows them (state in ``state_dir``).

    ``repair_command`` is an argv template with ``{ledger}`` and ``{bookie}``, run at escalation.
    """

    def __init__(self, state_dir: Path, filer: MarkFiler, *,
                 repair_command: Sequence[str] | None = None, command_timeout: float = DEFAULT_COMMAND_TIMEOUT,
                 clock: Callable[[], float] = time.time):
        self.path = Path(state_dir) / STATE_FILE
        self.filer = filer
        self.marks: UnderreplicationMarks = filer.marks
        self.bookie_id = filer.bookie_id
        self.repair_command = tuple(repair_command) if repair_command else None
        self.command_timeout = command_timeout
        self.clock = clock
        self.tracked: dict[int, TrackedMark] = self._load()

    def _load(self) -> dict[int, TrackedMark]:
        state = read_json(self.path)
        if state is None:
            return {}
        try:
            if state.get("version") != STATE_VERSION:
                raise DamagedStateFile(f"{self.path}: state version {state.get('version')!r}, expected {STATE_VERSION}")
            records = [TrackedMark.from_json(obj) for obj in state["marks"]]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DamagedStateFile(f"{self.path}: not a follow-up state file ({exc!r})") from None
        return {r.ledger_id: r for r in records if r.bookie_id == self.bookie_id}

    def _save(self) -> None:
        write_json(self.path, {"version": STATE_VERSION,
                               "marks": [self.tracked[k].to_json() for k in sorted(self.tracked)]})

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
                self._track(plan, Stage.MARKED, now, now)
            elif plan.action is Action.DEFER or plan.ledger_id in report.disabled:
                reason = plan.reason if plan.action is Action.DEFER else "auto-recovery disabled when found"
                self._track(replace(plan, reason=reason), Stage.DEFERRED, now, None)
        if self.tracked != before:
            self._save()
        return report, following

    def _stage(self, ledger_id: int) -> Stage | None:
        record = self.tracked.get(ledger_id)
        return None if record is None else record.stage

    def _track(self, plan: LedgerPlan, stage: Stage, now: int, marked_ms: int | None) -> None:
        old = self.tracked.get(plan.ledger_id)
        if old is not None and old.stage is stage and old.entries == plan.entries:
            return
        self.tracked[plan.ledger_id] = TrackedMark(
            plan.ledger_id, self.bookie_id, plan.entries, plan.categories[0], stage,
            old.since_ms if old is not None else now, marked_ms, plan.reason)

    # -- the cycle ----------------------------------------------------------------------------

    def run_cycle(self, store, reverify: Callable[[int], list[Finding]]) -> CycleReport:
        """Check every tracked ledger once; state is saved after each change.

        ``store.ledger(id)`` gives fresh metadata (None: deleted); ``reverify(id)`` re-checks the
        ledger's copies on this bookie, digests included (``BookieScanner.scan_ledger(id, verify_digests=True)``).
        """
        report = CycleReport()
        for ledger_id in sorted(self.tracked):
            record = self.tracked[ledger_id]
            if record.stage in (Stage.MARKED, Stage.REMARKED) and self._mark_present(ledger_id):
                report.pending.append(ledger_id)
                continue
            self._follow(record, store, reverify, report)
        return report

    def _mark_present(self, ledger_id: int) -> bool:
        try:
            return self.marks.get(ledger_id) is not None
        except DamagedMark as exc:
            log.error("ledger %d: %s", ledger_id, exc)
            return True  # unreadable, but there: workers still see the ledger as marked

    def _follow(self, record: TrackedMark, store, reverify: Callable[[int], list[Finding]],
                report: CycleReport) -> None:
        ledger_id = record.ledger_id
        meta = store.ledger(ledger_id)
        if meta is None:
            return self._end(ledger_id, "ledger deleted", report)
        recorded = Finding(record.category, ledger_id, record.entries, None, None, record.reason)
        moved = plan_ledger(ledger_id, [recorded], meta, self.bookie_id)
        if moved.action is Action.SKIP:
            return self._end(ledger_id, moved.reason, report)
        damage = damage_by_ledger(reverify(ledger_id)).get(ledger_id, [])
        if not damage:
            return self._end(ledger_id, "no damage left on this bookie: repaired", report)
        plan = plan_ledger(ledger_id, damage, meta, self.bookie_id)
        if plan.action is Action.SKIP:
            return self._end(ledger_id, plan.reason, report)
        if plan.action is Action.DEFER:
            report.waiting.append(ledger_id)
            return self._update(record, entries=plan.entries, stage=Stage.DEFERRED, reason=plan.reason)
        if record.stage is Stage.DEFERRED:
            if self._mark(record, plan):
                report.filed.append(ledger_id)
                self._update(record, entries=plan.entries, stage=Stage.MARKED, marked_ms=self._now_ms(),
                             reason=plan.reason)
            else:
                report.waiting.append(ledger_id)
            return None
        report.findings.append(self._unrepaired(record, plan))
        if record.stage is not Stage.ESCALATED:
            UNREPAIRED.inc()
        if record.stage is Stage.MARKED:
            if self._mark(record, plan):
                report.remarked.append(ledger_id)
                self._update(record, entries=plan.entries, stage=Stage.REMARKED, marked_ms=self._now_ms(),
                             reason="first mark cleared with the damage still there")
        elif record.stage is Stage.REMARKED:
            report.escalated.append(ledger_id)
            self._escalate(record, plan)
        return None

    def _mark(self, record: TrackedMark, plan: LedgerPlan) -> bool:
        filing = self.filer.file_marks([plan])
        if filing.disabled:
            return False
        if filing.failed:
            log.error("ledger %d: could not mark: %s", record.ledger_id, filing.failed[record.ledger_id])
            return False
        return True

    def _unrepaired(self, record: TrackedMark, plan: LedgerPlan) -> Finding:
        ranges = plan.entries
        detail = (f"the under-replication mark of ledger {record.ledger_id} was cleared, yet "
                  f"{count_in_ranges(ranges)} entries this bookie must hold are still damaged "
                  f"({', '.join(c.value for c in plan.categories)}); a ReplicationWorker reads without "
                  "verifying digests, so a readable corrupt copy passes its check")
        return Finding(Category.UNREPAIRED, record.ledger_id, ranges, None, None, detail)

    def _escalate(self, record: TrackedMark, plan: LedgerPlan) -> None:
        ESCALATIONS.inc()
        log.error("ledger %d: damaged copy on %s survived two cleared under-replication marks (entries %s); "
                  "re-replicate it by other means (see the Repair section of the README)",
                  record.ledger_id, self.bookie_id, _ranges_text(plan.entries))
        # Saved before running: a crash must not run the operator's command a second time.
        self._update(record, entries=plan.entries, stage=Stage.ESCALATED, reason="two marks cleared, damage remains")
        if self.repair_command is None:
            return
        argv = expand_command(self.repair_command, record.ledger_id, self.bookie_id)
        outcome = run_command(argv, self.command_timeout)
        level = logging.INFO if outcome.exit_status == 0 else logging.ERROR
        log.log(level, "ledger %d: repair command %s: exit status %s%s", record.ledger_id, argv,
                outcome.exit_status, f" ({outcome.error})" if outcome.error else "")
        self._update(self.tracked[record.ledger_id], escalation=outcome)

    def _update(self, record: TrackedMark, **changes) -> None:
        updated = replace(record, **changes)
        if updated != record:
            self.tracked[record.ledger_id] = updated
            self._save()

    def _end(self, ledger_id: int, why: str, report: CycleReport) -> None:
        report.ended[ledger_id] = why
        log.info("ledger %d: follow-up ended: %s", ledger_id, why)
        del self.tracked[ledger_id]
        self._save()


def _ranges_text(ranges: EntryRanges) -> str:
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
