"""A placement policy as the repair holds it: the rules, where racks and bookie groups are read, and the choice.

``replacement_candidates`` is what a move calls: the topology is read afresh for the bookies in question
(a rack file or ``/bookies`` edited, a bookie moved, counts at the next move), then ``choice`` decides.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from scanner.metadata.ledger import Fragment, LedgerMetadata
from scanner.metadata.store import MetadataStore
from scanner.repair.placement.choice import NoTarget, PlacementRules, rank_replacements
from scanner.repair.placement.racks import RackSourceError, Topology, read_rack_file
from scanner.repair.placement.sources import (DEFAULT_SCRIPT_ARGS, DEFAULT_SCRIPT_TIMEOUT, HostOf, legacy_host,
                                              parse_pulsar_bookies, pulsar_racks, script_racks)

RACKS_FILE, RACK_SCRIPT, PULSAR_RACKS = "file", "script", "pulsar"


@dataclass(frozen=True)
class PlacementPolicy:
    """``rules``; the rack source (``racks``: ``file``, ``script`` or ``pulsar``, None: every bookie in the
    default rack); ``store`` and ``bookies_path`` where Pulsar's ``/bookies`` is read (groups, and racks with
    ``pulsar``); ``host_of`` the host of a bookie's address (its registration's; by default the id's own)."""

    rules: PlacementRules = PlacementRules()
    racks: str | None = None
    racks_file: Path | None = None
    rack_script: Path | None = None
    script_args: int = DEFAULT_SCRIPT_ARGS
    script_timeout: float = DEFAULT_SCRIPT_TIMEOUT
    store: MetadataStore | None = field(default=None, compare=False)
    bookies_path: str | None = None
    host_of: HostOf = field(default=legacy_host, compare=False)

    def topology(self, bookies: Iterable[str]) -> Topology:
        """The racks of ``bookies`` and the bookie groups, read now; RackSourceError when a source fails."""
        bookies = set(bookies)
        listed = self._pulsar_bookies()
        groups = None if listed is None else {g: frozenset(members) for g, members in listed.items()}
        if self.racks == RACKS_FILE:
            racks = read_rack_file(self.racks_file)
        elif self.racks == RACK_SCRIPT:
            racks = script_racks(self.rack_script, bookies, self.host_of, self.script_args, self.script_timeout)
        elif self.racks == PULSAR_RACKS:
            racks = pulsar_racks(listed or {}, bookies, self.host_of)
        else:
            racks = {}
        return Topology(racks, groups)

    def _pulsar_bookies(self) -> dict[str, dict[str, str | None]] | None:
        if self.store is None or self.bookies_path is None:
            return None
        node = self.store.node(self.bookies_path)
        return {} if node is None else parse_pulsar_bookies(node.data or b"", self.bookies_path)


def replacement_candidates(ledger: LedgerMetadata, fragment: Fragment, replaced: str, writable: Iterable[str],
                           policy: PlacementPolicy) -> list[str]:
    """The writable bookies that may take ``replaced``'s place in ``fragment``, best first.

    Raises NoTarget (``reason``) when none may: none outside the ensemble, none inside the ledger's isolation
    groups, none the enforced rack rule allows, or racks that cannot be read now. MetadataUnavailable passes.
    """
    writable = set(writable)
    try:
        topology = policy.topology(writable | set(fragment.bookies) | {replaced})
    except RackSourceError as exc:
        raise NoTarget(f"racks unknown: {exc}") from None
    return rank_replacements(ledger, fragment, replaced, writable, policy.rules, topology)
