"""What to do about damaged ledgers: mark for re-replication, defer, or skip, and why.

Pure: findings and the ledger's fresh metadata in, decisions out. Only findings whose category needs
re-replication count. A deleted ledger needs nothing; a copy whose fragment no longer lists this
bookie is not one the cluster relies on. An OPEN or IN_RECOVERY ledger with damage in its last
fragment is reported now but marked only once closed: re-replicating a fragment the writer may still
append to would move it away from the writer's ensemble and can lose entries the writer adds later.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping

from scanner.checks.findings import Category, EntryRanges, Finding, merge_ranges
from scanner.metadata.ledger import Fragment, LedgerMetadata


class Action(str, enum.Enum):
    MARK = "mark"
    DEFER = "defer"  # mark once the ledger is closed
    SKIP = "skip"


@dataclass(frozen=True, slots=True)
class LedgerPlan:
    ledger_id: int
    action: Action
    entries: EntryRanges  # damaged entries this bookie must still hold (all damaged ones when skipped)
    categories: tuple[Category, ...]  # most severe first
    reason: str

    def to_json(self) -> dict:
        return {"ledger_id": self.ledger_id, "action": self.action.value,
                "entries": [list(r) for r in self.entries], "categories": [c.value for c in self.categories],
                "reason": self.reason}


def damage_by_ledger(findings: Iterable[Finding]) -> dict[int, list[Finding]]:
    """The findings that need re-replication, grouped by ledger id."""
    grouped: dict[int, list[Finding]] = defaultdict(list)
    for finding in findings:
        if finding.category.needs_rereplication and finding.ledger_id is not None and finding.entries:
            grouped[finding.ledger_id].append(finding)
    return dict(grouped)


def plan_repairs(findings: Iterable[Finding], metadata: Mapping[int, LedgerMetadata | None],
                 bookie_id: str) -> list[LedgerPlan]:
    """One plan per damaged ledger, ascending by id; ``metadata`` is fresh (None = deleted)."""
    return [plan_ledger(ledger_id, damage, metadata.get(ledger_id), bookie_id)
            for ledger_id, damage in sorted(damage_by_ledger(findings).items())]


def plan_ledger(ledger_id: int, damage: list[Finding], meta: LedgerMetadata | None, bookie_id: str) -> LedgerPlan:
    """The decision for one ledger's re-replication findings against its fresh metadata."""
    order = list(Category)
    categories = tuple(sorted({f.category for f in damage}, key=order.index))
    damaged = merge_ranges([r for f in damage for r in f.entries])
    if meta is None:
        return LedgerPlan(ledger_id, Action.SKIP, damaged, categories, "ledger deleted: nothing to re-replicate")
    held: list[tuple[int, int]] = []
    in_open_fragment = False
    for fragment in meta.fragments():
        index = fragment.bookie_index(bookie_id)
        if index is None:
            continue
        for first, last in damaged:
            span = _clip(fragment, first, last)
            if span is not None and _holds_any(fragment, index, *span):
                held.append(span)
                in_open_fragment |= fragment.last_entry_id is None
    if not held:
        return LedgerPlan(ledger_id, Action.SKIP, damaged, categories,
                          f"{bookie_id} no longer holds these entries: the ensemble moved on")
    entries = merge_ranges(held)
    if in_open_fragment:
        return LedgerPlan(ledger_id, Action.DEFER, entries, categories,
                          f"ledger is {meta.state.name} and the damage is in its last fragment: "
                          "marked once the ledger is closed")
    return LedgerPlan(ledger_id, Action.MARK, entries, categories, "damaged copies this bookie must hold")


def damaged_fragments(meta: LedgerMetadata, bookie_id: str, damaged: EntryRanges) -> list[Fragment]:
    """The fragments of ``meta`` in which ``bookie_id`` must hold at least one of the ``damaged`` entries."""
    found = []
    for fragment in meta.fragments():
        index = fragment.bookie_index(bookie_id)
        if index is None:
            continue
        spans = (_clip(fragment, first, last) for first, last in damaged)
        if any(span is not None and _holds_any(fragment, index, *span) for span in spans):
            found.append(fragment)
    return found


def _clip(fragment: Fragment, first: int, last: int) -> tuple[int, int] | None:
    lo = max(first, fragment.first_entry_id)
    hi = last if fragment.last_entry_id is None else min(last, fragment.last_entry_id)
    return (lo, hi) if lo <= hi else None


def _holds_any(fragment: Fragment, index: int, first: int, last: int) -> bool:
    # Placement repeats every ensemble-size entries, so one period decides.
    return any(fragment.holds(index, e) for e in range(first, min(last, first + fragment.ensemble_size - 1) + 1))
