"""The repair report (``status``, ``/health``): where each damaged ledger is in the follow-up and since when, and
the ones that ended lately."""

from __future__ import annotations

from scanner.repair.followup_state import TrackedMark

REPORT_ROWS = 100  # rows of each kind the report shows


def repair_report(tracked: list[TrackedMark], ended: list[dict], limit: int = REPORT_ROWS) -> dict:
    """At most ``limit`` rows of each (the ones that changed last); the totals say how many there are."""
    newest = sorted(tracked, key=_stage_since, reverse=True)[:limit]
    return {"following_total": len(tracked), "ended_total": len(ended),
            "following": [_report_row(r) for r in sorted(newest, key=lambda r: r.ledger_id)],
            "ended": [dict(_report_row(TrackedMark.from_json(e["record"])), why=e["why"],
                           ended_ms=e["ended_ms"]) for e in ended[:limit]]}


def _report_row(record: TrackedMark) -> dict:
    return {"ledger_id": record.ledger_id, "stage": record.stage.value, "category": record.category.value,
            "entries": [list(r) for r in record.entries], "since_ms": record.since_ms,
            "stage_since_ms": _stage_since(record), "failures": record.failures,
            "marks_cleared": record.marks_cleared,
            "next_try_ms": record.next_try_ms or None, "events": [e.to_json() for e in record.events]}


def _stage_since(record: TrackedMark) -> int:
    """When the ledger reached its current step: its newest event's time."""
    return record.events[-1].at_ms if record.events else record.since_ms
