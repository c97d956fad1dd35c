"""The agent beside real bookies: written, flushed, garbage-collected and compacted under it.

The livebk kit's cluster (ZooKeeper, bookie1 on .idx storage, bookies 2 and 3 on DbLedgerStorage, GC
every 5 s, compaction every 15/40 s) runs with one agent per bookie, each on the bookie's own
``bk_server.conf``, its log file and the real ZooKeeper, marking damage under-replicated. Ledgers fill
the cluster and a few more rotate logs past them; bookie1 is stopped, three real faults go into entries it
has flushed (a flipped payload byte, a rotated log truncated mid-way, a deleted ``.idx``), it is started
again, and the kit's writer (it deletes only ledgers it created itself) keeps the cluster busy while the
agents go on.

What must hold: every injected fault is found with its exact category, nothing else is ever
reported (0 false findings), each damaged ledger is marked once, and the two untouched bookies log no
exception at all.

Set ``LIVE_SECONDS`` (default 10) to run that writer longer: ``LIVE_SECONDS=1800 ./dev test tests/live``
is the half-hour run.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections import Counter
from pathlib import Path

from livebk import LIVE_SETTLE_SECONDS, LiveCluster
from scanner.metadata.uri import open_metadata
from scanner.storage.bookie import open_bookie
from scanner.storage.entrylog import EntryLog
from scanner.storage.journal import pending_entries
from scanner.storage.layout import discover_layout
from test_agent_service import AgentProcess, book_entries, book_history, wait_for

SECONDS = int(os.environ.get("LIVE_SECONDS", "10"))
NOT_DAMAGE = {"orphan_ledger"}


def _agent_config(tmp_path: Path, bookie, metadata_uri: str) -> Path:
    state = tmp_path / f"state-{bookie.name}"
    text = (f'[bookie]\nconf = "{bookie.conf}"\nlog_files = ["{bookie.log}"]\n'
            f'[metadata]\nuri = "{metadata_uri}"\n'
            f'[agent]\nstate_dir = "{state}"\nlisten = "127.0.0.1:0"\ncheckpoint_seconds = 1\nstart_jitter_minutes = 0\n'
            f'period_days = {10 / 86400}\nsettle_seconds = {LIVE_SETTLE_SECONDS}\n'
            f'[throttle]\nbytes_per_second = 50000000\ndisk_backoff = false\n'
            f'[repair]\nmark = true\n')
    path = tmp_path / f"{bookie.name}.toml"
    path.write_text(text)
    return path


def _findings(state_dir: Path) -> list[dict]:
    """Every finding the agent made: those it holds, and those that ended (a cut log the bookie compacted away)."""
    return [v["finding"] for v in book_entries(state_dir)] + book_history(state_dir)


def _entries(finding: dict) -> set[int]:
    return {e for first, last in finding["entries"] or () for e in range(first, last + 1)}


def _inject(bookie, metadata_uri: str) -> dict:
    """With the bookie stopped: flip a payload byte, cut a sealed log, delete an .idx; what each must cause.

    Only entries flushed before the journal's last mark are damaged: the restart replays the journal
    from that mark, writing each replayed entry anew and pointing the index at the new copy (a deleted
    ``.idx`` comes back with them), so damage to those would be healed by the bookie itself.
    """
    layout = discover_layout(bookie.conf)
    with tempfile.TemporaryDirectory() as scratch, open_metadata(metadata_uri) as store, \
            open_bookie(layout, work_dir=Path(scratch)) as storage:
        sealed = []
        for log_file in storage.entry_logs():
            with EntryLog(log_file.path, log_file.entry_log_id) as entry_log:
                if entry_log.header is not None and entry_log.header.ledgers_map_offset > 0:
                    sealed.append(log_file)
        assert len(sealed) >= 3, "the first writer did not fill enough entry logs"
        indexed = list(storage.indexed_ledgers())
        replayed = pending_entries(layout, [ledger_id for ledger_id, _, _ in indexed])
        by_log: dict[int, list[tuple[int, int, int]]] = {}  # log -> (pos, ledger, entry) of closed ledgers
        verifiable: set[int] = set()  # closed ledgers whose digest a flipped byte breaks (not DUMMY)
        logs_of: dict[int, set[int]] = {}  # closed ledger with nothing to replay -> the logs its entries are in
        for ledger_id, entry_ids, locations in indexed:
            meta = store.ledger(ledger_id)
            if meta is None or not meta.is_closed or entry_ids is None:
                continue
            if not any((ledger_id, entry_id) in replayed for entry_id in entry_ids):
                logs_of[ledger_id] = {raw >> 32 for raw in locations}
            if meta.digest_type is not None and meta.digest_type.name != "DUMMY":
                verifiable.add(ledger_id)
            for entry_id, raw in zip(entry_ids, locations):
                if (ledger_id, entry_id) not in replayed:
                    by_log.setdefault(raw >> 32, []).append((raw & 0xFFFFFFFF, ledger_id, entry_id))
    damageable = [f for f in sealed
                  if sum(1 for _, ledger, _ in by_log.get(f.entry_log_id, ()) if ledger in verifiable) > 20]
    # The ledger whose index goes: nothing of it in either damaged log (its only damage is the lost index).
    for idx_ledger in sorted((ledger for ledger, logs in logs_of.items() if logs), key=lambda l: (len(logs_of[l]), l)):
        others = [f for f in damageable if f.entry_log_id not in logs_of[idx_ledger]]
        if len(others) >= 2:
            flip_log, cut_log = others[:2]
            break
    else:
        raise AssertionError(f"no flushed ledger beside two flushed logs to damage ({len(replayed)} entries replayed)")
    flippable = sorted(r for r in by_log[flip_log.entry_log_id] if r[1] in verifiable)
    pos, flip_ledger, flip_entry = flippable[len(flippable) // 2]
    with open(flip_log.path, "r+b") as f:
        f.seek(pos + 60)  # past the 32-byte header and any digest: payload
        byte = f.read(1)[0]
        f.seek(pos + 60)
        f.write(bytes([byte ^ 0xA5]))
    records = sorted(by_log[cut_log.entry_log_id])
    cut_pos = records[len(records) // 2][0] - 4 + 10  # inside a record's header, half-way through the log
    lost = {(ledger, entry) for p, ledger, entry in records if p + 16 > cut_pos} - {(flip_ledger, flip_entry)}
    os.truncate(cut_log.path, cut_pos)
    idx = next(layout.index_current_dirs[0].rglob(f"{idx_ledger:x}.idx"))
    idx.unlink()
    return {"corrupt": (flip_ledger, flip_entry), "cut_log": cut_log.entry_log_id, "lost": lost,
            "missing_ledger": idx_ledger, "replayed": len(replayed)}


def test_agents_beside_a_live_cluster_find_every_injected_fault_and_nothing_else(tmp_path):
    with LiveCluster(tmp_path / "bk") as cluster:
        agents = [AgentProcess(_agent_config(tmp_path, b, cluster.metadata_uri), tmp_path / f"state-{b.name}",
                               tmp_path / f"agent-{b.name}.err") for b in cluster.bookies]
        try:
            for agent in agents:
                agent.start()
            for agent in agents:
                agent.wait_ready()
            cluster.fill(30, seed=1)
            # The newest of them may be in the journal only (an .idx bookie checkpoints when its entry log
            # rotates): a few more rotate logs past them, so they are all flushed and can be damaged.
            cluster.fill(8, seed=3, deletes="all")
            damaged = cluster.bookies[0]
            damaged.stop()
            injected = _inject(damaged, cluster.metadata_uri)
            damaged.start()
            injected_at = time.time()
            cluster.write(seconds=SECONDS, seed=2)
            cluster.wait_for_writer()
            for agent in agents:  # a whole pass that began after the damage, on every bookie
                wait_for(lambda: (s := agent.scanner())["pass_started"] > injected_at + 1
                         and s["phase"] == "waiting", 240, "no whole pass after the injection")
            shares = {b.name: _process_share(a.process.pid) for b, a in zip(cluster.bookies, agents)}
        finally:
            for agent in agents:
                if agent.process.poll() is None:
                    agent.terminate()
        untouched_logs = [b.log.read_text(errors="replace") for b in cluster.bookies[1:]]

    print("injected:", {k: (len(v) if k == "lost" else v) for k, v in injected.items()})
    print("agent share of the host:", shares)
    assert len(injected["lost"]) >= 5
    for bookie, name in ((b, b.name) for b in cluster.bookies[1:]):
        damage = [f for f in _findings(tmp_path / f"state-{name}") if f["category"] not in NOT_DAMAGE]
        assert damage == [], f"{name}: false findings {damage}"
    found = [f for f in _findings(tmp_path / "state-bookie1") if f["category"] not in NOT_DAMAGE]
    by_category: dict[str, set[tuple[int, int]]] = {}
    for f in found:
        by_category.setdefault(f["category"], set()).update((f["ledger_id"], e) for e in _entries(f))
    assert injected["corrupt"] in by_category.get("corrupt_entry", set()), found
    assert injected["lost"] <= by_category.get("lost_entry", set()), found
    assert any(f["category"] == "damaged_entry_log" and f["entry_log"] == injected["cut_log"] for f in found), found
    assert any(f["category"] == "missing_ledger" and f["ledger_id"] == injected["missing_ledger"] for f in found)
    explained = {injected["corrupt"][0], injected["missing_ledger"]} | {ledger for ledger, _ in injected["lost"]}
    unexplained = [f for f in found if f["ledger_id"] not in explained
                   and not (f["category"] == "damaged_entry_log" and f["entry_log"] == injected["cut_log"])]
    assert unexplained == [], f"false findings on bookie1: {unexplained}"
    marked = Counter(re.findall(r"marked ledger (\d+) under-replicated",
                                (tmp_path / "agent-bookie1.err").read_text()))
    assert marked and all(n == 1 for n in marked.values()), marked
    assert {int(ledger) for ledger in marked} <= explained
    assert not any("Exception" in text for text in untouched_logs), "an untouched bookie logged an exception"


def _process_share(pid: int) -> dict:
    """CPU seconds and resident memory of one agent process so far (for the closing figures)."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"VmHWM:\s+(\d+)", status).group(1))
    return {"cpu_seconds": (int(stat[11]) + int(stat[12])) / ticks, "peak_rss_mib": rss // 1024}
