"""The repair planner's decisions on hand-built metadata (pure: no ZooKeeper)."""

from __future__ import annotations

from scanner.checks.findings import Category, Finding
from scanner.metadata.ledger import LedgerMetadata, LedgerState
from scanner.repair.planner import Action, plan_repairs

A, B, C, D = "a:1", "b:1", "c:1", "d:1"


def ledger(state=LedgerState.CLOSED, segments=((0, (A, B, C)),), last=99) -> LedgerMetadata:
    closed = state is LedgerState.CLOSED
    return LedgerMetadata(1, 3, 3, 2, 2, state, last if closed else -1, 100 if closed else 0, segments,
                          None, None, None, (), None)


def finding(category, entries, ledger_id=1):
    return Finding(category, ledger_id, entries, None, None, "")


def test_damaged_copies_of_a_closed_ledger_are_marked_with_the_entries_and_worst_category():
    plans = plan_repairs([finding(Category.MISSING_ENTRY, ((3, 4),)), finding(Category.LOST_ENTRY, ((0, 1),)),
                          finding(Category.ORPHAN_LEDGER, None), Finding(Category.DAMAGED_ENTRY_LOG, None, None, 2, 0, "")],
                         {1: ledger()}, A)
    (plan,) = plans
    assert plan.action is Action.MARK and plan.entries == ((0, 1), (3, 4))
    assert plan.categories == (Category.LOST_ENTRY, Category.MISSING_ENTRY)


def test_deleted_ledger_is_skipped():
    (plan,) = plan_repairs([finding(Category.CORRUPT_ENTRY, ((5, 5),))], {1: None}, A)
    assert plan.action is Action.SKIP and "deleted" in plan.reason


def test_bookie_replaced_in_the_damaged_fragment_is_skipped_but_kept_where_it_still_belongs():
    segments = ((0, (A, B, C)), (50, (D, B, C)))
    (moved,) = plan_repairs([finding(Category.CORRUPT_ENTRY, ((60, 60),))], {1: ledger(segments=segments)}, A)
    assert moved.action is Action.SKIP and "no longer holds" in moved.reason
    (kept,) = plan_repairs([finding(Category.LOST_ENTRY, ((45, 60),))], {1: ledger(segments=segments)}, A)
    assert kept.action is Action.MARK and kept.entries == ((45, 49),)


def test_open_ledger_damage_in_its_last_fragment_is_deferred_earlier_fragments_are_marked():
    segments = ((0, (A, B, C)), (50, (A, B, D)))
    for state in (LedgerState.OPEN, LedgerState.IN_RECOVERY):
        (deferred,) = plan_repairs([finding(Category.CORRUPT_ENTRY, ((51, 51),))],
                                   {1: ledger(state=state, segments=segments)}, A)
        assert deferred.action is Action.DEFER and state.name in deferred.reason
    (earlier,) = plan_repairs([finding(Category.CORRUPT_ENTRY, ((3, 3),))],
                              {1: ledger(state=LedgerState.OPEN, segments=segments)}, A)
    assert earlier.action is Action.MARK


def test_entries_outside_this_bookies_write_set_do_not_count():
    # E=3, Wq=2: bookie index 0 holds entries 0, 2, 3, 5, ... but never 1, 4, 7.
    (plan,) = plan_repairs([finding(Category.MISSING_ENTRY, ((4, 4),))], {1: ledger()}, A)
    assert plan.action is Action.SKIP
