"""Every finding the agent has made, kept in the state dir, and the ones still waiting to be marked.

A finding met again in a later pass is the same finding (same category, place and entries): it
is counted once and handed to repair once. Marks are filed later, when the metadata answers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Callable

from scanner.checks.findings import Category, Finding, count_in_ranges
from scanner.statefile import DamagedStateFile, read_json, write_json

log = logging.getLogger(__name__)

FINDINGS_FILE = "findings.json"


def finding_key(finding: Finding) -> str:
    entries = "" if finding.entries is None else ",".join(f"{a}-{b}" for a, b in finding.entries)
    return f"{finding.category.value}|{finding.ledger_id}|{finding.entry_log}|{finding.offset}|{entries}"


class FindingBook:
    """Known findings (with when first and last seen) and the queue of those awaiting a mark; thread-safe."""

    def __init__(self, state_dir, clock: Callable[[], float] = time.time):
        self.path = state_dir / FINDINGS_FILE
        self._clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, dict] = {}
        self._to_mark: list[str] = []
        self.new_by_category: Counter[str] = Counter()  # findings never seen before, since start
        self.corrupt_entries_found = 0  # entries found corrupt, each time a scan finds them, since start
        self._load()

    def _load(self) -> None:
        try:
            raw = read_json(self.path) or {}
            known = {str(k): {"finding": Finding.from_json(v["finding"]), "first_seen": float(v["first_seen"]),
                              "last_seen": float(v["last_seen"])} for k, v in raw.get("known", {}).items()}
            to_mark = [str(k) for k in raw.get("to_mark", []) if k in known]
        except (DamagedStateFile, OSError, KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            log.warning("%s: damaged findings file, starting empty: %s", self.path, exc)
            return
        self._known, self._to_mark = known, to_mark

    def _save(self) -> None:
        write_json(self.path, {
            "known": {k: {"finding": v["finding"].to_json(), "first_seen": v["first_seen"],
                          "last_seen": v["last_seen"]} for k, v in self._known.items()},
            "to_mark": self._to_mark,
        })

    def record(self, findings: list[Finding]) -> list[Finding]:
        """Remember findings (saved before returning); returns the ones never seen before."""
        if not findings:
            return []
        now = self._clock()
        new = []
        with self._lock:
            for finding in findings:
                if finding.category is Category.CORRUPT_ENTRY and finding.entries:
                    self.corrupt_entries_found += count_in_ranges(finding.entries)
                key = finding_key(finding)
                entry = self._known.get(key)
                if entry is not None:
                    entry["last_seen"] = now
                    continue
                self._known[key] = {"finding": finding, "first_seen": now, "last_seen": now}
                new.append(finding)
                self.new_by_category[finding.category.value] += 1
                if finding.category.needs_rereplication:
                    self._to_mark.append(key)
            self._save()
        for finding in new:
            log.warning("finding: %s: %s", _place(finding), finding.detail)
        return new

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(Counter(v["finding"].category.value for v in self._known.values()).items()))

    def findings(self) -> list[Finding]:
        with self._lock:
            return [v["finding"] for v in self._known.values()]

    def awaiting_marks(self) -> list[Finding]:
        with self._lock:
            return [self._known[k]["finding"] for k in self._to_mark]

    def marked(self, findings: list[Finding]) -> None:
        """These were handed to repair (and its own state saved): not again."""
        done = {finding_key(f) for f in findings}
        with self._lock:
            self._to_mark = [k for k in self._to_mark if k not in done]
            self._save()


def _place(finding: Finding) -> str:
    """``corrupt_entry ledger 7 entry log 2``, naming only what the finding is about."""
    place = [finding.category.value]
    if finding.ledger_id is not None:
        place.append(f"ledger {finding.ledger_id}")
    if finding.entry_log is not None:
        place.append(f"entry log {finding.entry_log}")
    return " ".join(place)
