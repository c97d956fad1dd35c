"""What a scan reports: findings, their categories, and entry ranges."""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass
from typing import Iterable


class Category(str, enum.Enum):
    """Finding categories, most severe first."""

    LOST_ENTRY = "lost_entry"  # the index says the entry is here, its record is gone: recovery may trust it
    CORRUPT_ENTRY = "corrupt_entry"  # BP-24 condition 3
    MISSING_LEDGER = "missing_ledger"  # BP-24 condition 1
    MISSING_ENTRY = "missing_entry"  # BP-24 condition 2
    DAMAGED_ENTRY_LOG = "damaged_entry_log"
    UNREADABLE_INDEX = "unreadable_index"  # a ledger dir's index (DbLedgerStorage's RocksDB) does not open
    UNREPAIRED = "unrepaired"  # a mark was cleared but the damaged copy is still referenced
    NOT_JUDGED = "not_judged"  # the ledger's metadata does not decode: nothing about it can be said
    ORPHAN_LEDGER = "orphan_ledger"  # informational: data of ledgers the metadata no longer has

    @property
    def informational(self) -> bool:
        return self is Category.ORPHAN_LEDGER

    @property
    def needs_rereplication(self) -> bool:
        return self in _REREPLICATE


_REREPLICATE = frozenset(
    {Category.LOST_ENTRY, Category.CORRUPT_ENTRY, Category.MISSING_LEDGER, Category.MISSING_ENTRY}
)

EntryRanges = tuple[tuple[int, int], ...]
_NO_ENTRY_ABOVE = 2**63  # sorts after every (first, last) with the same first


@dataclass(frozen=True, slots=True)
class Finding:
    category: Category
    ledger_id: int | None
    entries: EntryRanges | None  # inclusive [first, last] ranges; None when not about entries
    entry_log: int | None
    offset: int | None
    detail: str

    def to_json(self) -> dict:
        return {
            "category": self.category.value,
            "ledger_id": self.ledger_id,
            "entries": None if self.entries is None else [list(r) for r in self.entries],
            "entry_log": self.entry_log,
            "offset": self.offset,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, obj: dict) -> "Finding":
        entries = obj.get("entries")
        return cls(
            category=Category(obj["category"]),
            ledger_id=obj.get("ledger_id"),
            entries=None if entries is None else tuple((int(a), int(b)) for a, b in entries),
            entry_log=obj.get("entry_log"),
            offset=obj.get("offset"),
            detail=obj.get("detail", ""),
        )


def to_ranges(entry_ids: Iterable[int]) -> EntryRanges:
    """Inclusive ranges covering the given ids (any order, duplicates allowed)."""
    out: list[tuple[int, int]] = []
    for e in sorted(set(entry_ids)):
        if out and out[-1][1] == e - 1:
            out[-1] = (out[-1][0], e)
        else:
            out.append((e, e))
    return tuple(out)


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> EntryRanges:
    """Sorted, disjoint ranges covering ``ranges`` (which may overlap or touch); never one id at a time."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return tuple(out)


def count_in_ranges(ranges: EntryRanges) -> int:
    return sum(last - first + 1 for first, last in ranges)


def in_ranges(ranges: EntryRanges, entry_id: int) -> bool:
    """True when ``entry_id`` lies in one of ``ranges`` (sorted and disjoint, as ``to_ranges`` makes them)."""
    at = bisect.bisect_right(ranges, (entry_id, _NO_ENTRY_ABOVE)) - 1
    return at >= 0 and ranges[at][0] <= entry_id <= ranges[at][1]
