"""One verdict for every signal: what ``scanner.agent.verdict`` decides from a health snapshot, the start
delay's draw kept across restarts, and a wrong metadata URI said as a configuration error."""

from __future__ import annotations

import json
import signal
import time

import pytest

from json_schemas import assert_valid
from livebk import free_ports
from scanner.agent.startdelay import FILE_NAME, KEEP_FOR_JITTERS, start_time
from scanner.agent.verdict import STATES, judge
from scanner.envelope import envelope
from scanner.sample.sample_cluster import build_sample
from test_agent_service import AgentProcess, cli, wait_for, write_config


def _health(**changes) -> dict:
    """A healthy agent's snapshot, as much of it as the verdict reads, with ``changes``."""
    health = {"status": "ok", "paused": False, "findings": {}, "state_dir_problem": None,
              "zookeeper_connected": True,
              "scanners": [{"ledger_dir": "/d", "phase": "entry_logs", "error": None, "stalled": False}],
              "marks": {"enabled": True, "awaiting": 0},
              "repair": {"following": []}}
    health.update(changes)
    return health


def _row(stage: str, failures: int = 0, marks_cleared: int = 0) -> dict:
    return {"ledger_id": 7, "stage": stage, "failures": failures, "marks_cleared": marks_cleared}


@pytest.mark.parametrize("changes, state, http", [
    ({}, "healthy", 200),
    ({"findings": {"orphan_ledger": 3}}, "healthy", 200),  # informational only
    ({"paused": True}, "paused", 200),
    ({"scanners": [{"ledger_dir": "/d", "phase": "starting", "start_at": 2e9, "error": None, "stalled": False}]},
     "starting", 200),
    ({"waiting_for_metadata": "waiting for the metadata service: no answer"}, "starting", 200),
    ({"zookeeper_connected": False}, "degraded", 503),
    ({"state_dir_problem": "cannot write x"}, "degraded", 503),
    ({"findings": {"corrupt_entry": 1}, "marks": {"enabled": True, "awaiting": 1}}, "damaged", 503),
    ({"findings": {"corrupt_entry": 1}, "marks": {"enabled": False, "awaiting": 0}}, "damaged", 503),
    ({"findings": {"corrupt_entry": 1}, "repair": {"following": [_row("deferred")]}}, "damaged", 503),
    ({"findings": {"corrupt_entry": 1}, "repair": {"following": [_row("marked")]}}, "marked", 503),
    ({"findings": {"corrupt_entry": 1}, "repair": {"following": [_row("marked", marks_cleared=1)]}},
     "repairing", 503),
    ({"findings": {"corrupt_entry": 1}, "repair": {"following": [_row("marked", failures=1)]}}, "repairing", 503),
    ({"findings": {"corrupt_entry": 1, "unrepaired": 1}, "repair": {"following": [_row("escalated", 3)]}},
     "escalated", 503),
    ({"findings": {"corrupt_entry": 1}, "scanners": [{"ledger_dir": "/d", "phase": "ledgers", "error": "OSError: x",
                                                        "stalled": False}]}, "failing", 503),
    ({"config_error": "ZooKeeper z answers but has no /ledger: wrong ledgers root?"}, "config_error", 503),
    # the failed-disk breaker: the operator's turn, whatever each ledger's stage
    ({"findings": {"corrupt_entry": 40}, "repair": {"following": [_row("marked")], "breaker": {
        "tripped": True, "figures": "damage open in 40 of 400 ledgers and 30 of 40 entry logs"}}}, "escalated", 503),
])
def test_the_verdict_is_the_most_urgent_state_that_applies_and_the_http_code_follows_it(changes, state, http):
    verdict = judge(_health(**changes))
    assert (verdict.state, verdict.http_status) == (state, http) and verdict.state in STATES
    assert verdict.exit_status == (0 if http == 200 else 2 if state == "config_error" else 1)
    assert (verdict.reason == "") == (state == "healthy")


def test_the_start_delay_is_drawn_once_kept_across_restarts_and_replaced_only_when_old(tmp_path):
    jitter = 600.0
    first = start_time(tmp_path, "/d", jitter, now=1000.0)
    assert 1000.0 <= first <= 1000.0 + jitter
    saved = json.loads((tmp_path / FILE_NAME).read_text())
    assert saved == {"/d": {"drawn_at": 1000.0, "start_at": first}}
    # A crash loop: every restart keeps the draw, so the pass is not put off again and again.
    assert [start_time(tmp_path, "/d", jitter, now=t) for t in (1010.0, 1200.0, 1590.0)] == [first] * 3
    # Past its time the pass starts at once; only a draw older than two jitters is replaced.
    assert start_time(tmp_path, "/d", jitter, now=1000.0 + KEEP_FOR_JITTERS * jitter - 1) == first
    later = 1000.0 + KEEP_FOR_JITTERS * jitter + 1
    assert later <= start_time(tmp_path, "/d", jitter, now=later) <= later + jitter
    # A lowered jitter caps a kept draw; none means at once; each dir has its own draw.
    start_time(tmp_path, "/e", jitter, now=5000.0)
    assert start_time(tmp_path, "/e", 1.0, now=5000.5) <= 5001.5
    assert start_time(tmp_path, "/e", 0.0, now=5000.5) == 5000.5
    (tmp_path / FILE_NAME).write_text("{not json")
    assert 6000.0 <= start_time(tmp_path, "/d", jitter, now=6000.0) <= 6000.0 + jitter  # damaged: drawn anew


@pytest.mark.slow
def test_a_zookeeper_without_the_ledgers_root_is_a_config_error_everywhere_then_exit_2(tmp_path, zookeeper,
                                                                                         zk_chroot):
    sample = build_sample(tmp_path / "sample")
    state_dir = tmp_path / "state"
    # /ledger for /ledgers: ZooKeeper answers, the root is not there.
    config = write_config(tmp_path, sample, f"zk://{zookeeper.connect_string}{zk_chroot}/ledger")
    # Tried every 5 s: it gives up at the third try, 10 s after the first (set from the environment, as a
    # container's would be).
    agent = AgentProcess(config, state_dir, tmp_path / "agent.err",
                         env={"BOOKIE_SCANNER_METADATA_MISCONFIGURED_EXIT_SECONDS": "8"}).start()
    try:
        wait_for(lambda: agent.address() and (agent.health() or {}).get("state") == "config_error", 30,
                 "no config_error")
        status, health = agent.answer("GET", "/health")
        assert status == 503 and "has no " in health["config_error"] and "/ledger" in health["state_reason"]
        # liveness: a restart would not end a configuration error, so /alive stays 200 and says why
        assert agent.answer("GET", "/alive") == (200, {"state": "config_error", "state_reason": health["state_reason"]})
        assert_valid(envelope("agent_status", health))
        shown = cli(config, "status")
        assert shown.returncode == 2, shown.stdout + shown.stderr
        assert "NEEDS ATTENTION: CONFIG ERROR" in shown.stdout and "wrong ledgers root" in shown.stdout
        assert "NOT connected yet: nothing is scanned" in shown.stdout and "cached metadata" not in shown.stdout
        assert 'bookie_scanner_state{bookie="10.20.0.11:3181",state="config_error"} 1.0' in agent.metrics()
        # Still so 8 s after: the agent gives up with exit 2 (the unit does not restart it).
        assert agent.process.wait(timeout=60) == 2
        assert "still so after 8s, giving up" in (tmp_path / "agent.err").read_text()
    finally:
        if agent.process.poll() is None:
            agent.kill()


def test_sigterm_while_the_metadata_service_does_not_answer_stops_at_once_and_says_so(tmp_path):
    sample = build_sample(tmp_path / "sample")
    (port,) = free_ports(1)  # nothing listens there: a wrong port
    config = write_config(tmp_path, sample, f"zk://127.0.0.1:{port}/ledgers")
    agent = AgentProcess(config, tmp_path / "state", tmp_path / "agent.err").start()
    try:
        health = wait_for(lambda: agent.address() and (h := agent.health()) and "did not answer" in h["state_reason"]
                          and h, 30, "the endpoint did not say why it waits")
        assert health["state"] == "starting" and "waiting for the metadata service" in health["state_reason"]
        assert health["scanners"] == [] and agent.answer("GET", "/health")[0] == 200
        assert "NOT connected yet" in cli(config, "status").stdout
        asked = time.monotonic()
        agent.process.send_signal(signal.SIGTERM)
        assert agent.process.wait(timeout=10) == 0
        assert time.monotonic() - asked < 4.0
        assert "SIGTERM received: stopping" in (tmp_path / "agent.err").read_text()
    finally:
        if agent.process.poll() is None:
            agent.kill()
