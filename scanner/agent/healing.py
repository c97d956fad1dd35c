"""``[repair] heal = true``: the agent heals recorded damage from verified peer copies, and counts it.

Each cycle takes the findings recorded since the last one (lost, corrupt or missing entries), and
heals them as ``bookie-scanner heal --no-dry-run`` does (see ``scanner.heal``), journaling every
attempt in the state dir. A finding is done once each of its entries got a final answer (healed,
write-path damage, divergent replicas, or not healable here); failed and unresolved ones are tried
again next cycle. Nothing happens while ZooKeeper is unreachable. Which findings are done is kept in
memory: after a restart the recorded damage is healed once more, which rewrites the same verified
copies.
"""

from __future__ import annotations

import logging
import threading
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


class Healing:
    def __init__(self, metadata, book: FindingBook, bookie_id: str, state_dir, entries_per_second: float | None):
        self.metadata = metadata
        self.book = book
        self.bookie_id = bookie_id
        self.state_dir = state_dir
        self.entries_per_second = entries_per_second
        self.counts: Counter[tuple[str, str]] = Counter()  # results by (action, verdict) since start
        self._done: set[str] = set()
        self._lock = threading.Lock()

    def heal_pending(self) -> int:
        """Heal what was recorded and not settled yet; the number of entries healed."""
        with self._lock:
            pending = [f for f in self.book.findings()
                       if f.category.needs_rereplication and f.entries and finding_key(f) not in self._done]
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
            retry = {r.ledger_id for r in report.results if r.action in _RETRIED or r.verdict is Verdict.UNRESOLVED}
            retry |= {f.ledger_id for f in pending if f.ledger_id not in judged}  # beyond this cycle's share
            if report.left_over and report.results:
                retry.add(report.results[-1].ledger_id)  # its last entries may be in the next share
            self._done |= {finding_key(f) for f in pending if f.ledger_id not in retry}
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
