"""The agent's metrics and alert rules as Prometheus' own tool judges them (Debian's ``prometheus``
package ships ``promtool``; ``./dev test`` installs it when missing)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from scanner.agent.verdict import STATES
from scanner.sample.sample_cluster import build_sample
from test_agent_service import REPO, AgentProcess, wait_for, write_config

RULES = REPO / "conf" / "prometheus-alerts.yml"
RULE_TESTS = REPO / "tests" / "prometheus" / "alert-rules.test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: install Debian's prometheus package (./dev test does)", pytrace=False)
    return path


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=120)


def test_the_alert_rules_are_valid_and_fire_as_their_tests_expect(promtool):
    checked = run(promtool, "check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run(promtool, "test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_metrics_pass_promtool_and_one_registry_serves_everything_named(tmp_path, promtool):
    sample = build_sample(tmp_path / "sample")
    # ~50 KB of entry logs at 20 KB/s: the pass spans the agent's once-a-second sampling of work done.
    config = write_config(tmp_path, sample, f"file:{sample.dump}", period_days=2 / 86400, bytes_per_second=20000)
    agent = AgentProcess(config, tmp_path / "state", tmp_path / "agent.err").start()
    try:
        agent.wait_ready()
        wait_for(lambda: agent.scanner()["passes_completed"] >= 1, 30, "no pass finished")
        # Work done is sampled once a second: the counter catches up with the pass (and the next one) soon after.
        logs_bytes = sum(p.stat().st_size for p in (sample.ledger_dir / "current").glob("*.log"))
        wait_for(lambda: _sample_value(agent.metrics(), "bookie_scanner_read_bytes_total") >= logs_bytes, 30,
                 "the read-bytes counter never reached the size of the entry logs")
        metrics = agent.metrics()
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
    checked = run(promtool, "check", "metrics", stdin=metrics)
    assert checked.returncode == 0 and not checked.stdout.strip() and not checked.stderr.strip(), checked
    families = set(re.findall(r"^# TYPE (\w+)", metrics, re.M))
    # Every metric the README names (`bookie_scanner_x`, or `..._x` for the same prefix) is exported.
    readme = (REPO / "README.md").read_text()
    promised = {"bookie_scanner_" + name for name in re.findall(r"`(?:bookie_scanner|\.\.\.)_(\w+)", readme)}
    assert promised <= families, promised - families
    named = {"bookie_scanner_repair_escalations_total", "bookie_scanner_unrepaired_ledgers_total",
             "bookie_scanner_fragments_moved_total", "bookie_scanner_state",
             "bookie_scanner_build_info", "process_resident_memory_bytes", "python_info",
             "bookie_scanner_read_bytes_total", "bookie_scanner_entries_verified_total",
             "bookie_scanner_digest_failures_total", "bookie_scanner_findings_recorded_total"}
    assert named <= families, named - families
    assert "bookie_scanner_zookeeper_connected" not in families  # the metadata is a dump
    assert not [line for line in metrics.splitlines() if "_created" in line]  # no series per counter saying when it began

    def value(sample: str) -> float:
        return float(re.search(rf"^{re.escape(sample)} (\S+)$", metrics, re.M).group(1))

    labels = f'bookie="10.20.0.11:3181",ledger_dir="{sample.ledger_dir}"'
    assert value(f"bookie_scanner_read_bytes_total{{{labels}}}") >= logs_bytes
    assert value(f"bookie_scanner_entries_verified_total{{{labels}}}") > 0
    assert value('bookie_scanner_digest_failures_total{bookie="10.20.0.11:3181"}') >= 1  # ledger 2's entry 7
    assert value('bookie_scanner_findings_recorded_total{bookie="10.20.0.11:3181",category="corrupt_entry"}') == 1
    for counter in ("fragments_moved_total", "repair_escalations_total", "unrepaired_ledgers_total"):
        assert value(f'bookie_scanner_{counter}{{bookie="10.20.0.11:3181"}}') == 0  # the bookie label, nothing moved
    # The verdict: one state at 1 (the sample's damage, marking off), every other at 0.
    assert value('bookie_scanner_state{bookie="10.20.0.11:3181",state="damaged"}') == 1
    assert sum(value(f'bookie_scanner_state{{bookie="10.20.0.11:3181",state="{state}"}}') for state in STATES) == 1
    dashboard = (REPO / "conf" / "grafana-dashboard.json").read_text()
    used = set(re.findall(r"bookie_scanner_\w+", dashboard + RULES.read_text()))
    assert used - {"bookie_scanner_zookeeper_connected"} <= families, used - families


def _sample_value(metrics: str, family: str) -> float:
    """The value of the family's first sample (0 when it has none yet)."""
    found = re.search(rf"^{family}(?:{{[^}}]*}})? (\S+)$", metrics, re.M)
    return float(found.group(1)) if found else 0.0
