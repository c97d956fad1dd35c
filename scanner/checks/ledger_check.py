"""BP-24 conditions for one ledger: what this bookie must hold versus what its index and logs show.

Pure: the scan gathers the evidence (index contents, records that did not read back), this module
judges it against the ledger's metadata.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from scanner.checks.findings import Category, Finding, count_in_ranges, to_ranges
from scanner.metadata.ledger import Fragment, LedgerMetadata


@dataclass(frozen=True, slots=True)
class RecordFault:
    """An entry the local index lists whose record did not read back as that entry."""

    entry_id: int
    entry_log: int | None
    offset: int | None
    lost: bool  # True: record gone, cut or unreadable; False: record there but wrong (digest, header)
    reason: str


@dataclass(frozen=True, slots=True)
class LedgerEvidence:
    """What one bookie's storage shows of one ledger."""

    ledger_id: int
    indexed: Sequence[int] | None  # entry ids in the local index, ascending; None = no index for the ledger
    faults: tuple[RecordFault, ...] = ()
    # Only gathered when the index is missing: entries whose records still sit in the entry logs.
    logged_entries: Sequence[int] = ()
    logged_in: tuple[int, ...] = field(default=())
    index_problem: str | None = None  # why the index of the ledger could not be read, when it could not


def judge_ledger(meta: LedgerMetadata | None, bookie_id: str, evidence: LedgerEvidence) -> list[Finding]:
    """Findings for one ledger on the bookie ``bookie_id``."""
    if meta is None:
        return []  # a deleted ledger: its leftovers are reported once, by orphan_finding
    fragments = _own_fragments(meta, bookie_id)
    findings = _damaged_records(fragments, bookie_id, evidence.ledger_id, evidence.faults)
    required = _required_entries(fragments, bookie_id)
    if evidence.indexed is None:
        if required:
            findings.append(_missing_ledger(meta, required, evidence))
        return findings
    indexed = set(evidence.indexed)
    missing = [e for e in required if e not in indexed]
    if missing:
        findings.append(_missing_entries(meta, fragments, bookie_id, missing))
    return findings


def judge_record_faults(
    meta: LedgerMetadata | None, bookie_id: str, ledger_id: int, faults: tuple[RecordFault, ...]
) -> list[Finding]:
    """Findings for records of one ledger that failed their digest or header check in an entry-log walk."""
    if meta is None:
        return []
    return _damaged_records(_own_fragments(meta, bookie_id), bookie_id, ledger_id, faults)


def orphan_finding(ledger_id: int, indexed: int | None, unreadable: int, logs: Iterable[int]) -> Finding | None:
    """The informational finding for data of a ledger the metadata no longer has."""
    logs = sorted(logs)
    parts = []
    if indexed is not None:
        parts.append(f"{indexed} entries in the local index")
    if logs:
        parts.append("records in entry log(s) " + ", ".join(str(i) for i in logs))
    if unreadable:
        parts.append(f"{unreadable} indexed records unreadable")
    if not parts:
        return None
    detail = "no ledger metadata (deleted): " + "; ".join(parts) + "; garbage collection reclaims it"
    return Finding(Category.ORPHAN_LEDGER, ledger_id, None, None, None, detail)


def _own_fragments(meta: LedgerMetadata, bookie_id: str) -> list[Fragment]:
    return [f for f in meta.fragments() if f.bookie_index(bookie_id) is not None]


def _judged(fragment: Fragment) -> bool:
    # An OPEN / IN_RECOVERY ledger's last fragment has no known end: the writer may still add to it.
    return fragment.last_entry_id is not None


def _required_entries(fragments: list[Fragment], bookie_id: str) -> list[int]:
    required: list[int] = []
    for fragment in fragments:
        if _judged(fragment):
            required.extend(fragment.entries_of(fragment.bookie_index(bookie_id)))
    return required


def _fragment_of(fragments: list[Fragment], entry_id: int) -> Fragment | None:
    for fragment in reversed(fragments):
        if entry_id >= fragment.first_entry_id:
            if fragment.last_entry_id is not None and entry_id > fragment.last_entry_id:
                return None
            return fragment
    return None


def _owed(fragments: list[Fragment], bookie_id: str, entry_id: int) -> bool:
    """Whether this bookie is in the write set of ``entry_id`` (an unjudged open fragment included)."""
    fragment = _fragment_of(fragments, entry_id)
    return fragment is not None and fragment.holds(fragment.bookie_index(bookie_id), entry_id)


def _damaged_records(
    fragments: list[Fragment], bookie_id: str, ledger_id: int, faults: tuple[RecordFault, ...]
) -> list[Finding]:
    # A fault in a copy the ledger no longer needs (past the last entry, an old ensemble) is not damage.
    lost_by_log: dict[int | None, list[RecordFault]] = defaultdict(list)
    findings: list[Finding] = []
    for fault in faults:
        if not _owed(fragments, bookie_id, fault.entry_id):
            continue
        if fault.lost:
            lost_by_log[fault.entry_log].append(fault)
        else:
            findings.append(
                Finding(
                    Category.CORRUPT_ENTRY,
                    ledger_id,
                    ((fault.entry_id, fault.entry_id),),
                    fault.entry_log,
                    fault.offset,
                    f"entry {fault.entry_id}: {fault.reason}",
                )
            )
    for entry_log, faults in lost_by_log.items():
        faults.sort(key=lambda f: f.entry_id)
        ranges = to_ranges(f.entry_id for f in faults)
        findings.append(
            Finding(
                Category.LOST_ENTRY,
                ledger_id,
                ranges,
                entry_log,
                faults[0].offset,
                f"the index lists {count_in_ranges(ranges)} entries whose records are gone or unreadable "
                f"(first: entry {faults[0].entry_id}: {faults[0].reason}); this bookie would answer "
                "reads of them with errors while its index claims them",
            )
        )
    return findings


def _missing_ledger(meta: LedgerMetadata, required: list[int], evidence: LedgerEvidence) -> Finding:
    ranges = to_ranges(required)
    why = f"the index is unreadable ({evidence.index_problem})" if evidence.index_problem else "no local index"
    detail = f"{why} for ledger {meta.ledger_id}; the metadata places {len(required)} entries on this bookie"
    still_logged = set(evidence.logged_entries).intersection(required)
    if still_logged:
        logs = ", ".join(str(i) for i in sorted(evidence.logged_in))
        detail += (
            f"; {len(still_logged)} of them still sit in entry log(s) {logs}: rebuilding the index "
            "would restore them without re-replication"
        )
    return Finding(Category.MISSING_LEDGER, meta.ledger_id, ranges, None, None, detail)


def _missing_entries(meta: LedgerMetadata, fragments: list[Fragment], bookie_id: str, missing: list[int]) -> Finding:
    ranges = to_ranges(missing)
    spans = sorted({f.index for e in missing for f in [_fragment_of(fragments, e)] if f is not None})
    detail = (
        f"{len(missing)} entries the write sets assign to {bookie_id} are not in the local index "
        f"(ensemble segment(s) {', '.join(str(i) for i in spans)} of {len(meta.segments)})"
    )
    return Finding(Category.MISSING_ENTRY, meta.ledger_id, ranges, None, None, detail)
