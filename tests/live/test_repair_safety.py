"""Moves that agree with what BookKeeper's own repairers left behind, on a real five-bookie cluster.

A ledger of write quorum 3 whose fragment BookKeeper's ``shell recover`` moved off one bookie holds
copies that differ from the writer's in their last-add-confirmed field and digest (the recovery re-adds
every entry with the LAC it knows), the same entries all the same. Damage on another bookie of that
ledger is then local rot with two good peers, not "replicas that disagree": the move must happen, and
BookKeeper's own client must read every entry in order from every bookie of the new ensemble. The bookie
``shell recover`` moved the fragment away from still holds the ledger outside its ensembles (its garbage
collector will delete it): with another bookie to go to, it is not the move's target.

A bookie whose process dies while its agent moves a damaged fragment: the Auditor marks every ledger
of the dead bookie, and no mark may go while the dead bookie still holds a fragment of its ledger,
whoever (the agent, BookKeeper's worker) moves what.

Damage in most of a bookie's entry logs is a failing disk: the agent's breaker trips within its first
pass, at most its hourly budget of moves happens, and the operator is told once.
"""

from __future__ import annotations

import json
import tempfile
import time

from kazoo.client import KazooClient

from live.test_repair_command import _two_flushed_ledgers, flip_payload
from live.test_repair_loop import _agent_config
from livebk import LiveBookie, LiveCluster, side_by_side
from scanner.cli import main
from scanner.metadata.ledger import LedgerMetadata
from scanner.metadata.uri import open_metadata
from scanner.repair.marks import UnderreplicationMarks
from scanner.storage.bookie import open_bookie
from scanner.storage.entry import DigestType, DigestVerifier
from scanner.storage.layout import discover_layout
from test_agent_service import AgentProcess, wait_for


def test_a_fragment_recovered_by_bookkeeper_is_moved_when_another_copy_rots(tmp_path, capsys):
    with LiveCluster(tmp_path / "bk", bookie_count=5) as cluster:
        bookie2 = cluster.bookies[1]
        _, ledger = _two_flushed_ledgers(cluster, bookie2)  # write quorum 3, bookie2 in its only ensemble
        recovered = next(b for b in ledger.segments[0][1] if b != bookie2.bookie_id)
        shell = cluster.shell("recover", "-f", "-l", str(ledger.ledger_id), recovered)
        assert shell.returncode == 0, shell.stderr[-3000:]
        with open_metadata(cluster.metadata_uri) as store:
            after_recover = store.ledger(ledger.ledger_id)
        ensemble = after_recover.segments[0][1]
        assert recovered not in ensemble and bookie2.bookie_id in ensemble
        # The copies now differ in their LAC field: BookKeeper's client still reads them all as good.
        assert cluster.read_every_copy([ledger.ledger_id]).bad() == []

        bookie2.stop()
        flip_payload(bookie2, ledger.ledger_id, 7, DigestVerifier(ledger.digest_type, ledger.password).digest_length)
        bookie2.start()
        status = main(["repair", "--bookie-conf", str(bookie2.conf), "--ledger", str(ledger.ledger_id),
                       "--no-dry-run", "--state-dir", str(tmp_path / "state"), "--format", "json"])
        report = json.loads(capsys.readouterr().out)
        (attempt,) = report["attempts"]
        assert status == 0 and attempt["outcome"] == "moved", attempt
        (move,) = attempt["moves"]
        assert move["from"] == bookie2.bookie_id
        assert move["to"] not in ensemble and move["to"] != recovered  # the one still holding the ledger: last

        with open_metadata(cluster.metadata_uri) as store:
            now = store.ledger(ledger.ledger_id).segments[0][1]
        assert bookie2.bookie_id not in now and move["to"] in now
        view = cluster.read_every_copy([ledger.ledger_id])
        assert view.bad() == [] and all(len(p) == 1 for p in view.payloads().values())
        assert len(view.copies) == (ledger.last_entry_id + 1) * 3


def _ledger_in_two_fragments_on_bookie2(cluster) -> LedgerMetadata:
    """A closed ledger with two fragments naming the five-bookie kit's bookie2: written by BookKeeper's client on
    bookies 2-4, bookie3 stopped halfway and bookie5 taking its place."""
    first, second, third, fourth, fifth = cluster.bookies
    side_by_side(LiveBookie.stop, (first, fifth))
    ledger_id = cluster.split_ledger(leaving=third, joining=fifth)
    first.start()
    with open_metadata(cluster.metadata_uri) as store:
        meta = store.ledger(ledger_id)
    assert [second.bookie_id in f.bookies for f in meta.fragments()] == [True, True], meta
    assert {third.bookie_id, fourth.bookie_id} <= set(meta.segments[0][1])
    return meta


def test_a_bookie_killed_while_its_agent_repairs_loses_no_mark_and_ends_re_replicated(tmp_path):
    # The agent of bookie2 files a mark for its damaged ledger and moves the damaged fragment; bookie2's
    # process dies meanwhile and the Auditor marks every ledger of it. The mark of the damaged ledger asks
    # for its other fragment on the dead bookie too: it must stay until that is re-replicated as well.
    with LiveCluster(tmp_path / "bk", bookie_count=5) as cluster:
        bookie2 = cluster.bookies[1]
        cluster.fill(8, seed=42)  # ledgers of bookie2 besides the damaged one, for the Auditor to mark when it dies
        ledger = _ledger_in_two_fragments_on_bookie2(cluster)
        first = next(f for f in ledger.fragments() if bookie2.bookie_id in f.bookies)
        index = first.bookie_index(bookie2.bookie_id)
        rot = next(e for e in range(first.first_entry_id + 1, first.last_entry_id) if first.holds(index, e))
        bookie2.stop()
        flip_payload(bookie2, ledger.ledger_id, rot, DigestVerifier(ledger.digest_type, ledger.password).digest_length)
        bookie2.start()
        with open_metadata(cluster.metadata_uri) as store:
            on_bookie2 = {m.ledger_id for m in filter(None, map(store.ledger, store.ledger_ids()))
                          if any(bookie2.bookie_id in f.bookies for f in m.fragments())}
        cluster.start_autorecovery("lostBookieRecoveryDelay=8")
        agent = AgentProcess(_agent_config(tmp_path, bookie2, cluster.metadata_uri), tmp_path / "state-bookie2",
                             tmp_path / "agent.log").start()
        client = KazooClient(hosts=cluster.zk_connect_string)
        client.start()
        try:
            marks = UnderreplicationMarks(client, "/ledgers")
            wait_for(lambda: marks.get(ledger.ledger_id) is not None, 180,
                     f"the agent filed no mark: {(tmp_path / 'agent.log').read_text()[-3000:]}")
            bookie2.stop()  # its process dies while its agent goes on

            seen_marked, lost_marks = set(), []
            deadline = time.monotonic() + 420
            while True:
                marked = set(marks.marked_ledgers())  # read before the metadata: a worker updates it first
                with open_metadata(cluster.metadata_uri) as store:
                    naming = {i for i in on_bookie2 if (m := store.ledger(i)) is not None
                              and any(bookie2.bookie_id in f.bookies for f in m.fragments())}
                lost_marks += [i for i in (seen_marked & naming) - marked]
                seen_marked |= marked
                if not naming and not marked:
                    break
                assert time.monotonic() < deadline, (f"still on {bookie2.name}: {sorted(naming)}, marked: {sorted(marked)}; "
                                                     f"{cluster.autorecovery_log[-3000:]}")
                time.sleep(0.5)
        finally:
            agent.terminate()
            client.stop()
            client.close()
        assert lost_marks == []  # no mark went while the dead bookie still held a fragment of its ledger
        with open_metadata(cluster.metadata_uri) as store:
            left = [i for i in sorted(on_bookie2) if store.ledger(i) is not None]
        view = cluster.read_every_copy(left)
        assert view.bad() == [] and all(len(p) == 1 for p in view.payloads().values())


def _rot_in_most_logs(bookie, store) -> int:
    """With the bookie stopped: one payload byte flipped in a record of a closed ledger in every entry log that holds one;
    how many logs (of how many) now hold damage."""
    layout = discover_layout(bookie.conf)
    chosen: dict[int, tuple] = {}
    with tempfile.TemporaryDirectory() as scratch, open_bookie(layout, work_dir=scratch) as storage:
        for ledger_id in storage.ledger_ids():
            meta = store.ledger(ledger_id)
            if meta is None or not meta.is_closed or meta.digest_type is DigestType.DUMMY:
                continue
            digest = DigestVerifier(meta.digest_type, meta.password).digest_length
            for entry_id, location in storage.locations(ledger_id):
                if entry_id > meta.last_entry_id:
                    continue
                chosen.setdefault(location.entry_log_id, (ledger_id, entry_id, digest))
        logs = sum(1 for _ in layout.ledger_current_dirs[0].glob("*.log"))
    for ledger_id, entry_id, digest in chosen.values():
        flip_payload(bookie, ledger_id, entry_id, digest)
    return len(chosen), logs


def test_damage_in_most_entry_logs_trips_the_breaker_within_the_first_pass(tmp_path):
    with LiveCluster(tmp_path / "bk", bookie_count=4) as cluster:
        bookie2 = cluster.bookies[1]
        # Logs full of live records: none is compacted (which would gather the damage of several into one) meanwhile.
        cluster.fill(40, seed=1, deletes="none")
        cluster.fill(6, seed=3, deletes="none")  # rotates the logs past them, so they are flushed
        bookie2.stop()
        with open_metadata(cluster.metadata_uri) as store:
            damaged_logs, logs = _rot_in_most_logs(bookie2, store)
        # Well over the breaker's share (failed_disk_log_share, 10 %; at least 5 logs). Not all logs can be damaged:
        # a log may hold only records of deleted, open or DUMMY ledgers (a loaded run: 19 of 41 logs could be).
        assert damaged_logs >= 5 and damaged_logs * 4 > logs, (damaged_logs, logs)
        bookie2.start()
        config = _agent_config(tmp_path, bookie2, cluster.metadata_uri)
        config.write_text(config.read_text() + "moves_per_hour = 2\n")
        agent = AgentProcess(config, tmp_path / "state-bookie2", tmp_path / "agent.log").start()
        try:
            agent.wait_ready(60)
            report = wait_for(lambda: ((agent.health() or {}).get("repair") or {}).get("breaker", {}).get("tripped")
                              and agent.health()["repair"], 300,
                              f"the breaker did not trip: {(tmp_path / 'agent.log').read_text()[-3000:]}")
            time.sleep(5)  # five more follow-up cycles (one a second): nothing more may move
            report = agent.health()["repair"]
            metrics = agent.metrics()
        finally:
            agent.terminate()
        log = (tmp_path / "agent.log").read_text()
        assert log.count("this bookie's disk looks failed") == 1, log[-3000:]
        moved = [row for row in report["ended"] if " moved from " in row["why"]]
        assert len(moved) <= 2 and report["budget"]["moves_last_hour"] <= 2, report
        assert f'bookie_scanner_repair_breaker_tripped{{bookie="{bookie2.bookie_id}"}} 1.0' in metrics
        assert report["following_total"] >= 3  # marked, and left for the workers
