"""What an operator (or a careless or hostile client) meets at the agent's edges: health a probe can
use, a state dir that is refused before anything is written or that stops accepting writes, a busy
port, bad request bodies and ids, and logs that stay readable under floods."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat

import pytest

from scanner.agent.endpoint import READ_TIMEOUT_SECONDS
from scanner.agent.lograte import RateLimitedLog
from scanner.commands.run import log_format
from scanner.sample.sample_cluster import build_sample
from test_agent_service import AgentProcess, cli, wait_for, write_config
from threads import run_in_thread
from tree_state import snapshot

TOO_BIG = 2**63  # one past the largest ledger id a bookie can hold


@pytest.fixture
def sample(tmp_path):
    return build_sample(tmp_path / "sample")


@pytest.fixture
def running(tmp_path, sample):
    """A started agent on the sample bookie (dump metadata) that is done with its first pass."""
    config = write_config(tmp_path, sample, f"file:{sample.dump}", period_days=7, suspect_limit=20)
    agent = AgentProcess(config, tmp_path / "state", tmp_path / "agent.err").start()
    agent.config_path = config
    try:
        agent.wait_ready()
        wait_for(lambda: agent.scanner()["phase"] == "waiting", 30, "the first pass did not end")
        yield agent
    finally:
        if agent.process.poll() is None:
            agent.kill()


def one_line_exit_2(done) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr


def raw_request(address: str, head: bytes, body: bytes = b"", half_close: bool = False) -> tuple[int, dict]:
    """Send bytes as they are (no client library fixing them up); the status and JSON answered."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(head + body)
        if half_close:
            conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


def post_head(length: int) -> bytes:
    return (f"POST /suspects HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\nConnection: close\r\n\r\n").encode()


# -- health a probe can use ----------------------------------------------------------------------


def test_unsaved_state_is_503_everywhere_changes_nothing_and_health_says_why(tmp_path, running):
    agent, state = running, tmp_path / "state"
    # The sample's damage found (marking is off): the verdict is damaged, and /health says so with 503.
    wait_for(lambda: agent.health()["state"] == "damaged", 30, "the sample's damage was not found")
    status, health = agent.answer("GET", "/health")
    assert status == 503 and health["status"] == "ok" and "marking is off" in health["state_reason"]
    # Something in the way of the suspect queue's and the pause's files: their writes fail, as on a full disk.
    (state / "suspects.json").unlink(missing_ok=True)
    (state / "suspects.json").mkdir()
    (state / "paused").mkdir()
    status, answer = agent.answer("POST", "/suspects", {"ledger": 4})
    assert status == 503 and "nothing changed" in answer["error"]
    status, answer = agent.answer("POST", "/pause")
    assert status == 503
    status, health = agent.answer("GET", "/health")
    assert status == 503 and health["status"] == "degraded" and health["state"] == "damaged"
    assert health["suspects_queued"] == 0 and health["paused"] is False  # nothing changed in memory
    assert "cannot write" in health["state_dir_problem"]
    shown = cli(agent.config_path, "status")
    assert shown.returncode == 1 and "NEEDS ATTENTION: DAMAGED" in shown.stdout and "NOT SAVED" in shown.stdout
    assert 'bookie_scanner_state_dir_writable{bookie="10.20.0.11:3181"} 0.0' in agent.metrics()
    # Cleared: the same requests succeed and health is 200 again.
    (state / "suspects.json").rmdir()
    (state / "paused").rmdir()
    assert agent.answer("POST", "/suspects", {"ledger": 4}) == (202, {"queued": 1})
    assert cli(agent.config_path, "pause").returncode == 0 and cli(agent.config_path, "resume").returncode == 0
    wait_for(lambda: agent.health()["status"] == "ok", 10, "health did not recover")
    assert agent.terminate() == 0
    assert "Traceback" not in (tmp_path / "agent.err").read_text()


# -- the state dir -------------------------------------------------------------------------------


def test_a_state_dir_inside_the_bookie_is_refused_by_every_writer_before_anything_is_created(tmp_path, sample):
    bookie = sample.root / "bookie"
    before = snapshot(bookie)
    config = write_config(tmp_path, sample, f"file:{sample.dump}", state_dir=str(sample.ledger_dir / "scanstate"))
    for command in (("run",), ("suspect", "--ledger", "4"), ("pause",), ("resume",)):
        done = cli(config, *command)
        one_line_exit_2(done)
        assert "lies inside bookie dir" in done.stderr
    assert snapshot(bookie) == before and not (sample.ledger_dir / "scanstate").exists()


def test_an_unusable_state_dir_is_one_line_and_exit_2(tmp_path, sample):
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the state dir should be\n")
    config = write_config(tmp_path, sample, f"file:{sample.dump}", state_dir=str(blocked))
    for command in (("run",), ("suspect", "--entry-log", "1"), ("pause",)):
        done = cli(config, *command)
        one_line_exit_2(done)
        assert "state dir" in done.stderr and "not usable" in done.stderr


def test_state_files_are_private_and_temp_files_of_interrupted_writes_are_removed_at_start(tmp_path, sample):
    state = tmp_path / "state"
    state.mkdir()
    leftovers = [state / ".cursor-0.json.k3j9.tmp", state / ".suspects.json.a1b2.tmp"]
    for path in leftovers:
        path.write_text("{\"half\": ")
    config = write_config(tmp_path, sample, f"file:{sample.dump}")
    assert "left in" in cli(config, "suspect", "--ledger", "4").stdout  # the inbox, written while no agent runs
    agent = AgentProcess(config, state, tmp_path / "agent.err").start()
    try:
        agent.wait_ready()
        wait_for(lambda: agent.scanner()["phase"] == "waiting", 30, "the first pass did not end")
        assert not any(path.exists() for path in leftovers)
        assert cli(config, "pause").returncode == 0
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
    files = [p for p in state.iterdir() if p.is_file()]
    assert {"cursor-0.json", "suspects.json", "findings.db", "paused", "suspects.inbox"} <= {p.name for p in files}
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in files} == {p.name: 0o600 for p in files}


# -- the endpoint --------------------------------------------------------------------------------


def test_a_busy_listen_port_is_one_line_and_exit_2(tmp_path, sample):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path, sample, f"file:{sample.dump}", listen=f"127.0.0.1:{port}")
        done = cli(config, "run")
    one_line_exit_2(done)
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "in use" in done.stderr


@pytest.mark.slow
def test_bad_bodies_and_ids_are_400_and_change_nothing(tmp_path, running):
    agent = running
    address = agent.address()
    body = b'{"ledger": 4}'
    # A client that stops sending mid-body holds no handler for good: it is answered after the read timeout.
    stalled, stalled_answer = run_in_thread(lambda: raw_request(address, post_head(len(body) + 50), body))
    deep = b"[" * 60000
    status, answer = raw_request(address, post_head(len(deep)), deep)
    assert status == 400 and "nested deeper" in answer["error"]
    # The body promises more than it holds: refused once the client stops sending, never acted on.
    status, answer = raw_request(address, post_head(len(body) + 50), body, half_close=True)
    assert status == 400 and "ended after 13 of the 63 bytes" in answer["error"]
    for ledger in (TOO_BIG, 2**64, -1):
        status, answer = agent.answer("POST", "/suspects", {"ledger": ledger})
        assert status == 400 and "9223372036854775807" in answer["error"]
    assert agent.answer("POST", "/suspects", {"ledger": TOO_BIG - 1})[0] == 202  # the largest id is fine
    stalled.join(READ_TIMEOUT_SECONDS + 5)
    status, answer = stalled_answer["value"]
    assert status == 400 and "did not arrive within 10s" in answer["error"]
    assert stalled_answer["elapsed"] < READ_TIMEOUT_SECONDS + 3
    health = agent.health()
    assert health["status"] == "ok" and "ledger:4@0" not in health["suspects_recent"]
    done = cli(agent.config_path, "suspect", "--ledger", str(TOO_BIG))
    one_line_exit_2(done)
    assert agent.terminate() == 0
    done = cli(agent.config_path, "suspect", "--ledger", str(TOO_BIG))  # nobody answers: not left in the inbox
    one_line_exit_2(done)
    assert not (tmp_path / "state" / "suspects.inbox").exists()
    assert "Traceback" not in (tmp_path / "agent.err").read_text()


# -- logs ----------------------------------------------------------------------------------------


def test_pause_resume_reload_and_stop_are_each_one_info_line(tmp_path, running):
    agent = running
    assert agent.answer("POST", "/pause")[0] == 200 and agent.answer("POST", "/resume")[0] == 200
    agent.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "configuration reloaded" in (tmp_path / "agent.err").read_text(), 10, "SIGHUP not seen")
    assert agent.terminate() == 0
    lines = (tmp_path / "agent.err").read_text().splitlines()
    for event in ("scanning paused", "scanning resumed", "configuration reloaded from", "SIGTERM received"):
        said = [line for line in lines if event in line]
        assert len(said) == 1 and re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO ", said[0]), (event, said)


def test_log_lines_carry_a_timestamp_unless_stderr_is_the_journal():
    stderr = os.fstat(2)
    assert log_format({}).startswith("%(asctime)s ")
    assert log_format({"JOURNAL_STREAM": f"{stderr.st_dev}:{stderr.st_ino + 1}"}).startswith("%(asctime)s ")
    assert log_format({"JOURNAL_STREAM": f"{stderr.st_dev}:{stderr.st_ino}"}).startswith("%(levelname)s ")


def test_a_flood_of_dropped_suspects_is_a_line_now_and_then_with_a_count(tmp_path, running):
    agent = running  # a queue of 20 at most
    agent.answer("POST", "/pause")  # nothing is scanned: the queue stays full
    for batch in range(30):
        assert agent.answer("POST", "/suspects", [{"ledger": 1000 + batch * 100 + i} for i in range(100)])[0] == 202
    health = agent.health()
    assert health["suspects_queued"] == 20 and health["suspects_dropped"] == 30 * 100 - 20
    assert agent.terminate() == 0
    lines = [line for line in (tmp_path / "agent.err").read_text().splitlines() if "suspect queue full" in line]
    assert 1 <= len(lines) <= 2, lines


def test_the_rate_limited_log_says_how_many_events_a_line_stands_for(caplog):
    import logging

    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("t"), logging.WARNING, interval=60, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t"):
        for second in range(120):
            now[0] = float(second)
            limited.log("dropped %d", second)
        limited.flush()  # nothing new since the last line within the interval: nothing written
        now[0] = 200.0
        limited.flush()
    assert caplog.messages == ["dropped 0", "dropped 60 (60 times since the last such line)",
                               "dropped 119 (59 times since the last such line)"]


def test_scan_refuses_an_out_of_range_id_with_exit_2(sample):
    from test_agent_parts import cli as command

    for option in ("--ledger", "--entry-log"):
        done = command("scan", "--bookie-conf", str(sample.bookie_conf), "--metadata", f"file:{sample.dump}",
                       option, str(TOO_BIG))
        assert done.returncode == 2 and "out of range" in done.stderr and "Traceback" not in done.stderr
