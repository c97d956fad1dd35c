"""Ledgers the metadata no longer has: what a scan saw of them, reported once each (informational)."""

from __future__ import annotations

from dataclasses import dataclass, field

from scanner.checks.findings import Finding
from scanner.checks.ledger_check import orphan_finding


@dataclass
class OrphanTrace:
    """What a scan saw of a ledger the metadata no longer has."""

    indexed: int | None = None
    unreadable: int = 0
    logs: set[int] = field(default_factory=set)


def orphan_findings(*traces: dict[int, OrphanTrace]) -> list[Finding]:
    """One informational finding per ledger the metadata no longer has, in ledger order; a ledger seen by
    several parts of a scan (``traces``) is one finding with what each saw."""
    merged: dict[int, OrphanTrace] = {}
    for part in traces:
        for ledger_id, trace in part.items():
            seen = merged.setdefault(ledger_id, OrphanTrace())
            seen.indexed = trace.indexed if seen.indexed is None else seen.indexed
            seen.unreadable += trace.unreadable
            seen.logs |= trace.logs
    findings = []
    for ledger_id in sorted(merged):
        orphan = merged[ledger_id]
        finding = orphan_finding(ledger_id, orphan.indexed, orphan.unreadable, orphan.logs)
        if finding is not None:
            findings.append(finding)
    return findings
