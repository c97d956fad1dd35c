"""File-level damage of one entry log, as findings."""

from __future__ import annotations

from typing import Iterable

from scanner.checks.findings import Category, Finding
from scanner.storage.entrylog import EntryLogError, TruncatedRecord



def judge_entry_log(entry_log_id: int, problems: Iterable[EntryLogError], active: bool) -> list[Finding]:
    """``damaged_entry_log`` findings; ``active``: the bookie's current log (newest, no ledgers map yet)."""
    findings = []
    for problem in problems:
        # The log a bookie still appends to ends wherever its write buffer last reached the disk.
        if active and isinstance(problem, TruncatedRecord):
            continue
        findings.append(Finding(Category.DAMAGED_ENTRY_LOG, getattr(problem, "ledger_id", None), None,
                                entry_log_id, problem.offset, str(problem)))
    return findings
