"""``[repair] heal = true``: the agent heals recorded damage from verified peer copies, and counts it.

Each cycle takes the findings recorded since the last one (lost, corrupt or missing entries), and
heals them as ``bookie-scanner heal --no-dry-run`` does (see ``scanner.heal``), journaling every
attempt in the state dir. A finding is done once each of its entries got a final answer (healed,
write-path damage, divergent replicas, or not healable here); failed and unresolved ones are tried
again after ``RETRY_SECONDS``. Nothing happens while ZooKeeper is unreachable. Which findings are done is kept in
memory: after a restart the recorded damage is healed once more, which rewrites the same verified
copies.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from prometheus_client.core import CounterMetricFamily

from scanner.agent.findingbook import FindingBook, finding_key
from scanner.agent.metrics import PREFIX
from scanner.heal.after_scan import heal_damage
from scanner.heal.healer import Action
from scanner.heal.verdict import Verdict
from scanner.metadata.store import MetadataUnavailable

log = logging.getLogger(__name__)
_RETRIED = {Action.FAILED}
ENTRIES_PER_CYCLE = 100  # keeps a cycle short, so stopping the agent never waits long on it
RETRY_SECONDS = 600.0  # a peer down or a bookie refusing: not worth asking again every cycle


class Healing:
    def __init__(self, metadata, book: FindingBook, bookie_id: str, state_dir, entries_per_second: float | None):
        self.metadata = metadata
        self.book = book
        self.bookie_id = bookie_id
        self.state_dir = state_dir
        self.entries_per_second = entries_per_second
        self.counts: Counter[tuple[str, str]] = Counter()  # results by (action, verdict) since start
        self._done: set[str] = set()
        self._retry_at: dict[str, float] = {}  # finding key -> monotonic time of its next try
        self._lock = threading.Lock()

    def heal_pending(self) -> int:
        """Heal what was recorded and not settled yet; the number of entries healed."""
        with self._lock:
            now = time.monotonic()
            pending = [f for f in self.book.findings()
                       if f.category.needs_rereplication and f.entries and finding_key(f) not in self._done
                       and self._retry_at.get(finding_key(f), now) <= now]
            if not pending or not self.metadata.connected:
                return 0
            try:
                report = heal_damage(self.metadata.store, self.bookie_id, pending, dry_run=False,
                                     state_dir=self.state_dir, entries_per_second=self.entries_per_second,
                                     max_entries=ENTRIES_PER_CYCLE)
            except MetadataUnavailable as exc:
                log.warning("heal cycle cut short (%s): will retry", exc)
                return 0
            judged = {r.ledger_id for r in report.results} | {n.ledger_id for n in report.not_healable}
            if report.left_over and report.results:
                judged.discard(report.results[-1].ledger_id)  # its last entries may be in the next share
            retry = {r.ledger_id for r in report.results if r.action in _RETRIED or r.verdict is Verdict.UNRESOLVED}
            # Findings of ledgers not judged (beyond this cycle's share) stay pending for the next cycle.
            for finding in pending:
                key = finding_key(finding)
                if finding.ledger_id in retry:
                    self._retry_at[key] = now + RETRY_SECONDS
                elif finding.ledger_id in judged:
                    self._done.add(key)
                    self._retry_at.pop(key, None)
            for r in report.results:
                self.counts[r.action.value, r.verdict.value] += 1
                level = logging.ERROR if r.verdict in (Verdict.DIVERGENT, Verdict.WRITE_PATH) else logging.WARNING
                log.log(level, "heal ledger %d entry %d: %s, %s: %s", r.ledger_id, r.entry_id, r.verdict.value,
                        r.action.value, r.detail)
            return sum(1 for r in report.results if r.action is Action.HEALED)

    def collect(self):
        """Prometheus: ``bookie_scanner_heals_total{action, verdict}``."""
        family = CounterMetricFamily(PREFIX + "heals", "Damaged entries the agent judged and healed, by outcome",
                                     labels=("bookie", "action", "verdict"))
        for (action, verdict), count in sorted(self.counts.items()):
            family.add_metric([self.bookie_id, action, verdict], count)
        yield family
