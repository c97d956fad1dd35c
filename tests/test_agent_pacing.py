"""Pacing as BP-24 has it: a pass at the configured rate, then idle until the period is over; a rate
that cannot finish a pass within the period is reported with the rate that would."""

from __future__ import annotations

import shutil
import time
from collections import Counter

import pytest

from corpus import CORPUS, corruption_report, scan, scan_args
from scanner.agent.schedule import pass_schedule
from scanner.units import duration_text, rate_text
from scanner.sample.sample_cluster import build_sample
from test_agent_service import AgentProcess, book_entries, cli, wait_for, write_config
from tree_state import snapshot

DUMP = CORPUS / "zk-dump.json"
DAMAGED_COPY = CORPUS / "corrupted" / "bookie1-corrupted" / "ledgers"
WEEK = 7 * 86400


@pytest.mark.slow
def test_at_the_configured_rate_every_injected_fault_is_on_health_within_bytes_over_rate_then_it_idles(
        tmp_path, capsys):
    ledgers = tmp_path / "bookie1" / "ledgers"
    shutil.copytree(DAMAGED_COPY, ledgers)
    before = snapshot(ledgers)
    log_bytes = sum(p.stat().st_size for p in (ledgers / "current").glob("*.log"))
    _, offline = scan(capsys, *scan_args("bookie1", ledgers), "--metadata", f"file:{DUMP}")
    expected = dict(Counter(f["category"] for f in offline["findings"]))
    rate = 400_000
    config = write_config(tmp_path, None, f"file:{DUMP}", period_days=7, bytes_per_second=rate,
                          bookie={"conf": str(CORPUS / "bookie-configs" / "bookie1.conf"),
                                  "ledger_dirs": [str(ledgers)]})
    agent = AgentProcess(config, tmp_path / "state", tmp_path / "agent.err")
    started = time.monotonic()
    agent.start()
    try:
        agent.wait_ready()
        health = wait_for(lambda: (h := agent.health()) and h["findings"] == expected and h, 60,
                          f"the agent's findings never matched an offline scan's: {expected}")
        elapsed = time.monotonic() - started
        scanner = wait_for(lambda: (s := agent.scanner())["phase"] == "waiting" and s, 10, "the pass did not end")
        read = scanner["bytes_read"]
        # Each log read once, front to back: its records (not its header and ledgers map) pass the throttle.
        assert 0.9 * log_bytes <= read <= log_bytes
        # Every entry the pass verified is counted, those of its last stretch too (as an offline scan counts them).
        assert scanner["entries_verified"] == offline["summary"]["entries_verified"] > 0
        # At the configured rate: not faster (the throttle holds), and all the damage within bytes / rate + a few s.
        assert log_bytes / rate * 0.8 <= elapsed <= read / rate + 8, (elapsed, read, log_bytes)
        assert health["status"] == "ok" and "zookeeper_connected" not in health  # a dump, not ZooKeeper
        experiment = next(e for e in corruption_report()["experiments"] if e["copy_dir"].endswith("bookie1-corrupted"))
        faults = {f["kind"]: f for f in experiment["faults"]}
        found = {(item["finding"]["category"], item["finding"]["ledger_id"], item["finding"]["entry_log"])
                 for item in book_entries(tmp_path / "state")}
        assert ("corrupt_entry", faults["payload_byte_flip"]["ledger_id"], 0) in found
        assert ("damaged_entry_log", None, 1) in found  # the truncated 1.log
        assert ("missing_ledger", faults["index_file_deleted"]["ledger_id"], None) in found
        # Done: idle until a period after the pass started, reading nothing, and saying when the next starts.
        assert scanner["passes_completed"] == 1
        assert scanner["next_pass_at"] == scanner["pass_started"] + WEEK
        time.sleep(2)
        idle = agent.scanner()
        assert (idle["phase"], idle["bytes_read"], idle["passes_completed"]) == ("waiting", read, 1)
        status = cli(config, "status")
        assert "pass 1 done; the next starts " + time.strftime("%Y-%m-%d", time.localtime(
            scanner["next_pass_at"])) in status.stdout
        assert status.returncode == 1 and "NEEDS ATTENTION: DAMAGED" in status.stdout
        assert "zookeeper" not in status.stdout
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
    assert snapshot(ledgers) == before


def test_a_rate_too_low_for_the_period_is_reported_with_the_rate_that_would_do(tmp_path):
    sample = build_sample(tmp_path / "sample")
    log_bytes = sum(p.stat().st_size for p in (sample.ledger_dir / "current").glob("*.log"))
    # ~50 KB of entry logs, a 20 s period, 1000 B/s: the pass needs about 2.5 KB/s.
    config = write_config(tmp_path, sample, f"file:{sample.dump}", period_days=20 / 86400, bytes_per_second=1000)
    agent = AgentProcess(config, tmp_path / "state", tmp_path / "agent.err").start()
    try:
        agent.wait_ready()
        scanner = wait_for(lambda: (s := agent.scanner())["behind_schedule"] and s, 20, "never behind schedule")
        assert 1000 < scanner["needed_bytes_per_second"] <= log_bytes / 15
        metrics = agent.metrics()
        assert "bookie_scanner_pass_behind_schedule{" in metrics and metrics.count("behind_schedule{") == 1
        assert [line for line in metrics.splitlines() if line.startswith("bookie_scanner_pass_behind_schedule{")
                ][0].endswith(" 1.0")
        status = cli(config, "status").stdout
        assert "BEHIND SCHEDULE: needs " in status and "B/s to end within its period" in status
        wait_for(lambda: "cannot end by" in (tmp_path / "agent.err").read_text(), 10, "no log line says so")
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
    lines = [line for line in (tmp_path / "agent.err").read_text().splitlines() if "cannot end by" in line]
    assert len(lines) == 1 and "bytes_per_second = 1.0 kB/s" in lines[0] and "it needs" in lines[0], lines


def test_the_schedule_of_a_pass():
    # 1 MB left, 1000 s left: 1000 B/s needed; a cap of 500 is behind, one of 2000 is not.
    assert pass_schedule("entry_logs", 0.0, 0, 1_000_000, 1000.0, 500.0, 0.0).behind
    on_time = pass_schedule("entry_logs", 0.0, 500_000, 1_000_000, 1000.0, 2000.0, 500.0)
    assert (on_time.needed_bytes_per_second, on_time.behind, on_time.next_pass_at) == (1000.0, False, None)
    assert not pass_schedule("ledgers", 0.0, 0, 10**12, 1000.0, None, 1.0).behind  # unlimited
    late = pass_schedule("entry_logs", 0.0, 0, 10, 1000.0, 1e9, 1001.0)
    assert late.behind and late.needed_bytes_per_second is None
    waiting = pass_schedule("waiting", 100.0, 10, 10, 1000.0, 1.0, 400.0)
    assert (waiting.next_pass_at, waiting.behind) == (1100.0, False)
    assert pass_schedule("waiting", 100.0, 10, 10, 1000.0, 1.0, 5000.0).next_pass_at == 5000.0  # overdue: now


def test_rates_and_durations_read_as_a_person_reads_them():
    assert [rate_text(r) for r in (None, 512, 150_000, 50_000_000, 3 * 2**30, 5 * 10**12)] == [
        "unlimited", "512 B/s", "150.0 kB/s", "50.0 MB/s", "3.2 GB/s", "5000.0 GB/s"]  # SI, as rates are written
    assert [duration_text(s) for s in (0, 4 * 60 + 10, 86399, 86400, 2.5 * 86400)] == [
        "00:00:00", "00:04:10", "23:59:59", "1.0 days", "2.5 days"]
