"""The whole repair loop on a real four-bookie cluster with BookKeeper's own autorecovery: no human in it.

The livebk kit's cluster (bookie1 on .idx storage, bookies 2-4 on DbLedgerStorage; GC and compaction
every few seconds) runs with an agent on every bookie, marking and re-replicating, and BookKeeper's
AutoRecoveryMain (the Auditor and a ReplicationWorker) beside them. A writer fills it, a short one
rotates the logs; then bookie1 and bookie2 are stopped in turn and one fault of every kind the scanner
reports goes into sealed data of closed ledgers (``faults_live``); they are started again and a third
writer keeps the cluster busy while the loop runs: scan, mark, the worker, our follow-up, the move.

What must hold:
- every damaged ledger ends with every entry read by BookKeeper's own client, in order, straight from
  every bookie its current metadata names, with a good digest and the same payload on every copy;
- the same after the damaged bookies restart, and after the entry logs that held damaged copies are
  compacted (another ledger in them deleted);
- only damaged ledgers were ever marked (0 marks for healthy ledgers); the untouched bookies report
  nothing; every agent's repair report ends each damaged ledger.

``REPAIR_VARIANT`` (default ``worker``) runs it with BookKeeper's worker (``worker``), without it
(``no_worker``), or with ZooKeeper down for a minute while the loop runs (``zk_outage``); the figures
each run prints are the closing note's table. ``REPAIR_VARIANT=all`` runs all three.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from live.faults_live import inject_all
from livebk import LiveCluster
from scanner.metadata.uri import open_metadata
from test_agent_service import AgentProcess, wait_for

VARIANTS = ("worker", "no_worker", "zk_outage")
CHOSEN = VARIANTS if os.environ.get("REPAIR_VARIANT") == "all" else (os.environ.get("REPAIR_VARIANT", "worker"),)
WRITE_SECONDS = 15
WRITER_SEEDS = (1, 4, 5, 6, 7)
ROTATE_SECONDS = 10
LOOP_TIMEOUT = 420.0
NOT_DAMAGE = {"orphan_ledger"}


def _agent_config(tmp_path: Path, bookie, metadata_uri: str) -> Path:
    state = tmp_path / f"state-{bookie.name}"
    path = tmp_path / f"{bookie.name}.toml"
    path.write_text(f'[bookie]\nconf = "{bookie.conf}"\nlog_files = ["{bookie.log}"]\n'
                    f'[metadata]\nuri = "{metadata_uri}"\n'
                    f'[agent]\nstate_dir = "{state}"\nlisten = "127.0.0.1:0"\ncheckpoint_seconds = 1\n'
                    f'period_days = {10 / 86400}\n'
                    f'[throttle]\nbytes_per_second = 100000000\ndisk_backoff = false\n'
                    f'[repair]\nmark = true\ncopy_bytes_per_second = 0\n')
    return path


def _marked(agent_log: Path) -> set[int]:
    text = agent_log.read_text(errors="replace")
    return {int(x) for x in re.findall(r"marked ledger (\d+) under-replicated", text)}


def _all_good(view, ledgers: set[int]) -> tuple[set[int], list]:
    """The ledgers of ``ledgers`` whose every copy reads, verifies and agrees; and the copies that do not."""
    payloads = view.payloads()
    bad = [c for c in view.bad() if c.ledger_id in ledgers]
    split = {ledger for (ledger, _), digests in payloads.items() if len(digests) > 1}
    good = {ledger for ledger in ledgers
            if view.states.get(ledger) == "CLOSED" and ledger not in split
            and not any(c.ledger_id == ledger for c in bad)}
    return good, bad


def _compact_damaged_logs(cluster, injected, damaged: set[int], timeout: float = 180.0) -> list[tuple[str, int]]:
    """Delete, in each entry log that held a damaged copy, another live ledger, and wait until the bookie has
    compacted the log away (its garbage collector then deletes the file); the (bookie, log) pairs compacted."""
    with open_metadata(cluster.metadata_uri) as store:
        waiting = []
        deleted: set[int] = set()
        for done in injected:
            bookie = cluster.bookie(done.bookie_id)
            for log_id, ledgers in sorted(done.logs.items()):
                path = bookie.ledger_dir / f"{log_id:x}.log"
                others = sorted(l for l in ledgers - damaged if l in deleted or store.ledger(l) is not None)
                if not path.exists() or not others:
                    continue
                for ledger_id in set(others) - deleted:
                    shell = cluster.shell("deleteledger", "-l", str(ledger_id), "-f")
                    assert shell.returncode == 0, shell.stderr[-2000:]
                    deleted.add(ledger_id)
                waiting.append((bookie.name, log_id, path))
    assert waiting, "no damaged log shares a ledger that could be deleted"
    deadline = time.monotonic() + timeout
    while any(p.exists() for _, _, p in waiting) and time.monotonic() < deadline:
        time.sleep(2)
    compacted = [(name, log_id) for name, log_id, path in waiting if not path.exists()]
    assert compacted, f"no damaged log was compacted within {timeout:.0f}s: {waiting}"
    return compacted


@pytest.mark.parametrize("variant", CHOSEN)
def test_every_injected_fault_ends_with_every_copy_good_without_a_human(tmp_path, variant):
    assert variant in VARIANTS, f"REPAIR_VARIANT must be one of {VARIANTS} or all"
    with LiveCluster(tmp_path / "bk", bookie_count=4) as cluster:
        agents = {b.name: AgentProcess(_agent_config(tmp_path, b, cluster.metadata_uri),
                                       tmp_path / f"state-{b.name}", tmp_path / f"agent-{b.name}.err")
                  for b in cluster.bookies}
        try:
            for agent in agents.values():
                agent.start().wait_ready(timeout=60)
            # A writer keeps only a few of its ledgers (it deletes about as many as it creates): several
            # short ones leave enough to damage. The last rotates the logs past them, so they are flushed.
            for seed in WRITER_SEEDS:
                cluster.write(seconds=WRITE_SECONDS, seed=seed)
                cluster.wait_for_writer()
            cluster.write(seconds=ROTATE_SECONDS, seed=3)
            cluster.wait_for_writer()
            injected, touched = [], set()
            with open_metadata(cluster.metadata_uri) as store:
                for bookie in cluster.bookies[:2]:
                    bookie.stop()
                    injected.append(inject_all(bookie, store, avoid=touched))
                    bookie.start()
            injected_at = time.monotonic()
            damaged = set().union(*(i.damaged for i in injected))
            print(f"variant {variant}; injected:",
                  {i.bookie_id: {k: sorted(v) for k, v in i.ledgers.items()} for i in injected})
            if variant != "no_worker":
                cluster.start_autorecovery()
            cluster.write(seconds=120, seed=2)  # busy meanwhile; it deletes only its own ledgers

            repaired_at: dict[int, float] = {}
            outage_done = variant != "zk_outage"
            deadline = time.monotonic() + LOOP_TIMEOUT
            while len(repaired_at) < len(damaged):
                assert time.monotonic() < deadline, (
                    f"not repaired within {LOOP_TIMEOUT:.0f}s: {sorted(damaged - set(repaired_at))}; "
                    f"bad copies {_all_good(cluster.read_every_copy(sorted(damaged)), damaged)[1][:10]}")
                if not outage_done and time.monotonic() - injected_at > 20:
                    cluster.stop_zookeeper()
                    time.sleep(60)
                    cluster.start_zookeeper()
                    outage_done = True
                good, _ = _all_good(cluster.read_every_copy(sorted(damaged - set(repaired_at))), damaged)
                for ledger in good:
                    repaired_at[ledger] = time.monotonic() - injected_at
                time.sleep(5)
            cluster.wait_for_writer(timeout=600)
            reports = {name: agent.health()["repair"] for name, agent in agents.items()}
        finally:
            for agent in agents.values():
                if agent.process.poll() is None:
                    agent.terminate()
        # The damaged bookies restart, and compact the logs that held damaged copies: still good.
        for bookie in cluster.bookies[:2]:
            bookie.restart()
        good, bad = _all_good(cluster.read_every_copy(sorted(damaged)), damaged)
        assert good == damaged, f"after restarts: {bad[:10]}"
        compacted = _compact_damaged_logs(cluster, injected, damaged)
        good, bad = _all_good(cluster.read_every_copy(sorted(damaged)), damaged)
        assert good == damaged, f"after compacting {compacted}: {bad[:10]}"
        autorecovery_log = cluster.autorecovery_log

    print("compacted (bookie, log):", compacted)
    print("repaired after (s):", {k: round(v) for k, v in sorted(repaired_at.items())})
    for name, report in reports.items():
        print(name, "following:", [(r["ledger_id"], r["stage"]) for r in report["following"]],
              "ended:", [(r["ledger_id"], r["why"]) for r in report["ended"]])
    print("worker:", len(re.findall("Ledger replicated successfully", autorecovery_log)), "ledgers checked,",
          len(re.findall("Updated ZK to point ledger fragments", autorecovery_log)), "fragments moved")
    marked = {name: _marked(tmp_path / f"agent-{name}.err") for name in agents}
    print("marks filed:", {name: sorted(m) for name, m in marked.items()})
    assert set().union(*marked.values()) <= damaged, "a healthy ledger was marked"
    for name in ("bookie3", "bookie4"):
        findings = json.loads((tmp_path / f"state-{name}" / "findings.json").read_text())["known"].values()
        assert [f for f in findings if f["finding"]["category"] not in NOT_DAMAGE] == [], name
