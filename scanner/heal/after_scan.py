"""From a scan's findings to heals: plan against fresh metadata, heal, and say what was done."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from scanner.checks.findings import EntryRanges, Finding, to_ranges
from scanner.heal.healer import Action, Healer, HealResult
from scanner.heal.journal import HealJournal
from scanner.heal.targets import NotHealable, damaged_entries, plan_heals
from scanner.heal.verdict import Verdict
from scanner.metadata.ledger import MetadataFormatError

DEFAULT_ENTRIES_PER_SECOND = 10.0
DEFAULT_MAX_ENTRIES = 10_000


@dataclass
class HealReport:
    bookie_id: str
    dry_run: bool
    results: list[HealResult] = field(default_factory=list)
    not_healable: list[NotHealable] = field(default_factory=list)
    left_over: int = 0  # healable entries beyond max_entries, for the next run

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(r.action.value for r in self.results).items()))

    def verdicts(self) -> dict[str, int]:
        return dict(sorted(Counter(r.verdict.value for r in self.results).items()))

    @property
    def settled(self) -> bool:
        """True when every damaged entry was healed (or, in a dry run, could be) and none is left over."""
        done = Action.WOULD_HEAL if self.dry_run else Action.HEALED
        return not self.not_healable and not self.left_over and all(r.action is done for r in self.results)

    def to_json(self) -> dict:
        return {"bookie_id": self.bookie_id, "dry_run": self.dry_run, "actions": self.counts(),
                "verdicts": self.verdicts(), "left_over": self.left_over,
                "results": [r.to_json() for r in self.results],
                "not_healable": [n.to_json() for n in self.not_healable]}

    def to_text(self) -> str:
        mode = "dry run: nothing written" if self.dry_run else "healing"
        lines = [f"heal of bookie {self.bookie_id} ({mode})"]
        # Entries of a ledger with the same outcome, for the same reason, on one line.
        grouped: dict[tuple, list[int]] = {}
        for r in self.results:
            grouped.setdefault((r.ledger_id, r.verdict, r.action, r.detail), []).append(r.entry_id)
        for (ledger_id, verdict, action, detail), entry_ids in grouped.items():
            loud = "DIVERGENT REPLICAS: " if verdict is Verdict.DIVERGENT else ""
            lines.append(f"  ledger {ledger_id} {_entries_text(to_ranges(entry_ids))}: {verdict.value}, "
                         f"{action.value}: {loud}{detail}")
        for n in self.not_healable:
            lines.append(f"  ledger {n.ledger_id} {_entries_text(n.entries)}: not healed here: {n.reason}")
        if self.left_over:
            lines.append(f"  {self.left_over} more healable entries left for the next run (--max-entries)")
        if len(lines) == 1:
            lines.append("  nothing to heal: no lost, corrupt or missing entries")
        else:
            lines.append("  " + ", ".join(f"{k} {v}" for k, v in self.counts().items()))
        return "\n".join(lines) + "\n"


def _entries_text(ranges: EntryRanges) -> str:
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges)
    return f"entry {text}" if ranges == ((ranges[0][0], ranges[0][0]),) else f"entries {text}"


def heal_damage(store, bookie_id: str, findings: list[Finding], *, dry_run: bool = True,
                state_dir: Path | None = None, entries_per_second: float | None = DEFAULT_ENTRIES_PER_SECOND,
                max_entries: int = DEFAULT_MAX_ENTRIES, timeout: float = 10.0) -> HealReport:
    """Heal what ``findings`` say is damaged on ``bookie_id`` from its peers (judge only, when ``dry_run``).

    The metadata is read fresh for every damaged ledger; every real attempt is journaled in ``state_dir``.
    """
    damage = damaged_entries(findings)
    metadata, undecodable = {}, []
    for ledger_id in list(damage):
        try:
            metadata[ledger_id] = store.ledger(ledger_id)
        except MetadataFormatError as exc:
            undecodable.append(NotHealable(ledger_id, damage.pop(ledger_id), f"its metadata does not decode: {exc}"))
    targets, not_healable = plan_heals(damage, metadata, bookie_id)
    report = HealReport(bookie_id, dry_run, not_healable=undecodable + not_healable,
                        left_over=max(0, len(targets) - max_entries))
    healer = Healer(bookie_id, dry_run=dry_run, entries_per_second=entries_per_second, timeout=timeout,
                    journal=HealJournal(state_dir) if state_dir is not None else None)
    report.results = asyncio.run(healer.heal(targets[:max_entries], metadata.__getitem__))
    return report
