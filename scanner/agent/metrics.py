"""Prometheus metrics, read from the agent's state at scrape time into the agent's own registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

PREFIX = "bookie_scanner_"


class AgentCollector:
    """Turns one ``Agent.health()`` snapshot into metric families."""

    def __init__(self, health):
        self._health = health

    def collect(self):
        health = self._health()
        bookie = health["bookie_id"]

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(PREFIX + name, doc, labels=("bookie",) + labels)

        up = gauge("up", "1 while the agent runs; 0 when a scanner thread is failing")
        up.add_metric([bookie], 0 if health["status"] == "degraded" and any(
            s["error"] for s in health["scanners"]) else 1)
        yield up
        paused = gauge("paused", "1 while scanning is paused by an operator")
        paused.add_metric([bookie], 1 if health["paused"] else 0)
        yield paused
        zookeeper = gauge("zookeeper_connected", "1 while the metadata store answers")
        zookeeper.add_metric([bookie], 1 if health["zookeeper_connected"] else 0)
        yield zookeeper
        findings = gauge("findings", "Distinct findings recorded, by category", ("category",))
        for category, count in health["findings"].items():
            findings.add_metric([bookie, category], count)
        yield findings
        queued = gauge("suspects_queued", "Suspect ledgers and entry logs waiting to be scanned")
        queued.add_metric([bookie], health["suspects_queued"])
        yield queued
        marks = health["marks"]
        awaiting = gauge("marks_awaiting", "Damaged ledgers recorded but not yet marked under-replicated")
        awaiting.add_metric([bookie], marks["awaiting"])
        yield awaiting
        tracked = gauge("marks_tracked", "Marks this bookie filed and still follows, by stage", ("stage",))
        for stage, count in marks["tracked"].items():
            tracked.add_metric([bookie, stage], count)
        yield tracked
        filed = CounterMetricFamily(PREFIX + "marks_filed", "Under-replication marks filed since start",
                                    labels=("bookie",))
        filed.add_metric([bookie], marks["filed"])
        yield filed
        period = gauge("period_seconds", "Configured length of one full pass")
        period.add_metric([bookie], health["period_seconds"])
        yield period
        yield from _scanner_metrics(health["scanners"], bookie)


def _scanner_metrics(scanners: list[dict], bookie: str):
    labels = ("bookie", "ledger_dir")
    families = {
        "pass_progress": GaugeMetricFamily(PREFIX + "pass_progress", "Fraction of the current pass done (0..1)", labels=labels),
        "passes_completed": CounterMetricFamily(PREFIX + "passes_completed", "Full passes completed", labels=labels),
        "bytes_per_second": GaugeMetricFamily(PREFIX + "rate_bytes_per_second", "Read rate the throttle allows now", labels=labels),
        "eta_seconds": GaugeMetricFamily(PREFIX + "pass_eta_seconds", "Estimated seconds until the pass ends", labels=labels),
        "bytes_done": GaugeMetricFamily(PREFIX + "pass_bytes_done", "Entry log bytes walked in this pass", labels=labels),
        "bytes_total": GaugeMetricFamily(PREFIX + "pass_bytes_total", "Entry log bytes to walk in this pass", labels=labels),
        "pass_started": GaugeMetricFamily(PREFIX + "pass_started_timestamp_seconds", "When the current pass started", labels=labels),
        "last_pass_finished": GaugeMetricFamily(PREFIX + "last_pass_finished_timestamp_seconds", "When the last full pass ended", labels=labels),
        "last_progress": GaugeMetricFamily(PREFIX + "last_progress_timestamp_seconds", "When the scanner last moved its cursor", labels=labels),
        "suspects_scanned": CounterMetricFamily(PREFIX + "suspects_scanned", "Suspects scanned since start", labels=labels),
    }
    waiting = GaugeMetricFamily(PREFIX + "waiting", "1 while the pass is done and the next not yet due", labels=labels)
    for scanner in scanners:
        values = [bookie, scanner["ledger_dir"]]
        for key, family in families.items():
            if scanner[key] is not None:
                family.add_metric(values, scanner[key])
        waiting.add_metric(values, 1 if scanner["phase"] == "waiting" else 0)
    yield from families.values()
    yield waiting


def agent_registry(health) -> CollectorRegistry:
    """A registry of its own (never the process-wide default) holding the agent's metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(health))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
