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
TICKS_PAST_A_STALL = int(2 * STALL_SECONDS / (WATCHDOG_USEC / 2e6))  # twice the stall limit's worth of ticks


class NotifySocket:
    """The socket systemd listens on for sd_notify datagrams, read all along as systemd does."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.received: list[tuple[float, bytes]] = []
        self._arrived = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                message = self.sock.recv(4096)
            except OSError:
                return  # closed
            with self._arrived:
                self.received.append((time.monotonic(), message))
                self._arrived.notify_all()

    def env(self) -> dict[str, str]:
        return {"NOTIFY_SOCKET": self.path, "WATCHDOG_USEC": str(WATCHDOG_USEC)}

    def ticks(self) -> list[tuple[float, bool]]:
        """The agent's watchdog ticks so far, each (when, whether it pinged): every tick sends STATUS=..., after
        WATCHDOG=1 when it pings. The READY=1 the agent sends once, from another thread, can come in between (its
        first tick runs as it starts serving)."""
        with self._arrived:
            received = list(self.received)
        ticks, pinged = [], False
        for at, message in received:
            if message == b"WATCHDOG=1":
                pinged = True
            elif message.startswith(b"STATUS="):
                ticks.append((at, pinged))
                pinged = False
        return ticks

    def wait_for_ticks(self, count: int, after: int, timeout: float = 30) -> list[tuple[float, bool]]:
        """The ``count`` ticks after the first ``after``, waited for as they arrive."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.ticks()) >= after + count, timeout):
                raise AssertionError(f"fewer than {count} watchdog ticks in {timeout:g}s: {self.ticks()[after:]}")
        return self.ticks()[after:after + count]

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._reader.join(5)


def assert_pinged_in_time(ticks: list[tuple[float, bool]]) -> None:
    """Every tick pinged, never longer apart than systemd's watchdog timeout (it restarts the agent then)."""
    assert all(pinged for _, pinged in ticks), ticks
    gaps = [later - earlier for (earlier, _), (later, _) in zip(ticks, ticks[1:])]
    assert max(gaps) < WATCHDOG_USEC / 1e6, gaps


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
        # The ticks go on, not one pinging: four in a row, twice systemd's watchdog timeout.
        withheld = len(notify.ticks())
        assert not any(pinged for _, pinged in notify.wait_for_ticks(4, withheld))
        # The read returns; the reads after it find a plain file.
        held = last_mark.with_name("lastMark.held")
        os.link(last_mark, held)
        (sample.ledger_dir / "lastMark.tmp").write_bytes(struct.pack(">qq", 0, 0))
        os.replace(sample.ledger_dir / "lastMark.tmp", last_mark)
        with open(held, "wb") as writer:
            writer.write(struct.pack(">qq", 0, 0))
        wait_for(lambda: not agent.scanner()["stalled"], 30, "the scanner never came back")
        assert_pinged_in_time(notify.wait_for_ticks(4, len(notify.ticks())))
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
        assert_pinged_in_time(notify.wait_for_ticks(TICKS_PAST_A_STALL, len(notify.ticks())))  # throttled
        assert agent.answer("POST", "/pause")[0] == 200
        assert_pinged_in_time(notify.wait_for_ticks(TICKS_PAST_A_STALL, len(notify.ticks())))  # paused
        config = agent.config.read_text().replace("bytes_per_second = 1000", "bytes_per_second = 0")
        agent.config.write_text(config)
        agent.process.send_signal(signal.SIGHUP)
        assert agent.answer("POST", "/resume")[0] == 200
        wait_for(lambda: agent.scanner()["phase"] == "waiting", 30, "the pass did not finish")
        assert_pinged_in_time(notify.wait_for_ticks(TICKS_PAST_A_STALL, len(notify.ticks())))  # between passes
        health = agent.health()
        assert health["status"] == "ok" and not health["scanners"][0]["stalled"]
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
    assert "no longer pinged" not in (tmp_path / "agent.err").read_text()
