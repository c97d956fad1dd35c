"""BP-34's durability contract: each violation category, the real corpus, and a per-entry oracle."""

import json
import random

import pytest

from corpus import CORPUS
from scanner.audit.availability import SequenceGroup, merge_runs
from scanner.audit.contract import (
    Category,
    ledger_violations,
    long_under_replicated,
    placement_violations,
    unavailable_bookies,
)
from scanner.metadata.ledger import LedgerMetadata, LedgerState

A, B, C, D, X = "bk-a:3181", "bk-b:3181", "bk-c:3181", "bk-d:3181", "bk-x:3181"


def ledger(segments, *, size=3, quorum=3, state=LedgerState.CLOSED, last=None, ledger_id=7):
    return LedgerMetadata(
        ledger_id=ledger_id, format_version=3, ensemble_size=size, write_quorum=quorum,
        ack_quorum=min(2, quorum), state=state,
        last_entry_id=last if state is LedgerState.CLOSED else -1, length=0,
        segments=tuple((first, tuple(bookies)) for first, bookies in segments),
        digest_type=None, password=None, ctime=None, custom_metadata=(), ctoken=None)


def good(*runs):
    return (tuple(runs), ())


def of(violations, category):
    return [violation for violation in violations if violation.category is category]


def ids(violation):
    """The entries a violation's sequence groups stand for (small cases only)."""
    return [start + offset for g in violation.entries
            for start in range(g.first_sequence_start, g.last_sequence_start + 1, g.sequence_period or 1)
            for offset in range(g.sequence_size)]


def runs_of(violation):
    return merge_runs((e, e) for e in ids(violation))


# --- the real corpus -----------------------------------------------------------------------------

def corpus_case(record):
    listings = {bookie: (merge_runs((entry, entry) for entry in ids), ())
                for bookie, ids in record["stored_on"].items()}
    if record["ensembles"] is None:
        return None, listings
    metadata = ledger([(e["first_entry_id"], e["bookies"]) for e in record["ensembles"]],
                      size=record["ensemble_size"], quorum=record["write_quorum"],
                      state=LedgerState[record["metadata"]["state"]],
                      last=record["metadata"]["last_entry_id"], ledger_id=record["ledger_id"])
    return metadata, listings


def test_corpus_ledger_46_lacks_exactly_entry_45_on_the_stopped_bookie():
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    record = next(r for r in manifest["ledgers"] if r["ledger_id"] == 46)
    metadata, listings = corpus_case(record)
    violations = ledger_violations(46, metadata, listings)
    assert len(violations) == 1
    (violation,) = violations
    assert violation.category is Category.UNDER_REPLICATED_ENTRY
    assert runs_of(violation) == ((45, 45),)
    assert violation.copies == 2
    assert violation.bookies == ("127.0.0.1:3183",)
    assert violation.detail.startswith("1 under-replicated entries (write quorum 3, fewest good copies 2)")


def test_whole_corpus_matches_the_manifest():
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    found = {}
    for record in manifest["ledgers"]:
        metadata, listings = corpus_case(record)
        for violation in ledger_violations(record["ledger_id"], metadata, listings):
            found.setdefault(violation.category, set()).add(violation.ledger_id)
    deleted = {r["ledger_id"] for r in manifest["ledgers"] if r["status"] == "DELETED"}
    damaged = {r["ledger_id"] for r in manifest["ledgers"] if r.get("expected_minus_stored")}
    assert found == {Category.ORPHAN_LEDGER: deleted, Category.UNDER_REPLICATED_ENTRY: damaged}
    assert deleted == {6, 17} and damaged == {46}


# --- under-replicated entries --------------------------------------------------------------------

def test_open_ledger_is_not_judged_on_its_last_fragment():
    for state in (LedgerState.OPEN, LedgerState.IN_RECOVERY):
        metadata = ledger([(0, [A, B, C]), (10, [A, B, D])], state=state)
        # entries 3 and 15 are missing on A; only the first fragment [0, 9] is judged
        listings = {A: good((0, 2), (4, 14), (16, 20)), B: good((0, 20)), C: good((0, 9)), D: good((10, 20))}
        (violation,) = ledger_violations(7, metadata, listings)
        assert violation.category is Category.UNDER_REPLICATED_ENTRY
        assert (runs_of(violation), violation.bookies, violation.copies) == (((3, 3),), (A,), 2)


def test_open_ledger_with_one_fragment_has_nothing_to_judge():
    metadata = ledger([(0, [A, B, C])], state=LedgerState.OPEN)
    assert ledger_violations(7, metadata, {A: good((5, 5))}) == []


def test_entries_past_the_last_entry_of_a_closed_ledger_are_ignored():
    metadata = ledger([(0, [A, B, C])], last=9)
    listings = {A: good((0, 30)), B: good((0, 9), (50, 60)), C: good((0, 9), (12, 12))}
    assert ledger_violations(7, metadata, listings) == []
    assert ledger_violations(7, ledger([(0, [A, B, C])], last=-1), listings) == []


def test_ensemble_change_judges_each_fragment_on_its_own_ensemble():
    metadata = ledger([(0, [A, B, C]), (20, [A, B, D])], size=3, quorum=2, last=39)
    # C was replaced by D at 20; D lost 25..27; C still holds its old copies up to 23
    c_share = [e for e in range(0, 20) if (2 - e) % 3 < 2]
    listings = {
        A: good(*((e, e) for e in range(40) if (0 - e) % 3 < 2)),
        B: good(*((e, e) for e in range(40) if (1 - e) % 3 < 2)),
        C: good(*((e, e) for e in c_share), (20, 23)),
        D: good(*((e, e) for e in range(20, 40) if (2 - e) % 3 < 2 and not 25 <= e <= 27)),
    }
    violations = ledger_violations(7, metadata, listings)
    (under,) = of(violations, Category.UNDER_REPLICATED_ENTRY)
    # D's write-set entries in 25..27 are 25 (e = 1 mod 3 -> {1, 2}) and 26 ({2, 0}); 27 is {0, 1}
    assert (runs_of(under), under.bookies, under.copies) == (((25, 26),), (D,), 1)
    assert under.detail.startswith("2 under-replicated entries")
    (extra,) = of(violations, Category.EXTRA_COPY)
    assert (runs_of(extra), extra.bookies) == (((20, 23),), (C,))
    assert extra.detail == "4 entries held outside the bookie's write sets"


def test_a_gap_of_a_million_entries_is_a_few_exact_groups():
    metadata = ledger([(0, [A, B, C])], size=3, quorum=2, last=2_000_000)
    listings = {A: good((0, 9), (1_000_010, 2_000_000)), B: good((0, 2_000_000)), C: good((0, 2_000_000))}
    violations = ledger_violations(7, metadata, listings)
    # A (index 0) is owed entries = 0 or 2 (mod 3); every bookie also holds entries that are not its own
    (under,) = of(violations, Category.UNDER_REPLICATED_ENTRY)
    assert (under.bookies, under.copies) == ((A,), 1)
    assert under.entries == (SequenceGroup(11, 1_000_007, 2, 3),)  # exactly 11-12, 14-15, ..., 1_000_007-1_000_008
    expected = sum(1 for e in range(11, 1_000_009) if e % 3 != 1)
    assert under.detail.startswith(f"{expected} under-replicated entries")
    assert {v.bookies for v in of(violations, Category.EXTRA_COPY)} == {(A,), (B,), (C,)}


def test_a_lost_bookie_is_reported_entry_by_entry_not_as_a_bounding_range():
    # ensemble 4, write quorum 2: D (index 3) is owed e = 2 or 3 (mod 4), 58 of the entries 2..115
    metadata = ledger([(0, [A, B, C, D])], size=4, quorum=2, last=115)
    listings = {bookie: good((0, 115)) for bookie in (A, B, C)}
    (under,) = of(ledger_violations(7, metadata, listings), Category.UNDER_REPLICATED_ENTRY)
    assert (under.entries, under.bookies) == ((SequenceGroup(2, 114, 2, 4),), (D,))
    assert ids(under) == [e for e in range(116) if e % 4 in (2, 3)] and len(ids(under)) == 58
    assert under.detail.startswith("58 under-replicated entries")


def test_a_gap_of_a_quadrillion_entries_costs_no_more_than_a_short_one():
    last = 10**15
    metadata = ledger([(0, [A, B, C])], size=3, quorum=2, last=last)
    listings = {A: good((0, 9), (last - 5, last)), B: good((0, last)), C: good((0, last))}
    (under,) = of(ledger_violations(7, metadata, listings), Category.UNDER_REPLICATED_ENTRY)
    assert under.entries == (SequenceGroup(11, last - 8, 2, 3),)
    span = last - 7 - 11 + 1
    assert under.detail.startswith(f"{span - span // 3} under-replicated entries")


def test_overlapping_gaps_on_two_bookies_split_by_copies():
    metadata = ledger([(0, [A, B, C])], size=3, quorum=3, last=99)
    listings = {A: good((0, 9), (30, 99)), B: good((0, 19), (40, 99)), C: good((0, 99))}
    violations = ledger_violations(7, metadata, listings)
    assert [(runs_of(v), v.bookies, v.copies) for v in violations] == [
        (((10, 19),), (A,), 2),
        (((20, 29),), (A, B), 1),
        (((30, 39),), (B,), 2),
    ]


def test_entries_with_no_copy_left():
    metadata = ledger([(0, [A, B])], size=2, quorum=2, last=4)
    (violation,) = ledger_violations(7, metadata, {A: good((0, 4))})
    assert (runs_of(violation), violation.bookies, violation.copies) == (((0, 4),), (B,), 1)
    (violation,) = ledger_violations(7, metadata, {})
    assert (runs_of(violation), violation.bookies, violation.copies) == (((0, 4),), (A, B), 0)


def test_a_damaged_copy_is_not_a_good_copy():
    metadata = ledger([(0, [A, B, C])], last=9)
    listings = {A: ((((0, 9),)), ((4, 5),)), B: good((0, 9)), C: good((0, 9))}
    violations = ledger_violations(7, metadata, listings)
    (violation,) = violations
    assert (runs_of(violation), violation.bookies, violation.copies) == (((4, 5),), (A,), 2)
    assert violation.detail.endswith("; damaged copies on bk-a:3181")
    # a damaged copy on a bookie outside the write set is still an extra copy
    (extra,) = ledger_violations(7, metadata, {**listings, X: ((), ((3, 3),))})[1:]
    assert (extra.category, runs_of(extra), extra.bookies) == (Category.EXTRA_COPY, ((3, 3),), (X,))


# --- extra copies --------------------------------------------------------------------------------

def test_extra_copies_inside_and_outside_the_ensemble():
    metadata = ledger([(0, [A, B, C])], size=3, quorum=2, last=8)
    listings = {A: good((0, 8)), B: good(*((e, e) for e in range(9) if (1 - e) % 3 < 2)),
                C: good(*((e, e) for e in range(9) if (2 - e) % 3 < 2)), X: good((2, 4), (7, 20))}
    violations = ledger_violations(7, metadata, listings)
    assert [(v.category, runs_of(v), v.bookies) for v in violations] == [
        # A (index 0) is owed 0, 2, 3, 5, 6, 8; it also holds 1, 4, 7
        (Category.EXTRA_COPY, ((1, 1), (4, 4), (7, 7)), (A,)),
        (Category.EXTRA_COPY, ((2, 4), (7, 8)), (X,)),
    ]
    assert violations[0].detail == "3 entries held outside the bookie's write sets"
    assert violations[1].detail == "5 entries held outside the bookie's write sets"


# --- orphans, placement, marks, availability -----------------------------------------------------

def test_orphan_ledger_lists_everything_held():
    listings = {A: good((0, 4)), B: ((), ((3, 9),)), C: good()}
    (violation,) = ledger_violations(9, None, listings)
    assert (violation.category, violation.ledger_id) == (Category.ORPHAN_LEDGER, 9)
    assert (runs_of(violation), violation.bookies) == (((0, 9),), (A, B))
    assert violation.detail == "2 bookies hold 10 entries of a ledger the metadata does not have"
    assert ledger_violations(9, None, {C: good()}) == []


def test_metadata_of_another_ledger_is_refused():
    with pytest.raises(ValueError, match="metadata of ledger 7 given for ledger 8"):
        ledger_violations(8, ledger([(0, [A, B, C])], last=1), {})


def test_ensemble_naming_a_bookie_twice():
    metadata = ledger([(0, [A, B, C]), (5, [A, B, A])], last=9)
    (violation,) = placement_violations(metadata)
    assert (violation.category, violation.bookies) == (Category.PLACEMENT_VIOLATION, (A,))
    assert violation.detail == "ensemble from entry 5 names bk-a:3181 more than once"
    assert violation in ledger_violations(7, metadata, {})


def test_racks_are_checked_per_write_set_only_with_a_map():
    metadata = ledger([(0, [A, B, C, D])], size=4, quorum=2, last=9)
    racks = {A: "/r1", B: "/r1", C: "/r2", D: "/r2"}
    (violation,) = placement_violations(metadata, racks)
    assert violation.detail == ("ensemble from entry 0: write sets starting at ensemble positions [0, 2] "
                                "span fewer than 2 racks")
    assert violation.bookies == (A, B, C, D)
    assert placement_violations(metadata) == []
    assert placement_violations(metadata, {A: "/r1", B: "/r2", C: "/r1", D: "/r2"}) == []
    assert placement_violations(metadata, racks, min_racks=1) == []
    # a bookie missing from the map is in BookKeeper's default rack, as its resolver places it
    assert placement_violations(metadata, {A: "/r1", B: "/r2", C: "/r1"}) == []
    (enforced,) = placement_violations(metadata, {A: "/r1", B: "/r2", C: "/r1"}, enforce_min_racks=True)
    assert enforced.detail == ("ensemble from entry 0: write sets starting at ensemble positions [2, 3] "
                               "span fewer than 2 racks or use /default-rack (enforced)")


def test_open_ledgers_last_ensemble_is_not_judged_for_placement():
    metadata = ledger([(0, [A, B, C]), (5, [A, A, C])], state=LedgerState.OPEN)
    assert placement_violations(metadata) == []


def test_long_under_replicated_marks():
    marks = {3: 1_000, 1: 5_000, 2: None, 4: 4_000}
    violations = long_under_replicated(marks, now_ms=10_000, limit_ms=6_000)
    assert [(v.category, v.ledger_id) for v in violations] == [(Category.LONG_UNDER_REPLICATED, 3)]
    assert violations[0].detail == "marked under-replicated for 9000 ms, over the limit of 6000 ms"
    assert [v.ledger_id for v in long_under_replicated(marks, now_ms=10_000, limit_ms=5_000)] == [3, 4]


def test_unavailable_bookies_are_neither_registered_nor_exported():
    metadata = ledger([(0, [A, B, C]), (5, [A, B, D])], last=9)
    (violation,) = unavailable_bookies(metadata, registered={A, X}, exported={B})
    assert (violation.category, violation.bookies) == (Category.UNAVAILABLE_BOOKIE, (C, D))
    assert unavailable_bookies(metadata, registered={A, B}, exported={C, D}) == []


# --- oracle: every entry, one at a time ----------------------------------------------------------

def random_case(rng):
    size = rng.randint(1, 5)
    quorum = rng.randint(1, size)
    pool = [f"bk-{n}:3181" for n in range(7)]
    firsts = sorted(rng.randrange(40) for _ in range(rng.randrange(3)))
    segments = [(first, rng.sample(pool, size)) for first in [0, *firsts]]
    state = rng.choice([LedgerState.CLOSED, LedgerState.CLOSED, LedgerState.OPEN])
    metadata = ledger(segments, size=size, quorum=quorum, state=state, last=rng.randrange(-1, 60))
    listings = {}
    for bookie in rng.sample(pool, rng.randint(0, len(pool))):
        held = {e for e in range(70) if rng.random() < 0.85}
        bad = {e for e in held if rng.random() < 0.1}
        listings[bookie] = (merge_runs((e, e) for e in held - bad), merge_runs((e, e) for e in bad))
    return metadata, listings


def entry_sets(listings):
    good, held = {}, {}
    for bookie, (good_runs, bad_runs) in listings.items():
        bad = {e for first, last in bad_runs for e in range(first, last + 1)}
        kept = {e for first, last in good_runs for e in range(first, last + 1)}
        good[bookie], held[bookie] = kept - bad, kept | bad
    return good, held


def test_oracle_under_replicated_and_extra_copies_entry_by_entry():
    rng = random.Random(4242)
    for _ in range(400):
        metadata, listings = random_case(rng)
        good, held = entry_sets(listings)
        judged = [f for f in metadata.fragments() if f.last_entry_id is not None]
        fragment_of = {e: f for f in judged for e in range(f.first_entry_id, f.last_entry_id + 1)}

        def write_set(e):
            return {fragment_of[e].bookies[i] for i in fragment_of[e].write_set(e)}

        lacking = {e: {b for b in write_set(e) if e not in good.get(b, ())} for e in fragment_of}
        lacking = {e: bookies for e, bookies in lacking.items() if bookies}
        extra = {(e, b) for b, entries in held.items() for e in entries if e in fragment_of and b not in write_set(e)}

        violations = ledger_violations(7, metadata, listings)
        reported, reported_extra = {}, set()
        for violation in of(violations, Category.UNDER_REPLICATED_ENTRY):
            copies = []
            for e in ids(violation):
                hit = write_set(e) & set(violation.bookies)
                assert hit, "exactly the under-replicated entries, none in between"
                assert e not in reported
                reported[e] = hit
                copies.append(metadata.write_quorum - len(hit))
            assert min(copies) == violation.copies
            if len(violation.bookies) == 1 or metadata.write_quorum == metadata.ensemble_size:
                assert set(copies) == {violation.copies}
        for violation in of(violations, Category.EXTRA_COPY):
            (bookie,) = violation.bookies
            for e in ids(violation):
                assert e in held[bookie] and bookie not in write_set(e), "exactly the extra copies"
                assert (e, bookie) not in reported_extra
                reported_extra.add((e, bookie))
        assert reported == lacking
        assert reported_extra == extra


def test_oracle_clean_listings_are_exactly_the_write_sets_and_judge_clean():
    from scanner.audit.availability import decode_runs, encode_runs
    from scanner.audit.judging import AuditContext, BookieListing, LedgerNode, Status, clean_listings, judge_ledger
    from scanner.metadata.ledger import serialize_ledger_metadata

    rng = random.Random(2424)
    cleared = 0
    for _ in range(400):
        metadata, _ = random_case(rng)
        node = LedgerNode("/ledgers/00/0000/L0007", serialize_ledger_metadata(metadata), None, 1)
        everyone = frozenset(f"bk-{n}:3181" for n in range(7))
        status, listings = clean_listings(7, node, AuditContext(everyone, everyone, frozenset()))
        assert status is Status.JUDGED
        if not metadata.is_closed or placement_violations(metadata):
            assert listings is None
            continue
        wanted = {}
        for fragment in metadata.fragments():
            for e in range(fragment.first_entry_id, fragment.last_entry_id + 1):
                for index in fragment.write_set(e):
                    wanted.setdefault(fragment.bookies[index], set()).add(e)
        assert {bookie: {e for first, last in decode_runs(want) for e in range(first, last + 1)}
                for bookie, want in listings} == wanted
        outcome = judge_ledger(7, node, [BookieListing(bookie, want, encode_runs(())) for bookie, want in listings],
                               AuditContext(everyone, everyone, frozenset()))
        assert outcome.violations == () and outcome.problems == ()
        cleared += 1
    assert cleared > 100


def test_ledgers_that_listings_alone_cannot_clear_get_no_clean_listings():
    from scanner.audit.judging import AuditContext, LedgerNode, Status, clean_listings
    from scanner.metadata.ledger import serialize_ledger_metadata

    def prepared(metadata, registered=frozenset({A, B, C, D}), marked=frozenset(), racks=None):
        node = LedgerNode("/ledgers/00/0000/L0007", serialize_ledger_metadata(metadata), None, 1)
        return clean_listings(7, node, AuditContext(registered, frozenset(), marked, racks))

    closed = ledger([(0, [A, B, C])], last=9)
    assert prepared(closed)[0] is Status.JUDGED and len(prepared(closed)[1]) == 3
    assert prepared(closed, marked=frozenset({7})) == (Status.MARKED, None)
    assert prepared(ledger([(0, [A, B, C])], state=LedgerState.OPEN)) == (Status.JUDGED, None)
    assert prepared(ledger([(0, [A, B, A])], last=9)) == (Status.JUDGED, None)  # placement
    assert prepared(closed, registered=frozenset({A, B})) == (Status.JUDGED, None)  # C unavailable
    assert prepared(closed, racks={A: "r1", B: "r1", C: "r1"}) == (Status.JUDGED, None)  # one rack
    node = LedgerNode("/ledgers/00/0000/L0007", b"not metadata", None, 1)
    assert clean_listings(7, node, AuditContext(frozenset(), frozenset(), frozenset())) == (Status.UNDECODABLE, None)
