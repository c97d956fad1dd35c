"""A ledger closed moments ago is judged once its last entries have had time to reach this bookie.

A writer closes a ledger once an ack quorum holds each entry; with an ack quorum smaller than the write
quorum, a bookie of the write set can still be receiving the last entries after the close. Seen on the live
cluster: a ledger closed half a second before a pass judged it was reported missing 39 entries on a bookie
that had them a moment later, and marked under-replicated for nothing. The agent waits so in its pass, and a
SIGTERM meanwhile stops it at once (it stopped once the wait was over, up to 15 s later).
"""

from __future__ import annotations

import logging
import os
import signal
import time
import types

import pytest

from scanner.metadata.ledger_paths import ledger_path
from scanner.metadata.uri import open_metadata
from scanner.sample.sample_cluster import build_sample
from scanner.scan.full_pass import BookiePass
from scanner.scan.pacing import Unpaced
from scanner.storage.bookie import open_bookie
from scanner.storage.indexfile import find_index_file
from scanner.storage.layout import discover_layout
from test_agent_service import AgentProcess, wait_for, write_config
import scanner.scan.confirmation as confirmation

HEALTHY = 4  # a closed ledger of the sample that the sample bookie holds in full
SETTLE = 2.0


@pytest.fixture
def just_closed(tmp_path, zookeeper, zk_client, zk_load_dump):
    """The sample bookie with ledger ``HEALTHY``'s index file away (its entries not arrived), the ledger's metadata
    changed now (as its close changes it), a ZooKeeper store, and ``arrives(on_wait)``: what happens while the
    pass waits for the ledger to settle."""
    sample = build_sample(tmp_path / "sample")
    chroot = zk_load_dump(sample.dump)
    layout = discover_layout(sample.bookie_conf)
    index_file = find_index_file(layout.index_current_dirs, HEALTHY)
    away = tmp_path / "away.idx"
    os.rename(index_file, away)
    store = open_metadata(f"zk://{zookeeper.connect_string}{chroot}/ledgers")
    path = ledger_path(store.manager, store.root, HEALTHY)
    zk_client.set(path, zk_client.get(path)[0])  # the close: same bytes here, a change of the znode all the same
    pacer = _SettlingPacer()

    def arrives(on_wait):
        pacer.on_wait = on_wait

    yield types.SimpleNamespace(layout=layout, store=store, arrives=arrives, waits=pacer.waits, pacer=pacer,
                                uri=f"zk://{zookeeper.connect_string}{chroot}/ledgers", sample=sample,
                                restore=lambda: os.rename(away, index_file))
    store.close()


class _SettlingPacer(Unpaced):
    """Unpaced reads; a pause (the pass waiting for a ledger to settle) is recorded, and ``on_wait`` runs first."""

    def __init__(self):
        self.waits = []
        self.on_wait = lambda: None

    def pause(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.on_wait()
        time.sleep(seconds)


def _findings_about(layout, store, scratch, ledger_id, pacer, settle_seconds=SETTLE):
    with BookiePass(open_bookie(layout, scratch), store, layout.bookie_id, scratch,
                    lambda: open_bookie(layout, scratch), pacer, settle_seconds=settle_seconds) as whole:
        try:
            return [f for f in whole.run() if f.ledger_id == ledger_id and not f.category.informational]
        finally:
            whole.storage.close()


def test_entries_that_arrive_while_a_just_closed_ledger_settles_are_not_missing(just_closed, tmp_path, caplog):
    just_closed.arrives(just_closed.restore)
    with caplog.at_level(logging.INFO, logger=confirmation.__name__):
        assert _findings_about(just_closed.layout, just_closed.store, tmp_path, HEALTHY, just_closed.pacer) == []
    assert len(just_closed.waits) == 1 and 0 < just_closed.waits[0] <= SETTLE
    assert f"1 ledger(s) changed in the last {SETTLE:g}s (first: {HEALTHY})" in caplog.text


def test_entries_still_absent_once_a_just_closed_ledger_settled_are_missing(just_closed, tmp_path):
    just_closed.arrives(lambda: None)
    found = _findings_about(just_closed.layout, just_closed.store, tmp_path, HEALTHY, just_closed.pacer)
    assert [f.category.value for f in found] == ["missing_ledger"]
    assert len(just_closed.waits) == 1


def test_a_ledger_whose_metadata_settled_long_ago_is_judged_without_waiting(just_closed, tmp_path):
    just_closed.arrives(just_closed.restore)
    found = _findings_about(just_closed.layout, just_closed.store, tmp_path, HEALTHY, just_closed.pacer,
                            settle_seconds=0.0)
    assert [f.category.value for f in found] == ["missing_ledger"] and just_closed.waits == []


def test_sigterm_while_a_just_closed_ledger_settles_stops_the_agent_at_once(just_closed, tmp_path):
    config = write_config(tmp_path, just_closed.sample, just_closed.uri, settle_seconds=60)
    log = tmp_path / "agent.err"
    agent = AgentProcess(config, tmp_path / "state", log).start()
    try:
        # The agent's settling time, as its config sets it: the ledger changed just before the agent started.
        wait_for(lambda: log.exists() and f"changed in the last 60s (first: {HEALTHY}): judged again in"
                 in log.read_text(), 30, "the pass did not wait for the ledger to settle")
        asked = time.monotonic()
        agent.process.send_signal(signal.SIGTERM)
        assert agent.process.wait(timeout=30) == 0
        assert time.monotonic() - asked < 4.0, log.read_text()[-2000:]
        assert "missing_ledger" not in log.read_text()  # stopped before judging: nothing said of the ledger
    finally:
        if agent.process.poll() is None:
            agent.kill()
