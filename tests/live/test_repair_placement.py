"""Moves placed as BookKeeper's own rack-aware policy would place them, on six real bookies in three racks.

Bookie N advertises 127.0.0.N; BookKeeper's topology script puts 1-2 in /r1, 3-4 in /r2, 5-6 in /r3, and
Pulsar's /bookies JSON says the same. A rotten copy on bookie2 is moved by ``repair --rack-script``: its
target is one BookKeeper 4.16.7's ``RackawareEnsemblePlacementPolicy.replaceBookie`` (asked 200 times with
the same script, ensemble and writable bookies) picks from; a dry run with racks from Pulsar's JSON names
the same bookie. With ``enforceMinNumRacksPerWriteQuorum`` and the only other bookie of the replaced one's
rack down, BookKeeper gives up, and so does the move: nothing moves and the reason says why.
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
from test_placement_bookkeeper import RACKS, bookkeepers_choices, topology_script


def _racks(ensemble) -> list[str]:
    return [RACKS[int(re.match(r"127\.0\.0\.(\d)", bookie).group(1))] for bookie in ensemble]


def _damageable_ledgers(cluster, bookie):
    """Two closed ledgers (a digest to check, one ensemble, flushed) of ``bookie`` (in /r1): any one, and one whose
    other two bookies are in /r2 and /r3 (so with /r1's other bookie down, an enforced policy has nowhere to go)."""
    for seed in (1, 2, 3, 4, 5, 6):
        cluster.write(seconds=12, seed=seed)
        cluster.wait_for_writer()
        cluster.write(seconds=4, seed=50 + seed)  # rotates the logs past them, so they are flushed
        cluster.wait_for_writer()
        with open_metadata(cluster.metadata_uri) as store:
            mine = [m for m in filter(None, map(store.ledger, store.ledger_ids()))
                    if m.is_closed and m.digest_type is not DigestType.DUMMY and len(m.segments) == 1
                    and bookie.bookie_id in m.segments[0][1] and m.last_entry_id > 20]
        spanning = next((m for m in mine if sorted(_racks(m.segments[0][1])) == ["/r1", "/r2", "/r3"]), None)
        other = next((m for m in mine if m is not spanning), None)
        if spanning is not None and other is not None:
            return other, spanning
    raise AssertionError(f"the writers left no two ledgers of {bookie.name} to damage")


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
        a, b = _damageable_ledgers(cluster, bookie2)
        bookie2.stop()
        for meta in (a, b):
            flip_payload(bookie2, meta.ledger_id, next(e for e in range(5, meta.last_entry_id)
                                                       if meta.fragments()[0].holds(
                                                           meta.fragments()[0].bookie_index(bookie2.bookie_id), e)),
                         DigestVerifier(meta.digest_type, meta.password).digest_length)
        bookie2.start()

        ensemble = list(a.segments[0][1])
        with open_metadata(cluster.metadata_uri) as store:
            writable = sorted(store.bookies().writable)
        (theirs,) = bookkeepers_choices(tmp_path, script, [{
            "ensemble": ensemble, "quorum": a.write_quorum, "replaced": bookie2.bookie_id, "min_racks": 2,
            "enforce": False, "writable": writable}])
        assert theirs, "BookKeeper found no bookie to replace with"

        _, by_pulsar = repair(capsys, bookie2, a.ledger_id, "--pulsar-racks", "--placement", "rackaware")
        status, moved = repair(capsys, bookie2, a.ledger_id, "--rack-script", str(script), "--no-dry-run")
        assert status == 0 and moved["outcome"] == "moved", moved
        (move,) = moved["moves"]
        assert move["to"] in theirs, (move, theirs)
        assert by_pulsar["outcome"] == "would_move" and f"to {move['to']}" in by_pulsar["detail"], by_pulsar
        assert cluster.read_every_copy([a.ledger_id]).bad() == []

        # Enforced: the replaced bookie's rack has no other writable bookie and every other rack is used.
        bookie1.stop()
        with open_metadata(cluster.metadata_uri) as store:
            before = store.ledger(b.ledger_id).segments
        status, refused = repair(capsys, bookie2, b.ledger_id, "--rack-script", str(script), "--enforce-min-racks",
                                 "--no-dry-run")
        assert status == 1 and refused["outcome"] == "no_target", refused
        assert "enforce" in refused["detail"], refused
        with open_metadata(cluster.metadata_uri) as store:
            assert store.ledger(b.ledger_id).segments == before
        (theirs,) = bookkeepers_choices(tmp_path, script, [{
            "ensemble": list(b.segments[0][1]), "quorum": b.write_quorum, "replaced": bookie2.bookie_id,
            "min_racks": 2, "enforce": True, "writable": [w for w in writable if w != bookie1.bookie_id]}])
        assert theirs is None  # BookKeeper gives up too
