"""The follow-up's state: each damaged ledger under follow-up (:class:`TrackedMark`, with a short history of what
happened to it) and the ones that ended lately, kept in the scanner's state dir (``STATE_FILE``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from pathlib import Path

from scanner.checks.findings import Category, EntryRanges
from scanner.repair.escalation_command import Escalation
from scanner.statefile import DamagedStateFile, read_json, write_json

STATE_FILE = "repair-followup.json"
STATE_VERSION = 2
EVENTS_KEPT = 20  # the newest events of each ledger's history
ENDED_KEPT = 200  # ended follow-ups kept for the repair report, newest first


class Stage(str, enum.Enum):
    DEFERRED = "deferred"  # not marked yet: the ledger is open, or auto-recovery was disabled
    MARKED = "marked"
    REMARKED = "remarked"  # the first mark was cleared with the damage still there (marks only)
    ESCALATED = "escalated"  # the operator has been told; a move is still tried again


@dataclass(frozen=True, slots=True)
class Event:
    """One step in a ledger's repair: ``what`` happened at ``at_ms``."""

    at_ms: int
    what: str  # found, marked, deferred, mark_cleared, reverified, busy, moved, failed, escalated, ended
    detail: str = ""

    def to_json(self) -> dict:
        return {"at_ms": self.at_ms, "what": self.what, "detail": self.detail}

    @classmethod
    def from_json(cls, obj: dict) -> "Event":
        return cls(int(obj["at_ms"]), str(obj["what"]), str(obj.get("detail", "")))


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
    failures: int = 0  # moves failed in a row
    next_try_ms: int = 0  # no move before this
    events: tuple[Event, ...] = ()
    marks_cleared: int = 0  # times another repairer (a ReplicationWorker) cleared our mark with the damage in place
    mark_zxid: int | None = None  # the creation zxid of the mark when this bookie created it (ours to delete)

    def to_json(self) -> dict:
        return {"ledger_id": self.ledger_id, "bookie_id": self.bookie_id,
                "entries": [list(r) for r in self.entries], "category": self.category.value,
                "stage": self.stage.value, "since_ms": self.since_ms, "marked_ms": self.marked_ms,
                "reason": self.reason,
                "escalation": None if self.escalation is None else self.escalation.to_json(),
                "failures": self.failures, "next_try_ms": self.next_try_ms,
                "events": [e.to_json() for e in self.events], "marks_cleared": self.marks_cleared,
                "mark_zxid": self.mark_zxid}

    @classmethod
    def from_json(cls, obj: dict) -> "TrackedMark":
        escalation = obj.get("escalation")
        return cls(int(obj["ledger_id"]), obj["bookie_id"], tuple((int(a), int(b)) for a, b in obj["entries"]),
                   Category(obj["category"]), Stage(obj["stage"]), int(obj["since_ms"]), obj.get("marked_ms"),
                   obj.get("reason", ""), None if escalation is None else Escalation.from_json(escalation),
                   int(obj.get("failures", 0)), int(obj.get("next_try_ms", 0)),
                   tuple(Event.from_json(e) for e in obj.get("events", ())), int(obj.get("marks_cleared", 0)),
                   obj.get("mark_zxid"))

    def with_event(self, at_ms: int, what: str, detail: str = "") -> "TrackedMark":
        return replace(self, events=(self.events + (Event(at_ms, what, detail),))[-EVENTS_KEPT:])


def load_state(path: Path, bookie_id: str) -> tuple[dict[int, TrackedMark], list[dict]]:
    """The tracked ledgers of ``bookie_id`` by id, and the ended follow-ups (newest first: {"ledger_id", "why",
    "ended_ms", "record"}), from the state file at ``path`` (none: nothing)."""
    state = read_json(path)
    if state is None:
        return {}, []
    try:
        if state.get("version") not in (1, STATE_VERSION):
            raise DamagedStateFile(f"{path}: state version {state.get('version')!r}, expected {STATE_VERSION}")
        records = [TrackedMark.from_json(obj) for obj in state["marks"]]
        ended = [dict(e, record=TrackedMark.from_json(e["record"]).to_json()) for e in state.get("ended", [])]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DamagedStateFile(f"{path}: not a follow-up state file ({exc!r})") from None
    return {r.ledger_id: r for r in records if r.bookie_id == bookie_id}, ended[:ENDED_KEPT]


def save_state(path: Path, tracked: dict[int, TrackedMark], ended: list[dict]) -> None:
    write_json(path, {"version": STATE_VERSION, "marks": [tracked[k].to_json() for k in sorted(tracked)],
                      "ended": ended})
