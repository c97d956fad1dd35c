"""The agent as systemd runs it: a ``bookie-scanner run`` process on a generated sample bookie (a copy
of our own, with injected faults), metadata in a real ZooKeeper, killed and restarted."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from scanner.agent.findingbook import HISTORY_FILE
from scanner.agent.suspects import append_to_inbox, Suspect
from scanner.repair.marks import decode_mark, mark_path, UnderreplicationMarks
from scanner.sample.sample_cluster import build_sample
from scanner.storage.entry import mac_key, master_key
from tree_state import snapshot

REPO = Path(__file__).resolve().parents[1]
MAIN = "import sys; from scanner.cli import main; sys.exit(main())"
BOOKIE = "10.20.0.11:3181"
# What build_sample injects, as the agent must report it: category -> ledgers (None: not about a ledger).
EXPECTED = {"corrupt_entry": {2}, "missing_ledger": {3}, "missing_entry": {5}, "lost_entry": {6},
            "orphan_ledger": {9}}
DAMAGED_LEDGERS = {2, 3, 5, 6}


AGENT_KEYS = ("state_dir", "listen", "checkpoint_seconds", "period_days", "period_jitter", "start_jitter_minutes",
              "stall_minutes", "pace", "suspect_window_minutes", "suspect_limit", "settle_seconds")


def write_config(tmp_path: Path, sample, uri: str, bookie: dict | None = None, **agent_and_throttle) -> Path:
    """The agent's config for ``sample`` (or the ``bookie`` table given); keys go to [agent], [repair] or [throttle]."""
    # Passes start at once and repeat exactly: a test waits seconds, not a random part of a period.
    agent = {"state_dir": str(tmp_path / "state"), "listen": "127.0.0.1:0", "checkpoint_seconds": 0.2,
             "period_days": 1.0, "start_jitter_minutes": 0, "period_jitter": 0}
    throttle = {"disk_backoff": False}
    repair = {"mark": False}
    for key, value in agent_and_throttle.items():
        (repair if key == "mark" else agent if key in AGENT_KEYS else throttle)[key] = value
    bookie = bookie or {"conf": str(sample.bookie_conf)}
    tables = {"bookie": {**bookie, "log_files": [str(tmp_path / "bookie.log")]},
              "metadata": {"uri": uri}, "agent": agent, "throttle": throttle, "repair": repair}
    text = "".join(f"[{name}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())
                   for name, values in tables.items())
    path = tmp_path / "scanner.toml"
    path.write_text(text)
    return path


class AgentProcess:
    """One ``bookie-scanner run`` subprocess; its stderr goes to ``log`` (appended across restarts)."""

    def __init__(self, config: Path, state_dir: Path, log: Path, env: dict[str, str] | None = None):
        self.config, self.state_dir, self.log, self.env = config, state_dir, log, env or {}
        self.process: subprocess.Popen | None = None

    def start(self) -> "AgentProcess":
        # Its temp files stay in the test's dir: a killed agent cannot remove them, the test's cleanup does.
        temp = self.log.parent / "agent-tmp"
        temp.mkdir(exist_ok=True)
        with self.log.open("ab") as err:
            self.process = subprocess.Popen([sys.executable, "-c", MAIN, "run", "--config", str(self.config)],
                                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
                                            env={**os.environ, "TMPDIR": str(temp), **self.env})
        return self

    def address(self) -> str | None:
        try:
            info = json.loads((self.state_dir / "agent.json").read_text())
        except (OSError, ValueError):
            return None
        return info["listen"] if info.get("pid") == self.process.pid else None

    def wait_ready(self, timeout: float = 30.0) -> None:
        wait_for(lambda: self.address() is not None and (self.health() or {}).get("scanners"), timeout,
                 f"agent did not come up; stderr: {self.log.read_text()[-2000:]}")

    def _request(self, method: str, path: str, body=None) -> tuple[int, bytes]:
        request = urllib.request.Request(f"http://{self.address()}{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def answer(self, method: str, path: str, body=None) -> tuple[int, dict]:
        """HTTP status and JSON body, whatever the status."""
        status, raw = self._request(method, path, body)
        return status, json.loads(raw)

    def health(self) -> dict | None:
        """/health's body, also when it answers 503 (degraded, failing, starting); None if nothing answers."""
        try:
            return self.answer("GET", "/health")[1]
        except OSError:
            return None

    def metrics(self) -> str:
        return self._request("GET", "/metrics")[1].decode()

    def post_suspect(self, body: dict) -> dict:
        return self.answer("POST", "/suspects", body)[1]

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)

    def scanner(self) -> dict:
        return self.health()["scanners"][0]


def wait_for(predicate, timeout: float, message: str = "condition not met"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(message)


def cli(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", MAIN, *args, "--config", str(config)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def book_entries(state_dir: Path) -> list[dict]:
    """The agent's open findings as its database holds them: ``{"finding", "first_seen", "last_seen", "to_mark"}``."""
    path = state_dir / "findings.db"
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT finding, first_seen, last_seen, to_mark FROM findings").fetchall()
    return [{"finding": json.loads(finding), "first_seen": first, "last_seen": last, "to_mark": bool(to_mark)}
            for finding, first, last, to_mark in rows]


def book_history(state_dir: Path) -> list[dict]:
    """The agent's ended findings, oldest first, as its rotated history holds them (each with ``ended``, ``why``)."""
    files = sorted(state_dir.glob(HISTORY_FILE + "*"), key=lambda p: -int(p.suffix[1:]) if p.name != HISTORY_FILE else 0)
    return [json.loads(line) for path in files for line in path.read_text().splitlines()]


def secret_forms(password: bytes) -> list[str]:
    """A ledger password as it could leak: itself, its master key and MAC key in hex, base64."""
    return [password.decode(), master_key(password).hex(), mac_key(password).hex(), base64.b64encode(password).decode()]


def leaked(text: str, passwords) -> list[str]:
    return [form for password in passwords for form in secret_forms(password) if form in text]


def findings_by_category(state_dir: Path) -> dict[str, set]:
    found: dict[str, set] = {}
    for item in book_entries(state_dir):
        found.setdefault(item["finding"]["category"], set()).add(item["finding"]["ledger_id"])
    return found


@pytest.mark.slow
def test_the_agent_finds_every_injected_fault_marks_once_shows_it_and_never_writes_the_bookie(
        tmp_path, zookeeper, zk_client, zk_load_dump):
    sample = build_sample(tmp_path / "sample")
    chroot = zk_load_dump(sample.dump)
    bookie_dir = sample.root / "bookie"
    before = snapshot(bookie_dir)
    config = write_config(tmp_path, sample, f"zk://{zookeeper.connect_string}{chroot}/ledgers", mark=True,
                          period_days=2 / 86400)  # a pass every two seconds: a long run in short
    state_dir = tmp_path / "state"
    agent = AgentProcess(config, state_dir, tmp_path / "agent.err").start()
    try:
        agent.wait_ready()
        health = wait_for(lambda: (h := agent.health()) and h["scanners"][0]["passes_completed"] >= 3
                          and h["marks"]["awaiting"] == 0 and h, 60, "three passes and the marks did not happen")
        found = findings_by_category(state_dir)
        assert {c: found.get(c, set()) for c in EXPECTED} == EXPECTED
        assert found["damaged_entry_log"] == {None, 6}  # log 1: its ledgers map offset and its cut record
        assert set(health["findings"]) == set(EXPECTED) | {"damaged_entry_log"}
        assert health["findings"]["corrupt_entry"] == 1 and health["findings"]["damaged_entry_log"] == 2
        assert health["status"] == "ok" and health["zookeeper_connected"] is True
        scanner = health["scanners"][0]
        assert scanner["ledger_dir"] == str(sample.ledger_dir) and 0 <= scanner["pass_progress"] <= 1
        metrics = agent.metrics()
        assert f'bookie_scanner_findings{{bookie="{BOOKIE}",category="corrupt_entry"}} 1.0' in metrics
        assert f'bookie_scanner_zookeeper_connected{{bookie="{BOOKIE}"}} 1.0' in metrics
        assert re.search(r'bookie_scanner_passes_completed_total\{bookie="[^"]+",ledger_dir="[^"]+"\} [3-9]', metrics)
        exported = set(re.findall(r"^# TYPE (bookie_scanner_\w+)", metrics, re.M))
        conf = (REPO / "conf" / "prometheus-alerts.yml").read_text() + (REPO / "conf" / "grafana-dashboard.json").read_text()
        assert set(re.findall(r"bookie_scanner_\w+", conf)) <= exported  # alerts and dashboard use real names
        marks = UnderreplicationMarks(zk_client, f"{chroot}/ledgers")
        assert set(marks.marked_ledgers()) == DAMAGED_LEDGERS
        assert all(marks.get(ledger).replicas == (BOOKIE,) for ledger in DAMAGED_LEDGERS)

        # Pause: persisted, noticed at once, survives a restart.
        assert cli(config, "pause").returncode == 0
        assert agent.health()["status"] == "paused"
        assert agent.terminate() == 0
        agent.start().wait_ready()
        assert agent.health()["paused"] is True and agent.scanner()["phase"] == "paused"
        status = cli(config, "status")
        assert "NEEDS ATTENTION: " in status.stdout and "(paused)" in status.stdout and status.returncode == 1  # damage is known
        assert cli(config, "resume").returncode == 0
        assert agent.health()["paused"] is False
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
    filed = Counter(re.findall(r"marked ledger (\d+) under-replicated", (tmp_path / "agent.err").read_text()))
    assert filed == Counter({str(ledger): 1 for ledger in DAMAGED_LEDGERS})  # each once, over many passes
    assert snapshot(bookie_dir) == before
    # No ledger password, nor a key made from one, in the log, the endpoint's answers or any state file.
    seen = [(tmp_path / "agent.err").read_text(), json.dumps(health), metrics, status.stdout]
    seen += [p.read_bytes().decode("latin-1") for p in state_dir.rglob("*") if p.is_file()]
    assert leaked("\n".join(seen), (b"sample-secret", b"pulsar")) == []


@pytest.mark.slow
def test_a_suspect_is_scanned_while_the_pass_waits_on_the_throttle_and_sigterm_keeps_the_place(tmp_path):
    sample = build_sample(tmp_path / "sample")
    # One pass a day, spread evenly: the rate is the floor (1 KiB/s), so the walk of the entry logs (~50 KiB)
    # holds the pass on the throttle for most of a minute; suspects are read at full speed.
    config = write_config(tmp_path, sample, f"file:{sample.dump}", period_days=1.0, pace="spread")
    state_dir = tmp_path / "state"
    agent = AgentProcess(config, state_dir, tmp_path / "agent.err").start()
    try:
        agent.wait_ready()
        wait_for(lambda: agent.scanner()["phase"] == "entry_logs", 30, "the index step did not finish")
        time.sleep(0.5)
        assert agent.scanner()["phase"] == "entry_logs"  # walking the first log, held by the throttle
        assert agent.health()["findings"] == {"missing_entry": 1}  # the index step's: ledger 5 lacks 2 entries
        posted = time.monotonic()
        assert agent.post_suspect({"ledger": 2}) == {"queued": 1}
        wait_for(lambda: "ledger:2@0" in agent.health()["suspects_recent"], 1.0,
                 "the suspect was not scanned within a second")
        assert time.monotonic() - posted < 1.0
        assert agent.health()["findings"] == {"missing_entry": 1, "corrupt_entry": 1}  # its digests were verified
        # The bookie's log names a ledger and an entry log: both are scanned too.
        with (tmp_path / "bookie.log").open("a") as log:
            log.write("2024-01-01 00:00:00,000 - ERROR - [r:ReadEntryProcessorV3@1] - IOException while reading "
                      "entry: 3 from ledger 6\njava.io.IOException: Bad entry read from log file id: 1\n")
        wait_for(lambda: {"ledger:6@0", "entry_log:1@0"} <= set(agent.health()["suspects_recent"]), 10,
                 "the log line's suspects were not scanned")
        assert {"lost_entry", "damaged_entry_log"} <= set(agent.health()["findings"])
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
    cursor = json.loads((state_dir / "cursor-0.json").read_text())
    assert cursor["phase"] == "entry_logs" and cursor["entry_log_id"] is not None and cursor["passes_completed"] == 0
    # The ledgers the metadata places on the bookie (1-8, ledger 3's index lost); the deleted 9's index is not read.
    assert cursor["ledgers_done"] == cursor["ledgers_total"] == 8
    # A suspect named while the agent is down waits in the state dir.
    assert "left in" in cli(config, "suspect", "--entry-log", "2").stdout
    agent.start().wait_ready()
    try:
        resumed = agent.scanner()
        assert resumed["phase"] == "entry_logs" and resumed["pass_started"] == cursor["pass_started"]  # not over
        wait_for(lambda: "entry_log:2@0" in agent.health()["suspects_recent"], 10, "the inbox was not drained")
    finally:
        assert agent.terminate() == 0


@pytest.mark.slow
def test_fifty_kill_minus_nines_lose_no_progress_no_suspect_and_file_no_mark_twice(
        tmp_path, zookeeper, zk_client, zk_load_dump):
    sample = build_sample(tmp_path / "sample")
    chroot = zk_load_dump(sample.dump)
    bookie_dir = sample.root / "bookie"
    before = snapshot(bookie_dir)
    # Slow enough that a pass spans several lives of the agent: ~0.1 s of index (read again after every
    # restart), ~0.5 s of entry logs.
    config = write_config(tmp_path, sample, f"zk://{zookeeper.connect_string}{chroot}/ledgers", mark=True,
                          period_days=2 / 86400, bytes_per_second=105000, entries_per_second=3000)
    state_dir = tmp_path / "state"
    cursor_file = state_dir / "cursor-0.json"
    agent = AgentProcess(config, state_dir, tmp_path / "agent.err")
    rng = random.Random(9)
    suspects = [{"ledger": i} for i in (1, 2, 4, 5, 6, 7, 123456789)] + [{"entry_log": i} for i in (0, 1, 2)]
    posted: list[str] = []
    positions = []
    for life in range(50):
        agent.start()
        lifetime = rng.uniform(0.2, 0.6)
        if life >= len(suspects):
            # Counted from when the agent serves: on a busy machine its start alone can outlast a life, and
            # fifty lives of starting only never finish a pass. The first lives (the suspects') also die starting.
            serving_by = time.monotonic() + 30
            while agent.address() is None and time.monotonic() < serving_by:
                time.sleep(0.02)
            deadline = time.monotonic() + lifetime
        else:
            deadline = time.monotonic() + lifetime
            body = suspects[life]
            kind, value = next(iter(body.items()))
            while agent.address() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            try:
                agent.post_suspect(body)
            except OSError:  # not listening yet or already gone: the command's fallback
                append_to_inbox(state_dir, Suspect(kind, value))
            posted.append(f"{kind}:{value}@0")
        time.sleep(max(0.0, deadline - time.monotonic()))
        agent.kill()
        if cursor_file.exists():
            cursor = json.loads(cursor_file.read_text())
            waiting = cursor["phase"] == "waiting"
            positions.append(cursor["passes_completed"] + (0.0 if waiting else _progress(cursor)))
    assert positions == sorted(positions), f"progress went back after a kill: {positions}"
    assert positions[-1] >= 1 and len(set(positions)) > 5, positions  # it moved on across the kills
    assert sum(p != int(p) for p in positions) >= 5, positions  # many kills landed mid-pass
    agent.start()
    try:
        agent.wait_ready()
        health = wait_for(lambda: (h := agent.health()) and h["suspects_queued"] == 0
                          and h["marks"]["awaiting"] == 0 and h, 60, "suspects or marks left over")
        assert set(posted) <= set(health["suspects_recent"])
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
    marks = UnderreplicationMarks(zk_client, f"{chroot}/ledgers")
    assert set(marks.marked_ledgers()) == DAMAGED_LEDGERS
    # Filed once each: every mark written at its creation and never again. The agent's log cannot tell, as a
    # kill can land between a mark's creation and the line saying so (a later life finds it already there).
    for ledger in DAMAGED_LEDGERS:
        raw, stat = zk_client.get(mark_path(f"{chroot}/ledgers", ledger))
        assert stat.version == 0 and decode_mark(raw, str(ledger)).replicas == (BOOKIE,), (ledger, stat)
    filed = Counter(re.findall(r"marked ledger (\d+) under-replicated", (tmp_path / "agent.err").read_text()))
    assert set(filed) <= {str(ledger) for ledger in DAMAGED_LEDGERS} and max(filed.values()) == 1, filed
    assert snapshot(bookie_dir) == before


def _progress(cursor: dict) -> float:
    from scanner.agent.cursor import Cursor

    return Cursor(**cursor).pass_progress
