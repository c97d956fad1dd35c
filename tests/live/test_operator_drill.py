"""The operator's drill on a real cluster: every signal tells the same story at every stage.

The livebk kit's four bookies; bookie4, the spare re-replication moves to, is stopped before anything is
written, so every ledger's ensemble is bookies 1-3. An agent runs on each of those (marking and moving),
BookKeeper's autorecovery (the Auditor and a ReplicationWorker) beside them. A payload byte is flipped in a
closed ledger L on bookie1 and in another, M, on bookie2, with the bookies stopped; then:

- found: marks cannot be filed yet (the marks' znodes are read-only for a while): bookie1's agent has found
  L's damage and not marked it;
- marked: the marks can be written again; L's lock is held (as a repairer working on it would), so the
  agent's move waits with the mark filed;
- remarked: L's mark is cleared with the damage in place, as BookKeeper's ReplicationWorker does when its
  check reads the corrupt copy without verifying it; the agent notices, and files it again under the lock;
- moved: bookie4 is started and L's lock let go: the agent moves the damaged fragment there;
- ended: the agent's next pass ends without L's damage, and ``scan --ledger L`` says the copy left on
  bookie1 is no longer owed;
- escalated: bookie4 is stopped again (no bookie left outside M's ensemble) and M's lock let go: bookie2's
  agent fails to move M three times in a row and escalates 3 x ``RETRY_SECONDS`` after its first try (the
  agents' ``[repair] retry_seconds``: 90 s at the default of 30).

At each stage ``/health`` (its state, its HTTP code, and its JSON against the schema), ``bookie-scanner
status`` (its headline and exit status), ``/metrics`` (the ``bookie_scanner_state`` gauge), ``bookie-scanner
marks --config`` (the marks, and what the agent follows) and the alert rules (``promtool test rules`` on the
scraped series) must agree; the table of what each said is printed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE, make_acl

from json_schemas import assert_valid
from live.faults_live import NothingToDamage, inject_all
from livebk import LIVE_SETTLE_SECONDS, LiveBookie, LiveCluster, side_by_side
from scanner.envelope import envelope
from scanner.metadata.uri import open_metadata
from scanner.repair.marks import lock_path, mark_path
from test_agent_service import MAIN, REPO, AgentProcess, cli, wait_for

RULES = REPO / "conf" / "prometheus-alerts.yml"
FILL_LEDGERS = 30  # about half of them deleted as more are written
ROTATE_LEDGERS = 8
RETRY_SECONDS = 2  # the agents' [repair] retry_seconds: a failed move is tried again 2 s, then 4 s later; one
# another repairer's lock put off, 2 s later
MARKS = "/ledgers/underreplication/ledgers"
READ_ONLY = [make_acl("world", "anyone", read=True, admin=True)]  # admin: to open them again
# What each alert says at each verdict (every other alert of these stays quiet).
ALERTS = {"damaged": ["BookieScannerDamageFound"], "marked": ["BookieScannerDamageFound"],
          "repairing": ["BookieScannerDamageFound"], "escalated": ["BookieScannerUnrepairedDamage"],
          "healthy": []}
WATCHED = ("BookieScannerDamageFound", "BookieScannerUnrepairedDamage", "BookieScannerConfigError",
           "BookieScannerDown")


def _agent_config(tmp_path: Path, bookie, metadata_uri: str) -> Path:
    path = tmp_path / f"{bookie.name}.toml"
    path.write_text(f'[bookie]\nconf = "{bookie.conf}"\nlog_files = ["{bookie.log}"]\n'
                    f'[metadata]\nuri = "{metadata_uri}"\n'
                    f'[agent]\nstate_dir = "{tmp_path / f"state-{bookie.name}"}"\nlisten = "127.0.0.1:0"\n'
                    f'checkpoint_seconds = 1\nperiod_days = {5 / 86400}\nstart_jitter_minutes = 0\n'
                    f'settle_seconds = {LIVE_SETTLE_SECONDS}\n'
                    f'[throttle]\nbytes_per_second = 100000000\ndisk_backoff = false\n'
                    f'[repair]\nmark = true\ncopy_bytes_per_second = 0\nretry_seconds = {RETRY_SECONDS}\n')
    return path


def _set_acl_under(client: KazooClient, path: str, acl) -> None:
    client.ensure_path(path)
    for child in client.get_children(path):
        _set_acl_under(client, f"{path}/{child}", acl)
    client.set_acls(path, acl)


def _inject(cluster, bookie, store, avoid: set[int]) -> tuple[int, int]:
    """A flipped payload byte in a closed ledger's flushed entry on the stopped ``bookie``: (ledger, entry)."""
    for more in range(3):
        try:
            done = inject_all(bookie, store, kinds=("payload",), avoid=set(avoid))
            return done.entries["payload"]
        except NothingToDamage:
            if more == 2:
                raise
            bookie.start()
            cluster.fill(ROTATE_LEDGERS, seed=10 + more)
            bookie.stop()
    raise AssertionError("unreachable")


def _gauge_state(metrics: str) -> str | None:
    found = re.findall(r'^bookie_scanner_state\{[^}]*state="(\w+)"\} 1\.0$', metrics, re.M)
    return found[0] if len(found) == 1 else None


def _counter(metrics: str, name: str) -> float:
    match = re.search(rf'^bookie_scanner_{name}\{{bookie="[^"]+"\}} (\S+)$', metrics, re.M)
    assert match, f"{name} not exported"
    return float(match[1])


def _alerts_firing(tmp_path: Path, stage: str, metrics: str) -> list[str]:
    """Which of ``WATCHED`` the alert rules fire on the scraped gauges held for 20 minutes, as ``promtool test
    rules`` reports them: each is expected quiet, and promtool names every one that fired instead."""
    series = []
    for line in metrics.splitlines():
        match = re.fullmatch(r"(bookie_scanner_\w+)\{(.*)\} (\S+)", line)
        if match and not match[1].endswith(("_total", "_created")):
            series.append({"series": f'{match[1]}{{instance="bk:9721",job="bookie-scanner",{match[2]}}}',
                           "values": f"{float(match[3])!r}x30"})
    tests = [{"eval_time": "20m", "alertname": name, "exp_alerts": []} for name in WATCHED]
    path = tmp_path / f"alerts-{stage}.test.json"  # YAML's superset: promtool reads JSON as well
    path.write_text(json.dumps({"rule_files": [str(RULES)], "evaluation_interval": "1m",
                                "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": tests}]}))
    checked = subprocess.run([shutil.which("promtool") or "promtool", "test", "rules", str(path)],
                             capture_output=True, text=True, timeout=120)
    fired = sorted(set(re.findall(r"alertname: (\w+), time: 20m", checked.stdout + checked.stderr)))
    assert (checked.returncode == 0) == (not fired), checked.stdout + checked.stderr
    return fired


def _observe(tmp_path: Path, stage: str, agent: AgentProcess, config: Path, ledger: int) -> dict:
    """What every signal says now; asserts they agree with one another."""
    http, health = agent.answer("GET", "/health")
    assert_valid(envelope("agent_status", health))
    state = health["state"]
    with ThreadPoolExecutor(2) as commands:  # two commands of a second or so each, asked at the same moment
        status = commands.submit(cli, config, "status")
        marks_listed = commands.submit(subprocess.run, [sys.executable, "-c", MAIN, "marks", "--config", str(config),
                                                        "--format", "json"],
                                       cwd=REPO, capture_output=True, text=True, timeout=60)
        shown, listed = status.result(), marks_listed.result()
    headline = shown.stdout.splitlines()[0]
    metrics = agent.metrics()
    assert listed.returncode == 0, listed.stderr
    marks = json.loads(listed.stdout)
    assert_valid(marks)
    followed = {row["ledger_id"]: row for row in marks["agent_following"]}
    marked = {m["ledger_id"] for m in marks["ledgers"]}
    # One story: the HTTP code, the headline and its exit status, the gauge follow the state.
    assert http == (200 if state == "healthy" else 503), (stage, http, state)
    assert shown.returncode == (0 if state == "healthy" else 1), (stage, shown.stdout)
    assert state.upper() in headline, (stage, headline)
    assert _gauge_state(metrics) == state, (stage, metrics)
    # marks and the agent say the same about the ledger: followed or not, marked now or not.
    row = followed.get(ledger)
    following = {r["ledger_id"]: r for r in health["repair"]["following"]}
    assert (row is None) == (ledger not in following), (stage, row, following)
    if row is not None:
        assert row["marked_now"] == (ledger in marked) and row["stage"] == following[ledger]["stage"]
        assert row["marks_cleared"] == following[ledger]["marks_cleared"]
    alerts = _alerts_firing(tmp_path, stage, metrics)
    assert alerts == ALERTS[state], (stage, state, alerts)
    return {"stage": stage, "http": http, "state": state, "reason": health["state_reason"],
            "status": f"exit {shown.returncode}: {headline.split(': ', 1)[1]}",
            "gauge": _gauge_state(metrics), "moved_total": _counter(metrics, "fragments_moved_total"),
            "marks": f"marked: {', '.join(map(str, sorted(marked))) or 'none'}" + ("" if row is None else
                                                   f"; agent follows {ledger}: {row['stage']}, "
                                                   f"{'marked' if row['marked_now'] else 'NOT marked'} now, "
                                                   f"cleared {row['marks_cleared']}x"),
            "alerts": ", ".join(alerts) or "none",
            "status_text": shown.stdout}


def test_health_status_metrics_marks_and_alerts_tell_the_same_story_at_every_stage(tmp_path):
    with LiveCluster(tmp_path / "bk", bookie_count=4) as cluster:
        zk = KazooClient(hosts=cluster.zk_connect_string)
        zk.start(timeout=30)
        spare = cluster.bookies[3]
        spare.stop()  # before any write: every ensemble is bookies 1-3, and bookie4 holds nothing
        b1, b2 = cluster.bookies[:2]
        configs = {b.name: _agent_config(tmp_path, b, cluster.metadata_uri) for b in cluster.bookies[:3]}
        agents = {name: AgentProcess(config, tmp_path / f"state-{name}", tmp_path / f"agent-{name}.err")
                  for name, config in configs.items()}
        rows = []
        try:
            for agent in agents.values():
                agent.start()
            for agent in agents.values():
                agent.wait_ready(timeout=60)
            cluster.fill(FILL_LEDGERS, seed=1)
            cluster.fill(ROTATE_LEDGERS, seed=3, deletes="all")  # rotates the logs past them: flushed, damageable
            # Read-only before the damage: the agents scan every few seconds, and one that found the damage
            # while the marks were writable would mark it and try to move it (to no spare: "repairing").
            _set_acl_under(zk, MARKS, READ_ONLY)
            with open_metadata(cluster.metadata_uri) as store:
                b1.stop()
                ledger, entry = _inject(cluster, b1, store, avoid=set())
                b2.stop()
                other, _ = _inject(cluster, b2, store, avoid={ledger})
            for held in (ledger, other):  # as a repairer working on them would
                zk.create(lock_path("/ledgers", held), b"drill", ephemeral=True, makepath=True)
            side_by_side(LiveBookie.start, (b1, b2))
            # A lost bookie's ledgers are not re-replicated during the drill (bookie4 is stopped twice).
            cluster.start_autorecovery("lostBookieRecoveryDelay=1800")
            agent1, agent2 = agents["bookie1"], agents["bookie2"]

            def has(agent, predicate):
                return lambda: (h := agent.health()) and predicate(h) and h

            def followed(ledger_id, key="stage"):
                return lambda h: {r["ledger_id"]: r[key] for r in h["repair"]["following"]}.get(ledger_id)

            wait_for(has(agent1, lambda h: h["findings"].get("corrupt_entry")), 120, "bookie1's damage not found")
            rows.append(_observe(tmp_path, "found", agent1, configs["bookie1"], ledger))
            assert rows[-1]["state"] == "damaged" and "not marked yet" in rows[-1]["reason"]

            _set_acl_under(zk, MARKS, OPEN_ACL_UNSAFE)
            wait_for(has(agent1, lambda h: followed(ledger)(h) == "marked"), 30, "not marked")
            time.sleep(1.5)  # a move tried (busy: the lock is held)
            rows.append(_observe(tmp_path, "marked", agent1, configs["bookie1"], ledger))
            assert rows[-1]["state"] == "marked"
            assert zk.exists(mark_path("/ledgers", ledger)) is not None

            zk.delete(mark_path("/ledgers", ledger))  # what a ReplicationWorker's check of the corrupt copy does
            wait_for(has(agent1, lambda h: followed(ledger, "marks_cleared")(h)), 30, "the clearing went unseen")
            rows.append(_observe(tmp_path, "remarked", agent1, configs["bookie1"], ledger))
            assert rows[-1]["state"] == "repairing" and "ReplicationWorker" in rows[-1]["status_text"]

            spare.start()
            assert cluster.registered(spare.bookie_id)
            zk.delete(lock_path("/ledgers", ledger))
            # Moved once the follow-up has ended L and its finding with it: the finding ends a moment after the
            # follow-up (the agent's next step), and the signals read in that moment would tell two stages.
            health = wait_for(has(agent1, lambda h: any(r["ledger_id"] == ledger for r in h["repair"]["ended"])
                                  and h["state"] == "healthy"), 60, "L was not moved")
            (ended,) = [r for r in health["repair"]["ended"] if r["ledger_id"] == ledger]
            assert "moved from" in ended["why"], ended
            assert [e["what"] for e in ended["events"]].count("marked") >= 2  # filed, and filed again
            rows.append(_observe(tmp_path, "moved", agent1, configs["bookie1"], ledger))
            assert rows[-1]["state"] == "healthy" and rows[-1]["moved_total"] >= 1

            ended_at = ended["ended_ms"] / 1000  # a whole pass that began after L's follow-up ended
            wait_for(has(agent1, lambda h: (s := h["scanners"][0])["pass_started"] > ended_at
                         and s["phase"] == "waiting"), 120, "no pass ended after the move")
            rows.append(_observe(tmp_path, "ended", agent1, configs["bookie1"], ledger))
            assert rows[-1]["state"] == "healthy"
            scanned = subprocess.run([sys.executable, "-c", MAIN, "scan", "--bookie-conf", str(b1.conf),
                                      "--ledger", str(ledger)], cwd=REPO, capture_output=True, text=True,
                                     timeout=120)
            assert scanned.returncode == 0, scanned.stdout + scanned.stderr
            assert f"ledger {ledger}: this bookie is no longer in its ensemble" in scanned.stdout
            assert "every entry this bookie owes is present" not in scanned.stdout

            # M on bookie2: no bookie outside its ensemble once bookie4 is gone again.
            wait_for(has(agent2, lambda h: followed(other)(h) == "marked"), 60, "M not marked")
            spare.stop()
            wait_for(lambda: zk.exists(f"/ledgers/available/{spare.bookie_id}") is None, 60, "bookie4 still there")
            zk.delete(lock_path("/ledgers", other))
            health = wait_for(has(agent2, lambda h: followed(other)(h) == "escalated"), 60, "M not escalated")
            (row,) = [r for r in health["repair"]["following"] if r["ledger_id"] == other]
            failed = [e["at_ms"] for e in row["events"] if e["what"] == "failed"]
            escalated = [e["at_ms"] for e in row["events"] if e["what"] == "escalated"]
            took = (escalated[0] - failed[0]) / 1000
            assert len(failed) >= 3 and escalated[0] - failed[2] < 1000, row["events"]  # at the third failure
            # Tries RETRY_SECONDS and twice that apart, each made within a few seconds of when it is due (a
            # cycle a second; a worker holding the lock at that moment puts a try off by RETRY_SECONDS).
            for (first, then), due in zip(((failed[0], failed[1]), (failed[1], failed[2])),
                                          (RETRY_SECONDS, 2 * RETRY_SECONDS)):
                busy = sum(e["what"] == "busy" for e in row["events"] if first < e["at_ms"] < then)
                gap = (then - first) / 1000
                assert due - 0.5 <= gap <= due + 3.5 + RETRY_SECONDS * busy, \
                    f"tried again {gap:.1f}s after, {due}s due: {row}"
            rows.append(_observe(tmp_path, "escalated", agent2, configs["bookie2"], other))
            assert rows[-1]["state"] == "escalated"
        finally:
            for agent in agents.values():
                if agent.process.poll() is None:
                    agent.terminate()
            cluster.stop_autorecovery()
            zk.stop()
            zk.close()
    print(f"\nledger {ledger} (entry {entry}) on bookie1, ledger {other} on bookie2; escalated {took:.1f}s after "
          f"the first failed move")
    print("| stage | /health | status | /metrics state | marks --config | alerts (promtool) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['stage']} | {r['http']} {r['state']} ({r['reason'] or '-'}) | {r['status']} | {r['gauge']} "
              f"(moved_total {r['moved_total']:g}) | {r['marks']} | {r['alerts']} |")
