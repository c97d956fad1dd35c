"""``audit --mark``: under-replicated ledgers found by the audit, marked as BookKeeper's Auditor marks them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from scanner.audit.contract import Category, Violation
from scanner.checks.findings import Category as FindingCategory
from scanner.repair.filer import DEFAULT_BATCH, MarkFiler
from scanner.repair.marks import UnderreplicationMarks
from scanner.repair.planner import Action, LedgerPlan
from throttle import TokenBucket


def mark_under_replicated(marks: UnderreplicationMarks, violations: Iterable[Violation],
                          marks_per_second: float | None) -> dict:
    """Mark every ledger with under-replicated entries as missing the bookies that lack good copies.

    One paced filing per lacking bookie (a mark's replica list names the bookies whose copies are bad);
    returns, per bookie, the filing report as ``scan --mark`` shows it.
    """
    plans: dict[str, dict[int, LedgerPlan]] = defaultdict(dict)
    for violation in violations:
        if violation.category is not Category.UNDER_REPLICATED_ENTRY:
            continue
        for bookie in violation.bookies:
            known = plans[bookie].get(violation.ledger_id)
            entries = (known.entries if known else ()) + tuple(
                (group.first_sequence_start, group.last_entry_id) for group in violation.entries)  # their span
            plans[bookie][violation.ledger_id] = LedgerPlan(
                violation.ledger_id, Action.MARK, entries, (FindingCategory.MISSING_ENTRY,),
                "the cluster audit found entries without a good copy on this bookie")
    bucket = TokenBucket(marks_per_second, burst=DEFAULT_BATCH)  # shared: the pace is the cluster's, not per bookie
    return {bookie: MarkFiler(marks, bookie, bucket=bucket).file_marks(
                [by_ledger[ledger_id] for ledger_id in sorted(by_ledger)]).to_json()
            for bookie, by_ledger in sorted(plans.items())}
