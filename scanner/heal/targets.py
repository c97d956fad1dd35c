"""Which damaged entries may be healed in place, and from which peers. Pure: findings and fresh metadata in.

An entry qualifies when its ledger still exists with a digest type and password (to verify copies
and to give the bookie the master key), the entry lies in a fragment that is over (every fragment
of a CLOSED ledger, or one before the last of an OPEN or IN_RECOVERY ledger, which the writer may
still append to), and that fragment's write set still names this bookie. The peers are the other
bookies of that write set.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from scanner.checks.findings import EntryRanges, Finding, to_ranges
from scanner.metadata.ledger import Fragment, LedgerMetadata
from scanner.repair.planner import damage_by_ledger


@dataclass(frozen=True, slots=True)
class HealTarget:
    ledger_id: int
    entry_id: int
    peers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NotHealable:
    ledger_id: int
    entries: EntryRanges
    reason: str

    def to_json(self) -> dict:
        return {"ledger_id": self.ledger_id, "entries": [list(r) for r in self.entries], "reason": self.reason}


def damaged_entries(findings: Iterable[Finding]) -> dict[int, EntryRanges]:
    """The entries a scan found lost, corrupt or missing, by ledger."""
    return {ledger_id: to_ranges(e for f in damage for first, last in f.entries for e in range(first, last + 1))
            for ledger_id, damage in damage_by_ledger(findings).items()}


def heal_targets(ledger_id: int, entries: EntryRanges, meta: LedgerMetadata | None,
                 bookie_id: str) -> tuple[list[HealTarget], list[NotHealable]]:
    """The entries of one ledger that may be healed, and the others grouped by why not."""
    if meta is None:
        return [], [NotHealable(ledger_id, entries, "ledger deleted")]
    if meta.digest_type is None:
        return [], [NotHealable(ledger_id, entries, "the metadata has no digest type and password "
                                                    "(a ledger of BookKeeper 4.1 or older): copies cannot be verified")]
    targets: list[HealTarget] = []
    refused: dict[str, list[int]] = defaultdict(list)
    open_fragment = f"in the last fragment of an {meta.state.name} ledger: the writer may still add to it"
    moved = "this bookie does not hold it in the current metadata (an ensemble change moved it)"
    fragments = meta.fragments()
    for entry_id in _each(entries):
        fragment = next((f for f in fragments if _within(f, entry_id)), None)
        if fragment is None:
            refused["past the ledger's last entry"].append(entry_id)
            continue
        if fragment.last_entry_id is None:
            refused[open_fragment].append(entry_id)
            continue
        index = fragment.bookie_index(bookie_id)
        if index is None or not fragment.holds(index, entry_id):
            refused[moved].append(entry_id)
            continue
        peers = tuple(fragment.bookies[i] for i in fragment.write_set(entry_id) if i != index)
        targets.append(HealTarget(ledger_id, entry_id, peers))
    return targets, [NotHealable(ledger_id, to_ranges(ids), reason) for reason, ids in refused.items()]


def plan_heals(damage: Mapping[int, EntryRanges], metadata: Mapping[int, LedgerMetadata | None],
               bookie_id: str) -> tuple[list[HealTarget], list[NotHealable]]:
    """``heal_targets`` for every damaged ledger, ascending by ledger id."""
    targets, refused = [], []
    for ledger_id in sorted(damage):
        these, why_not = heal_targets(ledger_id, damage[ledger_id], metadata.get(ledger_id), bookie_id)
        targets += these
        refused += why_not
    return targets, refused


def _within(fragment: Fragment, entry_id: int) -> bool:
    last = fragment.last_entry_id
    return fragment.first_entry_id <= entry_id and (last is None or entry_id <= last)


def _each(entries: EntryRanges) -> Iterator[int]:
    for first, last in entries:
        yield from range(first, last + 1)
