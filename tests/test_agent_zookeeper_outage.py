"""The agent through a ZooKeeper outage: a ``bookie-scanner run`` process scans on while its own
ZooKeeper server is stopped, and when the server comes back on the same port with the same data it
reconnects and files each damaged ledger's mark once."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from scanner.agent.cached_metadata import CachedMetadata
from scanner.metadata.uri import open_metadata
from scanner.repair.marks import UnderreplicationMarks, decode_mark, mark_path
from scanner.sample.sample_cluster import build_sample
from threads import run_in_thread
from test_agent_service import BOOKIE, DAMAGED_LEDGERS, AgentProcess, book_entries, wait_for, write_config
from zookeeper_server import ZooKeeperServer, ZooKeeperSetupError, load_dump

pytestmark = pytest.mark.slow  # a ZooKeeper of its own, stopped and started again

PREFIX = "/outage"
ROOT = PREFIX + "/ledgers"


@pytest.fixture
def own_zookeeper(tmp_path):
    """``own_zookeeper(**server_options) -> (server, client, sample)``: a server of this test's own (the
    session's must never go down) holding the sample bookie's dump, and a client of the test's."""
    started = []

    def start(**server_options):
        server = ZooKeeperServer(tmp_path / "zookeeper", restartable=True, **server_options)
        try:
            server.start()
        except ZooKeeperSetupError as exc:
            pytest.fail(str(exc), pytrace=False)
        client = KazooClient(hosts=server.connect_string, timeout=30)
        started.append((server, client))
        client.start(timeout=30)
        sample = build_sample(tmp_path / "sample")
        load_dump(client, sample.dump, prefix=PREFIX)
        return server, client, sample

    yield start
    for server, client in started:
        try:
            client.stop()
            client.close()
        finally:
            server.stop()


def awaiting_ledgers(state_dir: Path) -> set[int]:
    """The ledgers whose damage the agent recorded but has not marked yet (its findings file)."""
    return {item["finding"]["ledger_id"] for item in book_entries(state_dir) if item["to_mark"]}


def test_the_agent_scans_through_a_zookeeper_outage_and_files_each_mark_once_when_it_is_back(
        tmp_path, own_zookeeper):
    zookeeper, client, sample = own_zookeeper()
    port = zookeeper.port
    state_dir = tmp_path / "state"
    config = write_config(tmp_path, sample, f"zk://{zookeeper.connect_string}{ROOT}", mark=True,
                          period_days=1 / 86400)  # a pass a second
    agent = AgentProcess(config, state_dir, tmp_path / "agent.err").start()
    try:
        agent.wait_ready()
        # Down once the ledger step has read every ledger's metadata (the copies the outage scans on),
        # and before the first filing round after the damage was found (a round every 5 s).
        wait_for(lambda: (s := agent.scanner())["ledgers_total"] > 0 and s["ledgers_done"] == s["ledgers_total"],
                 30, "the first pass's ledger step did not finish")
        zookeeper.stop()
        down_at = time.time()
        down = wait_for(lambda: (h := agent.health()) and not h["zookeeper_connected"] and h, 10,
                        "health still says ZooKeeper is connected")
        assert down["marks"]["filed"] == 0, "marks were filed before the outage began: nothing left to prove"
        passes_at_outage = down["scanners"][0]["passes_completed"]

        # Down: the scanner keeps passing over the bookie on the metadata read before, damage is kept.
        during = wait_for(lambda: (h := agent.health())["scanners"][0]["passes_completed"] >= passes_at_outage + 2
                          and h, 30, "no pass completed while ZooKeeper was down")
        assert agent.process.poll() is None
        assert during["zookeeper_connected"] is False and during["status"] == "degraded"
        assert during["scanners"][0]["error"] is None
        assert during["marks"] == {"enabled": True, "awaiting": 4, "filed": 0, "tracked": {}, "rereplicate": True}
        assert awaiting_ledgers(state_dir) == DAMAGED_LEDGERS  # the entry-log step's corrupt entry too
        seen = book_entries(state_dir)
        assert all(item["last_seen"] > down_at for item in seen)  # every finding met again, and saved

        # Back on the same port with the same data: reconnected, every mark filed.
        zookeeper.restart()
        assert zookeeper.port == port
        back = wait_for(lambda: (h := agent.health()) and h["zookeeper_connected"] and h["marks"]["awaiting"] == 0
                        and h, 30, "the agent did not reconnect and file its marks")
        assert back["status"] == "ok" and back["marks"]["filed"] == len(DAMAGED_LEDGERS)
        # Each followed up (here no bookie can take a move, so a cycle may already have escalated some).
        assert sum(back["marks"]["tracked"].values()) == len(DAMAGED_LEDGERS)
        passes = back["scanners"][0]["passes_completed"]
        wait_for(lambda: agent.scanner()["passes_completed"] >= passes + 2, 30, "scanning stopped after the outage")
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()

    wait_for(lambda: client.connected, 30, "the test's own client did not reconnect")
    assert set(UnderreplicationMarks(client, ROOT).marked_ledgers()) == DAMAGED_LEDGERS
    for ledger_id in DAMAGED_LEDGERS:
        path = mark_path(ROOT, ledger_id)
        assert decode_mark(client.get(path)[0], path).replicas == (BOOKIE,)
    log = (tmp_path / "agent.err").read_text()
    # One line when ZooKeeper is lost and one when it is back, however many reconnects failed between.
    assert log.count("metadata unreachable") == 1 and log.count("metadata reachable again") == 1, log
    assert "Connection dropped" not in log
    assert "Traceback" not in log  # no thread of the agent died or logged a failed step
    filed = Counter(re.findall(r"marked ledger (\d+) under-replicated", log))
    assert filed == Counter({str(ledger): 1 for ledger in DAMAGED_LEDGERS})


def test_cached_metadata_says_reachable_again_on_reconnect_without_waiting_for_a_read(own_zookeeper):
    # Deep in a week-long pass the scanner may read no metadata for days; marks wait on this flag.
    zookeeper, _, _ = own_zookeeper()
    metadata = CachedMetadata(open_metadata(f"zk://{zookeeper.connect_string}{ROOT}"))
    try:
        ledger = metadata.ledger(2)
        zookeeper.stop()
        wait_for(lambda: not metadata.client.connected, 10, "the client did not notice the server stop")
        assert metadata.ledger(2) == ledger  # the copy read before
        assert metadata.connected is False
        zookeeper.restart()
        wait_for(lambda: metadata.client.connected, 30, "the client did not reconnect")
        wait_for(lambda: metadata.connected, 5, "connected only once some read succeeds")
    finally:
        metadata.close()


def test_a_read_the_outage_catches_in_flight_gives_the_copy_read_before_instead_of_waiting_for_zookeeper(
        own_zookeeper):
    # Short sessions: kazoo gives up on a frozen server's answer within seconds and retries the read,
    # and a request made while kazoo reconnects is parked until the server is back.
    zookeeper, _, _ = own_zookeeper(max_session_timeout_ms=4000)
    metadata = CachedMetadata(open_metadata(f"zk://{zookeeper.connect_string}{ROOT}"))
    try:
        ledger = metadata.ledger(2)
        zookeeper.freeze()
        thread, result = run_in_thread(lambda: metadata.ledger(2))
        thread.join(30)
        assert not thread.is_alive(), "the read waits for ZooKeeper to come back"
        assert result["value"] == ledger and metadata.connected is False
        zookeeper.thaw()
        wait_for(lambda: metadata.connected, 30, "not reconnected after the server resumed")
        assert metadata.ledger(2) == ledger
    finally:
        zookeeper.thaw()
        metadata.close()
