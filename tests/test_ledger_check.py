"""BP-24's conditions for one ledger, judged on hand-made evidence (no I/O)."""

from scanner.checks.findings import Category, to_ranges
from scanner.checks.ledger_check import (LedgerEvidence, RecordFault, judge_ledger, judge_record_faults,
                                         orphan_finding)
from scanner.metadata.ledger import LedgerMetadata, LedgerState
from scanner.storage.entry import DigestType

ME = "10.0.0.1:3181"
B2, B3, B4 = "10.0.0.2:3181", "10.0.0.3:3181", "10.0.0.4:3181"


def meta(state=LedgerState.CLOSED, last=29, segments=((0, (ME, B2, B3)),), e=3, wq=2):
    closed = state is LedgerState.CLOSED
    return LedgerMetadata(
        ledger_id=7, format_version=3, ensemble_size=e, write_quorum=wq, ack_quorum=2, state=state,
        last_entry_id=last if closed else -1, length=1000 if closed else 0, segments=segments,
        digest_type=DigestType.CRC32C, password=b"p", ctime=None, custom_metadata=(), ctoken=0)


def owed(m, bookie=ME):
    return [e for f in m.fragments() if f.bookie_index(bookie) is not None and f.last_entry_id is not None
            for e in f.entries_of(f.bookie_index(bookie))]


def categories(findings):
    return sorted(f.category.value for f in findings)


def test_a_complete_ledger_has_no_findings():
    m = meta()
    assert judge_ledger(m, ME, LedgerEvidence(7, owed(m))) == []


def test_condition_1_no_index_lists_every_owed_entry():
    m = meta()
    [finding] = judge_ledger(m, ME, LedgerEvidence(7, None))
    assert finding.category is Category.MISSING_LEDGER
    assert finding.entries == to_ranges(owed(m))
    assert "rebuilding the index" not in finding.detail


def test_condition_1_says_when_records_still_sit_in_entry_logs():
    m = meta()
    [finding] = judge_ledger(m, ME, LedgerEvidence(7, None, logged_entries=owed(m)[:5], logged_in=(3,)))
    assert "5 of them still sit in entry log(s) 3" in finding.detail


def test_condition_2_missing_entries_as_ranges():
    m = meta()
    have = [e for e in owed(m) if e not in (3, 5, 6)]  # index 0 of 3, Wq 2 owes 0, 2, 3, 5, 6, 8, ...
    [finding] = judge_ledger(m, ME, LedgerEvidence(7, have))
    assert finding.category is Category.MISSING_ENTRY
    assert finding.entries == ((3, 3), (5, 6))


def test_entries_after_an_ensemble_change_are_not_owed_by_the_bookie_that_left():
    m = meta(segments=((0, (ME, B2, B3)), (20, (B4, B2, B3))))
    have = [e for e in owed(m)]
    assert max(have) < 20
    assert judge_ledger(m, ME, LedgerEvidence(7, have)) == []


def test_entries_an_ensemble_change_left_behind_are_missing():
    # The bookie is at index 0 before entry 10 and index 2 after it: both fragments are owed.
    m = meta(segments=((0, (ME, B2, B3)), (10, (B4, B2, ME))))
    have = [e for e in owed(m) if e < 10]
    [finding] = judge_ledger(m, ME, LedgerEvidence(7, have))
    assert finding.category is Category.MISSING_ENTRY
    assert finding.entries[0][0] >= 10
    assert "segment(s) 1 of 2" in finding.detail


def test_open_ledger_last_fragment_is_not_judged():
    m = meta(state=LedgerState.OPEN)
    assert judge_ledger(m, ME, LedgerEvidence(7, [])) == []
    assert judge_ledger(m, ME, LedgerEvidence(7, None)) == []


def test_open_ledger_earlier_fragments_are_judged():
    m = meta(state=LedgerState.IN_RECOVERY, segments=((0, (ME, B2, B3)), (10, (B4, B2, B3))))
    [finding] = judge_ledger(m, ME, LedgerEvidence(7, []))
    assert finding.category is Category.MISSING_ENTRY
    assert finding.entries[-1][1] < 10


def test_lost_records_are_the_most_severe_and_grouped_by_log():
    m = meta()
    have = owed(m)
    faults = tuple(RecordFault(e, 1, 5000 + e, True, "past end of entry log") for e in have[-4:])
    findings = judge_ledger(m, ME, LedgerEvidence(7, have, faults))
    [lost] = findings
    assert lost.category is Category.LOST_ENTRY
    assert lost.entry_log == 1 and lost.offset == 5000 + have[-4]
    assert sum(b - a + 1 for a, b in lost.entries) == 4


def test_a_corrupt_record_is_one_finding_with_its_place():
    m = meta()
    fault = RecordFault(owed(m)[2], 0, 1234, False, "CRC32C digest mismatch")
    [finding] = judge_record_faults(m, ME, 7, (fault,))
    assert finding.category is Category.CORRUPT_ENTRY
    assert (finding.entry_log, finding.offset, finding.entries) == (0, 1234, ((fault.entry_id,) * 2,))


def test_faults_in_copies_the_ledger_no_longer_needs_are_ignored():
    m = meta(last=9)
    past_end = RecordFault(15, 0, 100, False, "digest mismatch")  # written but never part of the ledger
    not_in_write_set = RecordFault(1 if not m.fragments()[0].holds(0, 1) else 2, 0, 200, True, "gone")
    assert not m.fragments()[0].holds(0, not_in_write_set.entry_id)
    assert judge_record_faults(m, ME, 7, (past_end, not_in_write_set)) == []


def test_deleted_ledger_gives_no_damage_but_an_orphan():
    assert judge_ledger(None, ME, LedgerEvidence(7, [0, 1, 2])) == []
    assert judge_record_faults(None, ME, 7, (RecordFault(0, 0, 1, True, "x"),)) == []
    finding = orphan_finding(7, 3, 1, [2, 0])
    assert finding.category is Category.ORPHAN_LEDGER and finding.category.informational
    assert "3 entries in the local index" in finding.detail and "entry log(s) 0, 2" in finding.detail
    assert orphan_finding(7, None, 0, []) is None


def test_an_unreadable_index_is_a_missing_ledger_that_says_why():
    m = meta()
    [finding] = judge_ledger(m, ME, LedgerEvidence(7, None, index_problem="bad signature at offset 0"))
    assert finding.category is Category.MISSING_LEDGER
    assert "index is unreadable (bad signature at offset 0)" in finding.detail
