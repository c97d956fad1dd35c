"""Racks (BookKeeper's network locations) of bookies, and the rule a write set's racks must meet.

Pure: a ``Topology`` is a snapshot (bookie id -> rack, and Pulsar's bookie groups when known); where it
comes from is ``sources``. A bookie without a rack is in BookKeeper's default rack, as its placement
policies put every bookie their resolver cannot place (``DNSResolverDecorator``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# NetworkTopology.DEFAULT_RACK: RackawareEnsemblePlacementPolicyImpl's default rack (the region-aware policy's is
# /default-region/default-rack).
DEFAULT_RACK = "/default-rack"
DEFAULT_MIN_RACKS = 2  # ClientConfiguration's default minNumRacksPerWriteQuorum


class RackSourceError(Exception):
    """Racks that cannot be read (a file, a script, Pulsar's /bookies); one line naming the source."""


@dataclass(frozen=True, slots=True)
class Topology:
    """Bookie id -> rack; ``groups``: Pulsar's bookie groups (group -> bookie ids), None when not read."""

    racks: Mapping[str, str] = field(default_factory=dict)
    groups: Mapping[str, frozenset[str]] | None = None

    def rack_of(self, bookie_id: str) -> str:
        return self.racks.get(bookie_id, DEFAULT_RACK)


def normalize_rack(text: str) -> str | None:
    """``text`` as a network location: a leading ``/`` added, a trailing one dropped; None for an empty one.

    Pulsar's rack mapping adds the missing ``/`` and takes an empty rack or ``/`` for "none" (the default rack);
    BookKeeper's NodeBase drops a trailing ``/``.
    """
    rack = text.strip()
    if rack in ("", "/"):
        return None
    rack = rack if rack.startswith("/") else "/" + rack
    return rack.rstrip("/")


def short_write_sets(ensemble: Sequence[str], write_quorum: int, rack_of: Callable[[str], str],
                     min_racks: int = DEFAULT_MIN_RACKS, enforce: bool = False) -> list[int]:
    """The ensemble positions whose write set breaks the rack rule, ascending.

    The rule of BookKeeper's rack-aware policy (``isEnsembleAdheringToPlacementPolicy``, which the Auditor's
    placement check applies): each write set spans at least ``min(write quorum, min_racks)`` racks and, with
    ``enforceMinNumRacksPerWriteQuorum``, has no bookie in the default rack.
    """
    size, needed = len(ensemble), min(write_quorum, min_racks)
    short = []
    for start in range(size):
        racks = {rack_of(ensemble[(start + k) % size]) for k in range(write_quorum)}
        if len(racks) < needed or (enforce and DEFAULT_RACK in racks):
            short.append(start)
    return short


def parse_rack_lines(text: str, source: str) -> dict[str, str]:
    """Bookie id -> rack from ``BOOKIE_ID RACK`` lines (``#`` starts a comment); RackSourceError on a bad line."""
    racks = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        rack = normalize_rack(words[1]) if len(words) == 2 else None
        if rack is None:
            raise RackSourceError(f"{source}:{number}: expected 'BOOKIE_ID RACK', got {line.strip()!r}")
        racks[words[0]] = rack
    return racks


def read_rack_file(path: Path) -> dict[str, str]:
    """Bookie id -> rack from a file of ``BOOKIE_ID RACK`` lines."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RackSourceError(f"cannot read the racks file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_rack_lines(text, str(path))
