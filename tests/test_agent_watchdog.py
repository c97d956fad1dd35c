"""systemd's watchdog means it: pinged while every scanner thread makes progress or waits by design (paused,
throttled, between passes), not while one is stuck in a read that never returns."""

from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time

import pytest

from scanner.sample.sample_cluster import build_sample
from test_agent_service import AgentProcess, wait_for, write_config

pytestmark = pytest.mark.slow  # each lets the agent run past its stall limit on purpose

STALL_SECONDS = 3.0
WATCHDOG_USEC = 1_000_000  # the agent pings every half second


class NotifySocket:
    """The socket systemd listens on for sd_notify datagrams, read all along as systemd does."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.received: list[tuple[float, bytes]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                message = self.sock.recv(4096)
            except OSError:
                return  # closed
            self.received.append((time.monotonic(), message))

    def env(self) -> dict[str, str]:
        return {"NOTIFY_SOCKET": self.path, "WATCHDOG_USEC": str(WATCHDOG_USEC)}

    def pings_within(self, seconds: float) -> int:
        """WATCHDOG=1 messages received in the next ``seconds``."""
        start = time.monotonic()
        time.sleep(seconds)
        return sum(1 for at, message in list(self.received) if at >= start and message == b"WATCHDOG=1")

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._reader.join(5)


@pytest.fixture
def notify(tmp_path):
    sock = NotifySocket(tmp_path / "notify")
    yield sock
    sock.close()


def start_agent(tmp_path, sample, notify, **keys) -> AgentProcess:
    config = write_config(tmp_path, sample, f"file:{sample.dump}", stall_minutes=STALL_SECONDS / 60, **keys)
    agent = AgentProcess(config, tmp_path / "state", tmp_path / "agent.err", env=notify.env()).start()
    agent.wait_ready()
    return agent


def test_a_scanner_stuck_in_a_read_stops_the_pings_and_they_come_back_when_it_returns(tmp_path, notify):
    sample = build_sample(tmp_path / "sample")
    # The bookie's lastMark as a FIFO without a writer: opening it blocks, as a read of a hung disk does.
    # The pass reads it when it confirms the sample's missing entries against the journal.
    last_mark = sample.ledger_dir / "current" / "lastMark"
    os.mkfifo(last_mark)
    agent = start_agent(tmp_path, sample, notify)
    try:
        health = wait_for(lambda: (h := agent.health()) and h["scanners"][0]["stalled"] and h, 30,
                          "the stuck scanner never showed as stalled")
        assert health["status"] == "failing"
        wait_for(lambda: "the watchdog is no longer pinged" in (tmp_path / "agent.err").read_text(), 10,
                 "no line says the watchdog is withheld")
        assert notify.pings_within(2.5) == 0
        # The read returns; the reads after it find a plain file.
        held = last_mark.with_name("lastMark.held")
        os.link(last_mark, held)
        (sample.ledger_dir / "lastMark.tmp").write_bytes(struct.pack(">qq", 0, 0))
        os.replace(sample.ledger_dir / "lastMark.tmp", last_mark)
        with open(held, "wb") as writer:
            writer.write(struct.pack(">qq", 0, 0))
        wait_for(lambda: not agent.scanner()["stalled"], 30, "the scanner never came back")
        assert notify.pings_within(2.5) >= 3
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
    assert "every scanner makes progress again" in (tmp_path / "agent.err").read_text()


def test_throttled_paused_and_between_passes_the_pings_go_on(tmp_path, notify):
    sample = build_sample(tmp_path / "sample")
    # ~50 KB of entry logs at 1000 B/s: the pass spends its time waiting on the throttle.
    agent = start_agent(tmp_path, sample, notify, bytes_per_second=1000)
    try:
        wait_for(lambda: agent.scanner()["phase"] == "entry_logs", 30, "the walk did not start")
        assert notify.pings_within(2 * STALL_SECONDS) >= 8  # throttled
        assert agent.answer("POST", "/pause")[0] == 200
        assert notify.pings_within(2 * STALL_SECONDS) >= 8  # paused
        config = agent.config.read_text().replace("bytes_per_second = 1000", "bytes_per_second = 0")
        agent.config.write_text(config)
        agent.process.send_signal(signal.SIGHUP)
        assert agent.answer("POST", "/resume")[0] == 200
        wait_for(lambda: agent.scanner()["phase"] == "waiting", 30, "the pass did not finish")
        assert notify.pings_within(2 * STALL_SECONDS) >= 8  # between passes
        health = agent.health()
        assert health["status"] == "ok" and not health["scanners"][0]["stalled"]
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
    assert "no longer pinged" not in (tmp_path / "agent.err").read_text()
