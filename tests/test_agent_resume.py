"""A restart in the middle of an entry log resumes at the record the cursor names: damage never hides behind it.

A copy of corpus bookie1 with one payload byte flipped in the middle of its first log (0.log, 0.5 MB).
The agent reads at 250 kB/s, so a pass takes ~9 s; it is stopped at random moments (SIGKILL or
SIGTERM, mid-record or not; most of them counted from when it serves, so that they fall in its walk however
long it takes to start), ten times a pass; each pass, finished by an eleventh life at full speed, must report the
corrupt entry. Three agents do so side by side, each with a state dir of its own.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from corpus import CORPUS
from test_agent_service import AgentProcess, book_entries, wait_for, write_config
from tree_state import snapshot

FLIP = {"offset": 406576, "ledger_id": 123456789, "entry_id": 8}  # the corruption report's payload flip


def _bookie_copy(tmp_path: Path) -> SimpleNamespace:
    root = tmp_path / "bookie1"
    shutil.copytree(CORPUS / "bookie1", root)
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    log = root / "ledgers" / "current" / "0.log"
    data = bytearray(log.read_bytes())
    data[FLIP["offset"]] ^= 0x5A
    log.write_bytes(bytes(data))
    conf = (CORPUS / "bookie-configs" / "bookie1.conf").read_text()
    conf = conf.replace("/var/lib/bookkeeper/bookie1", str(root))
    (tmp_path / "bk_server.conf").write_text(conf)
    return SimpleNamespace(root=root, bookie_conf=tmp_path / "bk_server.conf")


def _corrupt_found(state_dir: Path) -> list[dict]:
    return [v for v in book_entries(state_dir) if v["finding"]["category"] == "corrupt_entry"]


def _lives_of_one_agent(tmp_path: Path, bookie: SimpleNamespace, run: int) -> None:
    """Ten lives of an agent of its own, stopped at random moments, then an eleventh that ends the pass: the pass
    reports the corrupt entry, and the cursor never went back."""
    rng = random.Random(14 + run)
    state_dir = tmp_path / f"state{run}"
    (tmp_path / f"run{run}").mkdir()
    config = write_config(tmp_path / f"run{run}", bookie, f"file:{CORPUS / 'zk-dump.json'}", state_dir=str(state_dir),
                          period_days=15 / 86400, bytes_per_second=250_000)
    agent = AgentProcess(config, state_dir, tmp_path / f"agent{run}.err")
    cursors = []
    for _ in range(10):
        agent.start()
        if rng.random() < 0.3:  # early, also before the agent has its handlers
            time.sleep(rng.uniform(0.1, 1.0))
        else:  # in its pass: starting takes 1-2 s on a busy machine, so the moment counts from when it serves
            agent.wait_ready()
            time.sleep(rng.uniform(0.3, 1.5))
        if rng.random() < 0.5:
            agent.kill()
        else:  # the default action ends it before the agent has set up its handler
            assert agent.terminate() in (0, -signal.SIGTERM)
        cursor_file = state_dir / "cursor-0.json"
        if cursor_file.exists():
            cursors.append(json.loads(cursor_file.read_text()))
    done = [(c["passes_completed"], c["bytes_done"]) for c in cursors if c["phase"] != "ledgers"]
    assert done == sorted(done), f"run {run}: progress went back: {done}"
    assert any(0 < c["offset"] for c in cursors), f"run {run}: no restart landed inside a log"
    # The last life reads the rest of the pass unthrottled: from where the cursor stands, as every life did.
    config.write_text(config.read_text().replace("bytes_per_second = 250000", "bytes_per_second = 0"))
    agent.start()
    try:
        agent.wait_ready()
        wait_for(lambda: agent.scanner()["passes_completed"] >= 1, 60, f"run {run}: the pass did not end")
    finally:
        assert agent.terminate() == 0
    found = _corrupt_found(state_dir)
    assert [(f["finding"]["ledger_id"], f["finding"]["entries"], f["finding"]["entry_log"]) for f in found] == [
        (FLIP["ledger_id"], [[FLIP["entry_id"], FLIP["entry_id"]]], 0)], f"run {run}: {found}"


@pytest.mark.slow
def test_restarts_mid_log_never_skip_the_rest_of_it(tmp_path):
    bookie = _bookie_copy(tmp_path)
    before = snapshot(bookie.root)
    # Three agents side by side, each with a state dir of its own: each spends its time on its rate and its sleeps.
    with ThreadPoolExecutor(3) as runs:
        for run in [runs.submit(_lives_of_one_agent, tmp_path, bookie, run) for run in range(3)]:
            run.result()
    assert snapshot(bookie.root) == before
