"""Prometheus metrics: the agent's state read at scrape time, the repair counters, the process and a
build-info metric, all in one registry of the agent's own.

Names follow Prometheus' rules (``promtool check metrics``): counters end in ``_total``, units are
base units spelled out at the end of the name.
"""

from __future__ import annotations

import platform

from prometheus_client import (CollectorRegistry, PlatformCollector, ProcessCollector, disable_created_metrics,
                               generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from scanner.envelope import tool_version
from scanner.agent.verdict import STATES
from scanner.repair.blast_radius import BREAKER_TRIPS
from scanner.repair.followup import ESCALATIONS, MOVES, UNREPAIRED

PREFIX = "bookie_scanner_"


class AgentCollector:
    """Turns one ``Agent.health()`` snapshot into metric families."""

    def __init__(self, health):
        self._health = health

    def collect(self):
        health = self._health()
        bookie = health["bookie_id"]

        def family(kind, name: str, doc: str, labels: tuple[str, ...] = ()):
            return kind(PREFIX + name, doc, labels=("bookie",) + labels)

        def single(kind, name: str, doc: str, value: float):
            metric = family(kind, name, doc)
            metric.add_metric([bookie], value)
            return metric

        def by_label(kind, name: str, doc: str, label: str, values: dict):
            metric = family(kind, name, doc, (label,))
            for key, value in values.items():
                metric.add_metric([bookie, key], value)
            return metric

        yield single(GaugeMetricFamily, "up", "0 while a scanner thread is failing, else 1",
                     0 if health["status"] == "failing" else 1)
        yield by_label(GaugeMetricFamily, "state", "1 for the agent's verdict (as /health's state says), 0 for the "
                       "others", "state", {state: int(state == health["state"]) for state in STATES})
        yield single(GaugeMetricFamily, "paused", "1 while scanning is paused by an operator", int(health["paused"]))
        if "zookeeper_connected" in health:
            yield single(GaugeMetricFamily, "zookeeper_connected", "1 while ZooKeeper answers",
                         int(health["zookeeper_connected"]))
        yield single(GaugeMetricFamily, "state_dir_writable", "0 while the state dir cannot be written (full, read-only)",
                     0 if health["state_dir_problem"] else 1)
        yield by_label(GaugeMetricFamily, "findings", "Open findings (the damage seen now), by category", "category",
                       health["findings"])
        yield by_label(CounterMetricFamily, "findings_recorded", "Findings opened (never seen, or seen again after "
                       "they ended) since start", "category", health["findings_new_since_start"])
        yield by_label(CounterMetricFamily, "findings_ended", "Findings ended since start: a later pass, a suspect's "
                       "scan or the repair follow-up showed the damage gone", "category",
                       health["findings_ended_since_start"])
        yield single(CounterMetricFamily, "digest_failures",
                     "Stored entries that failed verification (digest mismatch, or a record naming another entry), "
                     "each time a scan finds them", health["corrupt_entries_found"])
        yield single(GaugeMetricFamily, "suspects_queued", "Suspect ledgers and entry logs waiting to be scanned",
                     health["suspects_queued"])
        yield single(CounterMetricFamily, "suspects_dropped", "Suspects dropped because the queue was full",
                     health["suspects_dropped"])
        yield single(CounterMetricFamily, "suspects_failed", "Suspects dropped because their scan failed repeatedly",
                     health["suspects_failed"])
        marks = health["marks"]
        yield single(GaugeMetricFamily, "marks_awaiting", "Damaged ledgers recorded but not yet marked under-replicated",
                     marks["awaiting"])
        yield by_label(GaugeMetricFamily, "marks_tracked", "Marks this bookie filed and still follows, by stage",
                       "stage", marks["tracked"])
        yield single(CounterMetricFamily, "marks_filed", "Under-replication marks filed since start", marks["filed"])
        yield single(GaugeMetricFamily, "period_seconds", "Configured length of one full pass", health["period_seconds"])
        breaker = (health.get("repair") or {}).get("breaker") or {}
        yield single(GaugeMetricFamily, "repair_breaker_tripped",
                     "1 while moves are stopped because this bookie's disk looks failed", int(bool(breaker.get("tripped"))))
        for counter in (MOVES, ESCALATIONS, UNREPAIRED, BREAKER_TRIPS):
            yield _with_bookie(counter, bookie)
        yield from _scanner_metrics(health["scanners"], bookie)


def _with_bookie(counter, bookie: str) -> CounterMetricFamily:
    """The repair follow-up's counter (one per process, as one process follows one bookie) with the bookie's label."""
    family = CounterMetricFamily(PREFIX + counter._name.removeprefix(PREFIX), counter._documentation,
                                 labels=("bookie",))
    total = sum(sample.value for metric in counter.collect() for sample in metric.samples
                if sample.name.endswith("_total"))
    family.add_metric([bookie], total)
    return family


# health's per-scanner key -> (family, name, help)
_SCANNER_METRICS = {
    "pass_progress": (GaugeMetricFamily, "pass_progress", "Fraction of the current pass done (0..1)"),
    "passes_completed": (CounterMetricFamily, "passes_completed", "Full passes completed"),
    "bytes_per_second": (GaugeMetricFamily, "rate_bytes_per_second",
                         "Read rate the throttle allows now (configured rate, windows, disk back-off)"),
    "needed_bytes_per_second": (GaugeMetricFamily, "pass_needed_rate_bytes_per_second",
                                "Read rate that would finish the current pass within its period"),
    "eta_seconds": (GaugeMetricFamily, "pass_eta_seconds", "Estimated seconds until the pass ends"),
    "bytes_done": (GaugeMetricFamily, "pass_done_bytes", "Entry log bytes walked in this pass"),
    "bytes_total": (GaugeMetricFamily, "pass_size_bytes", "Entry log bytes to walk in this pass"),
    "pass_started": (GaugeMetricFamily, "pass_started_timestamp_seconds", "When the current pass started"),
    "last_pass_finished": (GaugeMetricFamily, "last_pass_finished_timestamp_seconds", "When the last full pass ended"),
    "next_pass_at": (GaugeMetricFamily, "next_pass_timestamp_seconds", "When the next pass starts (while waiting)"),
    "start_at": (GaugeMetricFamily, "pass_start_timestamp_seconds",
                 "When pass work begins after the start delay (while it waits for it)"),
    "last_progress": (GaugeMetricFamily, "last_progress_timestamp_seconds", "When the scanner last moved its cursor"),
    "suspects_scanned": (CounterMetricFamily, "suspects_scanned", "Suspects scanned since start"),
    "bytes_read": (CounterMetricFamily, "read_bytes", "Bytes read from the bookie's files since start"),
    "entries_verified": (CounterMetricFamily, "entries_verified",
                         "Entries whose digest the passes verified since start (sampled each second: "
                         "the last second of a pass may be missing)"),
}


def _scanner_metrics(scanners: list[dict], bookie: str):
    labels = ("bookie", "ledger_dir")
    families = {key: kind(PREFIX + name, doc, labels=labels) for key, (kind, name, doc) in _SCANNER_METRICS.items()}
    waiting = GaugeMetricFamily(PREFIX + "waiting", "1 while the pass is done and the next not yet due, or while pass "
                                "work waits for its random delay after a start", labels=labels)
    behind = GaugeMetricFamily(PREFIX + "pass_behind_schedule",
                               "1 while the configured rate cannot finish the pass within its period", labels=labels)
    for scanner in scanners:
        values = [bookie, scanner["ledger_dir"]]
        for key, family in families.items():
            if scanner[key] is not None:
                family.add_metric(values, scanner[key])
        waiting.add_metric(values, 1 if scanner["phase"] in ("waiting", "starting") else 0)
        behind.add_metric(values, 1 if scanner["behind_schedule"] else 0)
    yield from families.values()
    yield waiting
    yield behind


def _build_info() -> GaugeMetricFamily:
    info = GaugeMetricFamily(PREFIX + "build_info", "The running bookie-scanner's version (value 1)",
                             labels=("version", "python_version"))
    info.add_metric([tool_version(), platform.python_version()], 1)
    return info


class _Constant:
    """A collector yielding the same families at every scrape."""

    def __init__(self, *families):
        self._families = families

    def collect(self):
        return iter(self._families)


def agent_registry(health) -> CollectorRegistry:
    """A registry of the agent's own (not the process-wide default, which tests share) with every metric.

    Counters come without prometheus_client's ``_created`` series: a gauge per counter that only
    says when the process started, which Prometheus stores as one more series each.
    """
    disable_created_metrics()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(health))
    registry.register(_Constant(_build_info()))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
