"""The bookie to take a replaced bookie's place in a fragment's ensemble, as BookKeeper 4.16.7 would choose it.

Pure: the ledger, the fragment, the writable bookies and a ``Topology`` in, candidates in preference
order out, or ``NoTarget`` with the reason. Read against ``RackawareEnsemblePlacementPolicyImpl.replaceBookie``
(4.16.7), which the ReplicationWorker and ``bookkeeper shell recover`` call through ``BookKeeperAdmin``:

1. bookies of the ensemble are never candidates; with ``enforceMinNumRacksPerWriteQuorum`` neither is any
   bookie in the default rack (``addDefaultRackBookiesIfMinNumRacksIsEnforced``);
2. a bookie in the replaced bookie's own rack; else
3. a bookie in a rack the rest of the ensemble does not use (``selectFromNetworkLocation`` excluding racks); else
4. without enforcement, any bookie (BookKeeper picks at random; here the ones that keep every write set
   on enough racks come first); with it, none: BookKeeper's ``BKNotEnoughBookiesException``, here ``NoTarget``.

BookKeeper picks at random within a step; here the order within a step is a hash of ledger, fragment and
bookie: stable across retries, spread across bookies. A ledger whose ``EnsemblePlacementPolicyConfig``
names Pulsar's isolated policy keeps its replacement inside its bookie groups first (``isolation``).
Without rack awareness (BookKeeper's ``DefaultEnsemblePlacementPolicy``) any writable bookie outside the
ensemble will do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from scanner.metadata.ledger import Fragment, LedgerMetadata
from scanner.repair.placement.isolation import (PlacementConfigError, isolation_excluded, ledger_isolation)
from scanner.repair.placement.racks import DEFAULT_MIN_RACKS, DEFAULT_RACK, Topology, short_write_sets


class NoTarget(Exception):
    """No bookie may take the replaced bookie's place; ``reason`` says why, for an operator."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class PlacementRules:
    """BookKeeper's placement settings: rack-aware or not, ``minNumRacksPerWriteQuorum``, and its enforcement."""

    rack_aware: bool = False
    min_racks: int = DEFAULT_MIN_RACKS
    enforce_min_racks: bool = False


def rank_replacements(ledger: LedgerMetadata, fragment: Fragment, replaced: str, writable: Iterable[str],
                      rules: PlacementRules, topology: Topology) -> list[str]:
    """The writable bookies that may replace ``replaced`` in ``fragment``, best first; NoTarget when none may."""
    writable = sorted(set(writable))
    outside = [b for b in writable if b not in fragment.bookies and b != replaced]
    span = f"entries {fragment.first_entry_id}-{'end' if fragment.last_entry_id is None else fragment.last_entry_id}"
    if not outside:
        raise NoTarget(f"no writable bookie outside the ensemble of {span} ({len(writable)} writable, all in it): "
                       "add a bookie, or bring one back")
    allowed = _inside_isolation_groups(ledger, outside, writable, topology)

    def spread(bookies: Iterable[str]) -> list[str]:
        key = f"{ledger.ledger_id}:{fragment.first_entry_id}:"
        return sorted(bookies, key=lambda b: hashlib.sha1(f"{key}{b}".encode()).digest())

    if not rules.rack_aware:
        return spread(allowed)
    if rules.enforce_min_racks:
        allowed = [b for b in allowed if topology.rack_of(b) != DEFAULT_RACK]
    own = topology.rack_of(replaced)
    used = {topology.rack_of(b) for b in fragment.bookies if b != replaced}
    same_rack = [b for b in allowed if topology.rack_of(b) == own]
    unused_rack = [b for b in allowed if topology.rack_of(b) not in used and b not in same_rack]
    ranked = spread(same_rack) + spread(unused_rack)
    if not rules.enforce_min_racks:
        rest = [b for b in allowed if b not in ranked]
        ranked += sorted(spread(rest), key=lambda b: bool(_short_with(fragment, replaced, b, rules, topology)))
    if not ranked:
        raise NoTarget(_no_rack_reason(span, own, used, outside, allowed, rules, topology))
    return ranked


def _inside_isolation_groups(ledger: LedgerMetadata, outside: list[str], writable: list[str],
                             topology: Topology) -> list[str]:
    try:
        isolation = ledger_isolation(ledger.custom_metadata)
    except PlacementConfigError as exc:
        raise NoTarget(f"{exc}: its bookie groups are unknown, so no bookie is known to be allowed") from None
    if isolation is None:
        return outside
    if topology.groups is None:
        raise NoTarget(f"the ledger's {isolation.describe()} are unknown here: Pulsar's /bookies was not read")
    excluded = isolation_excluded(isolation, topology.groups, writable, ledger.ensemble_size)
    allowed = [b for b in outside if b not in excluded]
    if not allowed:
        raise NoTarget(f"the ledger keeps its bookies inside {isolation.describe()}: none of the "
                       f"{len(outside)} writable bookies outside the ensemble is allowed ({', '.join(outside)})")
    return allowed


def _short_with(fragment: Fragment, replaced: str, candidate: str, rules: PlacementRules,
                topology: Topology) -> list[int]:
    ensemble = [candidate if b == replaced else b for b in fragment.bookies]
    return short_write_sets(ensemble, fragment.write_quorum, topology.rack_of, rules.min_racks,
                            rules.enforce_min_racks)


def _no_rack_reason(span: str, own: str, used: set[str], outside: list[str], allowed: list[str],
                    rules: PlacementRules, topology: Topology) -> str:
    seen = ", ".join(f"{b} in {topology.rack_of(b)}" for b in outside)
    dropped = " (those in the default rack excluded)" if len(allowed) < len(outside) else ""
    return (f"enforceMinNumRacksPerWriteQuorum (min {rules.min_racks} racks per write quorum): no writable bookie "
            f"outside the ensemble of {span} is in {own} (the replaced bookie's rack) or in a rack the rest of the "
            f"ensemble does not use ({', '.join(sorted(used))}); outside it: {seen}{dropped}")
