"""A fleet does not scan in step: each agent start delays pass work at random, each period is jittered."""

from __future__ import annotations

import json
import re
import statistics
import time

import pytest

from scanner.agent.schedule import jittered_period
from scanner.agent.startdelay import FILE_NAME
from scanner.sample.sample_cluster import build_sample
from test_agent_service import BOOKIE, AgentProcess, cli, wait_for, write_config


def test_a_jittered_period_stays_within_its_bounds_varies_and_keeps_its_mean():
    periods = [jittered_period(1000.0, 0.5, f"bookie|/data/ledgers|{n}") for n in range(2000)]
    assert all(500.0 <= p <= 1500.0 for p in periods)
    assert min(periods) < 550 and max(periods) > 1450  # spread over the whole range
    assert 970 < statistics.mean(periods) < 1030
    assert jittered_period(1000.0, 0.5, "same seed") == jittered_period(1000.0, 0.5, "same seed")  # restart-stable
    assert jittered_period(1000.0, 0.0, "any") == 1000.0


@pytest.mark.slow
def test_pass_work_waits_its_start_delay_suspects_do_not_and_the_next_pass_comes_a_jittered_period_later(tmp_path):
    sample = build_sample(tmp_path / "sample")
    state_dir = tmp_path / "state"
    # A start delay drawn from up to 10 days: pass work does not begin while the test looks.
    config = write_config(tmp_path, sample, f"file:{sample.dump}", start_jitter_minutes=10 * 24 * 60)
    agent = AgentProcess(config, state_dir, tmp_path / "agent.err").start()
    try:
        agent.wait_ready()
        scanner = agent.scanner()
        assert scanner["phase"] == "starting" and scanner["ledgers_total"] == 0
        start_at = scanner["start_at"]
        assert time.time() < start_at <= time.time() + 10 * 86400
        assert f"{sample.ledger_dir}: pass 1 starts " in cli(config, "status").stdout
        assert agent.health()["state"] == "starting"
        # A restart (a crash loop) keeps the draw: the first pass is not put off again.
        assert agent.terminate() == 0
        agent.start().wait_ready()
        assert agent.scanner()["start_at"] == start_at
        assert f'bookie_scanner_waiting{{bookie="{BOOKIE}",ledger_dir="{sample.ledger_dir}"}} 1.0' in agent.metrics()
        assert agent.post_suspect({"ledger": 2})["queued"] == 1
        wait_for(lambda: agent.scanner()["suspects_scanned"] == 1, 30, "the suspect waited for the start delay")
        assert agent.health()["findings"].get("corrupt_entry") == 1
        scanner = agent.scanner()
        assert scanner["phase"] == "starting" and scanner["ledgers_total"] == 0 and scanner["passes_completed"] == 0
        assert agent.terminate() == 0

        # Started again without a delay: the pass runs, and the next one is due a jittered period after it began.
        write_config(tmp_path, sample, f"file:{sample.dump}", period_jitter=0.5)
        agent.start().wait_ready()
        scanner = wait_for(lambda: (s := agent.scanner())["phase"] == "waiting" and s, 30, "no pass finished")
        period = jittered_period(86400.0, 0.5, f"{BOOKIE}|{sample.ledger_dir}|1")
        assert period != 86400.0
        assert scanner["next_pass_at"] == pytest.approx(scanner["pass_started"] + period)
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()


@pytest.mark.slow
def test_a_start_delay_drawn_before_a_restart_is_kept_and_the_pass_is_timed_from_when_it_began(tmp_path):
    sample = build_sample(tmp_path / "sample")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    # A draw made just before this start (as by a start that crashed): kept, not drawn again.
    start_at = time.time() + 5
    (state_dir / FILE_NAME).write_text(json.dumps({str(sample.ledger_dir): {"drawn_at": time.time(),
                                                                            "start_at": start_at}}))
    config = write_config(tmp_path, sample, f"file:{sample.dump}", start_jitter_minutes=60)
    agent = AgentProcess(config, state_dir, tmp_path / "agent.err").start()
    try:
        agent.wait_ready()
        assert agent.scanner()["start_at"] == start_at
        scanner = wait_for(lambda: (s := agent.scanner())["passes_completed"] == 1 and s, 30, "no pass finished")
        assert scanner["pass_started"] >= start_at  # not when the agent started, 5 s before
        finished = wait_for(lambda: re.search(r"pass 1 finished in (\d+)s", (tmp_path / "agent.err").read_text()),
                            10, "the pass's end was not logged")
        assert int(finished[1]) < 3, finished[0]
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
