"""Moves placed as BookKeeper's own rack-aware policy would place them, on six real bookies in three racks.

Bookie N advertises 127.0.0.N; BookKeeper's topology script puts 1-2 in /r1, 3-4 in /r2, 5-6 in /r3, and
Pulsar's /bookies JSON says the same. A rotten copy on bookie2 is moved by ``repair --rack-script``: its
target is one BookKeeper 4.16.7's ``RackawareEnsemblePlacementPolicy.replaceBookie`` (asked 200 times with
the same script, ensemble and writable bookies) picks from; a dry run with racks from Pulsar's JSON names
the same bookie. With ``enforceMinNumRacksPerWriteQuorum`` and the only other bookie of the replaced one's
rack down, BookKeeper gives up, and so does the move: nothing moves and the reason says why; with it
back, the move is made.
"""

from __future__ import annotations

import json
import re

from kazoo.client import KazooClient

from live.test_repair_command import flip_payload
from livebk import LiveCluster
from scanner.cli import main
from scanner.metadata.uri import open_metadata
from scanner.storage.entry import DigestType, DigestVerifier
from scanner.storage.journal import pending_entries
from scanner.storage.layout import discover_layout
from test_placement_bookkeeper import RACKS, bookkeepers_choices, topology_script


def _racks(ensemble) -> list[str]:
    return [RACKS[int(re.match(r"127\.0\.0\.(\d)", bookie).group(1))] for bookie in ensemble]


def _spanning_ledger(cluster, bookie):
    """A closed ledger (a digest to check, one ensemble, flushed) of ``bookie`` (in /r1) whose other two bookies are
    in /r2 and /r3: with /r1's other bookie down, an enforced policy has nowhere to go."""
    for seed in (1, 2, 3, 4, 5, 6):
        cluster.fill(16, seed=seed)
        with open_metadata(cluster.metadata_uri) as store:
            written = list(store.ledger_ids())
        cluster.fill(4, seed=50 + seed, deletes="all")  # rotates the logs past them, so they are flushed
        with open_metadata(cluster.metadata_uri) as store:
            for m in filter(None, map(store.ledger, written)):
                if (m.is_closed and m.digest_type is not DigestType.DUMMY and len(m.segments) == 1
                        and bookie.bookie_id in m.segments[0][1] and m.last_entry_id > 20
                        and sorted(_racks(m.segments[0][1])) == ["/r1", "/r2", "/r3"]):
                    return m
    raise AssertionError(f"the writers left no ledger of {bookie.name} across the three racks")


def repair(capsys, bookie, ledger_id: int, *options: str) -> tuple[int, dict]:
    status = main(["repair", "--bookie-conf", str(bookie.conf), "--ledger", str(ledger_id), "--format", "json",
                   *options])
    (attempt,) = json.loads(capsys.readouterr().out)["attempts"]
    return status, attempt


def test_moves_land_where_bookkeepers_rack_aware_policy_would_put_them(tmp_path, capsys):
    script = topology_script(tmp_path)
    with LiveCluster(tmp_path / "bk", bookie_count=6, distinct_addresses=True) as cluster:
        bookie1, bookie2 = cluster.bookies[:2]
        client = KazooClient(hosts=cluster.zk_connect_string)
        client.start()
        try:
            client.create("/bookies", json.dumps({"default": {
                b.bookie_id: {"rack": RACKS[b.number], "hostname": f"127.0.0.{b.number}"} for b in cluster.bookies
            }}).encode())
        finally:
            client.stop()
            client.close()
        ledger = _spanning_ledger(cluster, bookie2)
        fragment = ledger.fragments()[0]
        index = fragment.bookie_index(bookie2.bookie_id)
        bookie2.stop()
        # Not an entry the journal holds past its last mark: the restart would write it anew, healing the damage.
        journaled = pending_entries(discover_layout(bookie2.conf), {ledger.ledger_id})
        flip_payload(bookie2, ledger.ledger_id, next(e for e in range(5, ledger.last_entry_id) if fragment.holds(index, e)
                                                     and (ledger.ledger_id, e) not in journaled),
                     DigestVerifier(ledger.digest_type, ledger.password).digest_length)
        bookie2.start()
        ensemble = list(ledger.segments[0][1])
        with open_metadata(cluster.metadata_uri) as store:
            writable = sorted(store.bookies().writable)

        # Enforced: the replaced bookie's rack has no other writable bookie and every other rack is used.
        bookie1.stop()
        status, refused = repair(capsys, bookie2, ledger.ledger_id, "--rack-script", str(script),
                                 "--enforce-min-racks", "--no-dry-run")
        assert status == 1 and refused["outcome"] == "no_target", refused
        assert "enforce" in refused["detail"], refused
        with open_metadata(cluster.metadata_uri) as store:
            assert store.ledger(ledger.ledger_id).segments == ledger.segments
        without_bookie1 = [w for w in writable if w != bookie1.bookie_id]
        theirs = bookkeepers_choices(tmp_path, script, [
            {"ensemble": ensemble, "quorum": ledger.write_quorum, "replaced": bookie2.bookie_id, "min_racks": 2,
             "enforce": True, "writable": without_bookie1},
            {"ensemble": ensemble, "quorum": ledger.write_quorum, "replaced": bookie2.bookie_id, "min_racks": 2,
             "enforce": False, "writable": writable}])
        assert theirs[0] is None and theirs[1]  # BookKeeper gives up too; with bookie1 back it has a choice
        bookie1.start()

        _, by_pulsar = repair(capsys, bookie2, ledger.ledger_id, "--pulsar-racks", "--placement", "rackaware")
        status, moved = repair(capsys, bookie2, ledger.ledger_id, "--rack-script", str(script), "--no-dry-run")
        assert status == 0 and moved["outcome"] == "moved", moved
        (move,) = moved["moves"]
        assert move["to"] in theirs[1], (move, theirs)
        assert by_pulsar["outcome"] == "would_move" and f"to {move['to']}" in by_pulsar["detail"], by_pulsar
        assert cluster.read_every_copy([ledger.ledger_id]).bad() == []
