"""The scan report: JSON for machines, text for people, and the exit status that goes with it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scanner.checks.findings import Category, Finding, count_in_ranges
from scanner.envelope import envelope

EXIT_CLEAN = 0
EXIT_FINDINGS = 1


REPORT_KIND = "scan_report"


@dataclass
class ScanReport:
    bookie_id: str
    storage: str
    ledgers_checked: int = 0
    entry_logs_scanned: int = 0
    entries_verified: int = 0
    bytes_scanned: int = 0
    findings: list[Finding] = field(default_factory=list)
    ledger_names: dict[int, str] = field(default_factory=dict)  # what a damaged ledger holds (Pulsar's names)
    # Ledgers asked for by name that this bookie's index still has but no ensemble names it in (moved off): its copy
    # is stale, owed to no one, and was not judged.
    not_owed: list[int] = field(default_factory=list)

    def name_ledgers(self, store) -> None:
        """Look up, in ``store``, what each ledger with a finding belongs to (a Pulsar topic, cursor, schema)."""
        from scanner.metadata.ledger import MetadataFormatError
        from scanner.metadata.pulsar_names import pulsar_name

        for ledger_id in sorted({f.ledger_id for f in self.findings if f.ledger_id is not None}):
            try:
                meta = store.ledger(ledger_id)
            except MetadataFormatError:
                continue
            name = None if meta is None else pulsar_name(meta.custom_metadata)
            if name is not None:
                self.ledger_names[ledger_id] = name

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(f.category.value for f in self.findings).items()))

    @property
    def exit_status(self) -> int:
        return EXIT_FINDINGS if any(not f.category.informational for f in self.findings) else EXIT_CLEAN

    def to_json(self) -> dict:
        """The report as a JSON document in its envelope (see ``scanner.envelope``)."""
        return envelope(REPORT_KIND, {
            "bookie_id": self.bookie_id,
            "storage": self.storage,
            "summary": {
                "ledgers_checked": self.ledgers_checked,
                "entry_logs_scanned": self.entry_logs_scanned,
                "entries_verified": self.entries_verified,
                "bytes_scanned": self.bytes_scanned,
                "findings": self.counts(),
            },
            "findings": [{**f.to_json(), "ledger_name": self.ledger_names.get(f.ledger_id)}
                         for f in _ordered(self.findings)],
            "not_owed_ledgers": sorted(self.not_owed),
        })

    def to_text(self) -> str:
        lines = [
            f"bookie {self.bookie_id} ({self.storage} storage)",
            f"  ledgers checked     {self.ledgers_checked}",
            f"  entry logs scanned  {self.entry_logs_scanned}",
            f"  entries verified    {self.entries_verified}",
            f"  bytes scanned       {self.bytes_scanned}",
        ]
        for ledger_id in sorted(self.not_owed):
            lines.append(f"ledger {ledger_id}: this bookie is no longer in its ensemble (moved off): the copy still "
                         f"on disk is stale, owed to no one, not judged, and goes with the bookie's garbage collection")
        if not self.findings:
            lines.append("no findings: every entry this bookie owes is present and verifies" if not self.not_owed
                         else "no findings in what this bookie owes")
            return "\n".join(lines) + "\n"
        lines.append("findings: " + ", ".join(f"{k} {v}" for k, v in self.counts().items()))
        for finding in _ordered(self.findings):
            where = []
            if finding.ledger_id is not None:
                where.append(f"ledger {finding.ledger_id}")
                if finding.ledger_id in self.ledger_names:
                    where.append(f"({self.ledger_names[finding.ledger_id]})")
            if finding.entries:
                shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in finding.entries[:8])
                more = "" if len(finding.entries) <= 8 else f", ... ({count_in_ranges(finding.entries)} in all)"
                where.append(f"entries {shown}{more}")
            if finding.entry_log is not None:
                where.append(f"entry log {finding.entry_log} ({finding.entry_log:x}.log)")
            if finding.offset is not None:
                where.append(f"offset {finding.offset}")
            lines.append(f"  {finding.category.value:<18} {' '.join(where)}")
            lines.append(f"  {'':<18} {finding.detail}")
        return "\n".join(lines) + "\n"


def _ordered(findings: list[Finding]) -> list[Finding]:
    severity = {c: i for i, c in enumerate(Category)}
    return sorted(
        findings,
        key=lambda f: (severity[f.category], f.ledger_id if f.ledger_id is not None else -1,
                       f.entry_log if f.entry_log is not None else -1, f.offset or 0),
    )


def storage_problems(unreadable_indexes: Mapping[str, str], undecodable: Iterable[int]) -> list[Finding]:
    """Findings for what a scan could not look at: indexes that do not open, metadata that does not decode."""
    findings = [Finding(Category.UNREADABLE_INDEX, None, None, None, None,
                        f"{index_dir}: the index does not open ({why}); the ledgers of this ledger dir are reported "
                        "missing; if the entry logs are intact, rebuild the index with the bookie stopped")
                for index_dir, why in sorted(unreadable_indexes.items())]
    findings += [Finding(Category.NOT_JUDGED, ledger_id, None, None, None,
                         f"ledger {ledger_id}: its metadata znode does not decode, so its copy here was not judged")
                 for ledger_id in sorted(undecodable)]
    return findings
