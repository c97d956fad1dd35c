"""BP-34's durability contract, judged for one ledger from its metadata and every bookie's listing.

Pure functions: no I/O, no Spark. Work grows with runs and fragments, never with entries: the
entries a bookie lacks are found by walking the gaps between its good runs, and reported exactly, as
sequence groups (BP-34's form: a run of entries repeated every ensemble-size entries), so a consumer
that expands them gets the entries in question and no others.

Write sets follow round-robin striping: in a fragment with ensemble size E and write quorum Wq,
the bookie at ensemble index b must hold entry e iff ``(b - e) mod E < Wq``.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby

from scanner.audit.availability import (Run, SequenceGroup, clip_runs, gaps_in, groups_entry_count, merge_runs,
                                        periodic_groups, run_group, subtract_runs)
from scanner.metadata.ledger import Fragment, LedgerMetadata
from scanner.repair.placement.racks import DEFAULT_MIN_RACKS, DEFAULT_RACK, short_write_sets

Listing = tuple[Sequence[Run], Sequence[Run]]  # one bookie's (good runs, damaged runs) of a ledger


class Category(enum.StrEnum):
    UNDER_REPLICATED_ENTRY = "under_replicated_entry"
    EXTRA_COPY = "extra_copy"
    PLACEMENT_VIOLATION = "placement_violation"
    ORPHAN_LEDGER = "orphan_ledger"
    LONG_UNDER_REPLICATED = "long_under_replicated"
    UNAVAILABLE_BOOKIE = "unavailable_bookie"


@dataclass(frozen=True, slots=True)
class Violation:
    """One BP-34 finding about one ledger.

    ``under_replicated_entry``: an entry in ``entries`` is under-replicated iff its write set
    includes at least one of ``bookies``, and it has no good copy on those of ``bookies`` that its
    write set includes. ``copies`` is the fewest good copies such an entry has; every one of them
    has exactly that many when ``bookies`` is one bookie or the write quorum equals the ensemble.
    ``extra_copy``: the bookie holds every entry in ``entries``; those outside its write set are extra.
    ``orphan_ledger``: ``entries`` is everything the ``bookies`` hold of a ledger without metadata.
    """

    category: Category
    ledger_id: int
    entries: tuple[SequenceGroup, ...] | None  # exactly the entries in question, ascending by first entry
    bookies: tuple[str, ...]
    detail: str
    copies: int | None = None


def ledger_violations(
    ledger_id: int,
    metadata: LedgerMetadata | None,
    listings: Mapping[str, Listing],
    *,
    racks: Mapping[str, str] | None = None,
    min_racks: int = DEFAULT_MIN_RACKS,
    enforce_min_racks: bool = False,
) -> list[Violation]:
    """Every violation of one ledger: placement, under-replicated entries, extra copies, or orphan.

    ``metadata`` is None when the metadata has no such ledger. ``listings`` maps each bookie that
    exported a listing of this ledger to its (good runs, damaged runs); a damaged copy is not good.
    A bookie of the ensemble without a listing holds no copies. Racks are checked only with ``racks``.
    """
    if metadata is None:
        return _orphan(ledger_id, listings)
    if metadata.ledger_id != ledger_id:
        raise ValueError(f"metadata of ledger {metadata.ledger_id} given for ledger {ledger_id}")
    good, damaged, held = {}, {}, {}
    for bookie, (good_runs, damaged_runs) in listings.items():
        kept = merge_runs(good_runs)
        if damaged_runs:
            bad = damaged[bookie] = merge_runs(damaged_runs)
            good[bookie], held[bookie] = subtract_runs(kept, bad), merge_runs((*kept, *bad))
        else:
            good[bookie] = held[bookie] = kept
    # the end of a non-closed ledger's last fragment is unknown, so it is not judged
    fragments = [fragment for fragment in metadata.fragments() if fragment.last_entry_id is not None]
    return [
        *placement_violations(metadata, racks, min_racks, enforce_min_racks),
        *_under_replicated(metadata, fragments, good, damaged),
        *_extra_copies(ledger_id, fragments, held),
    ]


def placement_violations(
    metadata: LedgerMetadata, racks: Mapping[str, str] | None = None, min_racks: int = DEFAULT_MIN_RACKS,
    enforce_min_racks: bool = False,
) -> list[Violation]:
    """Ensembles naming a bookie twice and, given ``racks``, write sets breaking the rack rule.

    The rule of BookKeeper's rack-aware policy, the one a repair's move keeps to (``short_write_sets``): each
    of an ensemble's E write sets spans ``min(write quorum, min_racks)`` racks and, enforced, has no bookie
    in the default rack; a bookie missing from ``racks`` is in the default rack.
    A non-closed ledger's last ensemble is not judged.
    """
    segments = metadata.segments if metadata.is_closed else metadata.segments[:-1]
    quorum = metadata.write_quorum
    violations = []
    for first_entry_id, bookies in segments:
        repeated = tuple(sorted({bookie for bookie in bookies if bookies.count(bookie) > 1}))
        if repeated:
            violations.append(Violation(
                Category.PLACEMENT_VIOLATION, metadata.ledger_id, None, repeated,
                f"ensemble from entry {first_entry_id} names {', '.join(repeated)} more than once"))
        if racks is None:
            continue
        short = short_write_sets(bookies, quorum, lambda bookie: racks.get(bookie, DEFAULT_RACK), min_racks,
                                 enforce_min_racks)
        if short:
            rule = f"span fewer than {min(quorum, min_racks)} racks" + (
                f" or use {DEFAULT_RACK} (enforced)" if enforce_min_racks else "")
            violations.append(Violation(
                Category.PLACEMENT_VIOLATION, metadata.ledger_id, None, tuple(bookies),
                f"ensemble from entry {first_entry_id}: write sets starting at ensemble positions {short} {rule}"))
    return violations


def long_under_replicated(marks: Mapping[int, int | None], now_ms: int, limit_ms: int) -> list[Violation]:
    """Ledgers marked under-replicated for longer than ``limit_ms`` (marks: ledger id -> mark ctime, ms).

    A mark without a ctime (written by old BookKeeper versions) cannot be aged and is skipped.
    """
    return [
        Violation(Category.LONG_UNDER_REPLICATED, ledger_id, None, (),
                  f"marked under-replicated for {now_ms - ctime} ms, over the limit of {limit_ms} ms")
        for ledger_id, ctime in sorted(marks.items())
        if ctime is not None and now_ms - ctime > limit_ms
    ]


def unavailable_bookies(
    metadata: LedgerMetadata, registered: Collection[str], exported: Collection[str]
) -> list[Violation]:
    """The ledger's ensemble bookies that are neither registered in the metadata store nor exported a listing."""
    missing = sorted({bookie for _, bookies in metadata.segments for bookie in bookies
                      if bookie not in registered and bookie not in exported})
    if not missing:
        return []
    return [Violation(Category.UNAVAILABLE_BOOKIE, metadata.ledger_id, None, tuple(missing),
                      f"{len(missing)} ensemble bookies are neither registered nor exported a listing")]


def _orphan(ledger_id: int, listings: Mapping[str, Listing]) -> list[Violation]:
    holders = tuple(sorted(bookie for bookie, (good, bad) in listings.items() if good or bad))
    if not holders:
        return []
    runs = merge_runs(run for good, bad in listings.values() for run in (*good, *bad))
    count = sum(last - first + 1 for first, last in runs)
    return [Violation(Category.ORPHAN_LEDGER, ledger_id, tuple(run_group(first, last) for first, last in runs), holders,
                      f"{len(holders)} bookies hold {count} entries of a ledger the metadata does not have")]


@dataclass(slots=True)
class _Finding:
    """The entries gathered for one violation, as exact sequence groups."""

    groups: list[SequenceGroup] = field(default_factory=list)
    damaged: set[str] = field(default_factory=set)

    def add(self, groups: Iterable[SequenceGroup]) -> None:
        self.groups.extend(groups)

    @property
    def entries(self) -> tuple[SequenceGroup, ...]:
        return tuple(sorted(self.groups, key=lambda group: group.first_sequence_start))

    @property
    def count(self) -> int:
        return groups_entry_count(self.groups)


def _under_replicated(
    metadata: LedgerMetadata, fragments: Sequence[Fragment], good: Mapping[str, Sequence[Run]],
    damaged: Mapping[str, Sequence[Run]],
) -> list[Violation]:
    findings: dict[tuple[tuple[str, ...], int], _Finding] = {}
    for fragment in fragments:
        for first, last, lacking, copies in _lacking_pieces(fragment, good):
            names = tuple(sorted({fragment.bookies[index] for index in lacking}))
            finding = findings.setdefault((names, copies), _Finding())
            finding.add(periodic_groups(first, last, fragment.ensemble_size,
                                        lambda entry: any(fragment.holds(index, entry) for index in lacking)))
            for index in lacking:
                bookie = fragment.bookies[index]
                if _holds_striped(fragment, index, clip_runs(damaged.get(bookie, ()), first, last)):
                    finding.damaged.add(bookie)
    violations = []
    for (names, copies), finding in findings.items():
        detail = (f"{finding.count} under-replicated entries (write quorum {metadata.write_quorum}, "
                  f"fewest good copies {copies}); no good copy on {', '.join(names)}")
        if finding.damaged:
            detail += f"; damaged copies on {', '.join(sorted(finding.damaged))}"
        violations.append(Violation(Category.UNDER_REPLICATED_ENTRY, metadata.ledger_id, finding.entries,
                                    names, detail, copies))
    violations.sort(key=lambda violation: violation.entries[0].first_sequence_start)
    return violations


def _lacking_pieces(
    fragment: Fragment, good: Mapping[str, Sequence[Run]]
) -> Iterator[tuple[int, int, frozenset[int], int]]:
    """(first, last, lacking ensemble indexes, fewest good copies) for the fragment's under-replicated entries."""
    size, quorum = fragment.ensemble_size, fragment.write_quorum
    events = []
    for index, bookie in enumerate(fragment.bookies):
        for gap_first, gap_last in gaps_in(good.get(bookie, ()), fragment.first_entry_id, fragment.last_entry_id):
            first = _first_striped(index, gap_first, size, quorum)
            if first <= gap_last:
                events.append((first, 1, index))
                events.append((_last_striped(index, gap_last, size, quorum) + 1, 0, index))
    events.sort()
    # sweep the gap boundaries: between two of them the set of lacking bookies is constant
    active: set[int] = set()
    start = 0
    for position, changes in groupby(events, key=lambda event: event[0]):
        if active:
            yield from _pieces_of_span(fragment, start, position - 1, frozenset(active))
        for _, opens, index in changes:
            if opens:
                active.add(index)
            else:
                active.discard(index)
        start = position


def _pieces_of_span(
    fragment: Fragment, first: int, last: int, lacking: frozenset[int]
) -> Iterator[tuple[int, int, frozenset[int], int]]:
    size, quorum = fragment.ensemble_size, fragment.write_quorum
    if len(lacking) > 1 and quorum < size and last - first < size:
        # a short span: each entry's own lacking set, exactly
        for key, entries in groupby(range(first, last + 1),
                                    key=lambda entry: frozenset(i for i in lacking if fragment.holds(i, entry))):
            entries = list(entries)
            if key:
                yield entries[0], entries[-1], key, quorum - len(key)
        return
    trimmed_first = min(_first_striped(index, first, size, quorum) for index in lacking)
    trimmed_last = max(_last_striped(index, last, size, quorum) for index in lacking)
    if trimmed_first > trimmed_last:
        return
    if len(lacking) == 1:
        most_lacking = 1
    else:
        most_lacking = max(sum(fragment.holds(index, entry) for index in lacking)
                           for entry in range(first, first + size))
    yield trimmed_first, trimmed_last, lacking, quorum - most_lacking


def _extra_copies(ledger_id: int, fragments: Sequence[Fragment], held: Mapping[str, Sequence[Run]]) -> list[Violation]:
    findings: dict[str, _Finding] = {}
    for fragment in fragments:
        size, quorum = fragment.ensemble_size, fragment.write_quorum
        for bookie, runs in held.items():
            # a bookie named twice in an ensemble is judged by its first position (placement flags the rest)
            index = fragment.bookie_index(bookie)
            if index is not None and quorum == size:
                continue
            for first, last in clip_runs(runs, fragment.first_entry_id, fragment.last_entry_id):
                if index is None:
                    groups = (run_group(first, last),)
                else:
                    groups = periodic_groups(first, last, size,
                                             lambda entry, index=index: not fragment.holds(index, entry))
                if groups:
                    findings.setdefault(bookie, _Finding()).add(groups)
    return [
        Violation(Category.EXTRA_COPY, ledger_id, finding.entries, (bookie,),
                  f"{finding.count} entries held outside the bookie's write sets")
        for bookie, finding in sorted(findings.items())
    ]


def write_set_runs(fragment: Fragment, index: int) -> Iterator[Run]:
    """The runs of a closed fragment's entries whose write sets include ensemble ``index``, ascending: one per
    stripe window (one in all when the write quorum is the ensemble)."""
    size, quorum = fragment.ensemble_size, fragment.write_quorum
    first, last = fragment.first_entry_id, fragment.last_entry_id
    if quorum >= size:
        yield first, last
        return
    start = _first_striped(index, first, size, quorum)
    while start <= last:
        end = start + (index - start) % size  # the window's last entry: the one at distance 0
        yield start, min(end, last)
        start = end + size - quorum + 1


def _first_striped(index: int, entry_id: int, size: int, quorum: int) -> int:
    """The smallest entry >= entry_id whose write set includes ``index``."""
    distance = (index - entry_id) % size
    return entry_id if distance < quorum else entry_id + distance - quorum + 1


def _last_striped(index: int, entry_id: int, size: int, quorum: int) -> int:
    """The largest entry <= entry_id whose write set includes ``index``."""
    distance = (index - entry_id) % size
    return entry_id if distance < quorum else entry_id - (size - distance)


def _holds_striped(fragment: Fragment, index: int, runs: Sequence[Run]) -> bool:
    """Whether ``runs`` contain an entry whose write set includes ``index``."""
    size, quorum = fragment.ensemble_size, fragment.write_quorum
    return any(_first_striped(index, first, size, quorum) <= last for first, last in runs)
