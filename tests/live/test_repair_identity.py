"""``bookie-scanner repair`` on a cluster whose every bookie has a custom ``bookieId`` (BookKeeper 4.13+, as on
Kubernetes): the damaged bookie is found by its id, scanned, and its rotten copy moved to another bookie known
only by name, every copy then read back by BookKeeper's own client. A peer whose registration advertises TLS
(this agent's client has none) makes the move impossible: refused with that reason, nothing copied, the
metadata as it was.
"""

from __future__ import annotations

import json

from kazoo.client import KazooClient

from live.test_repair_command import _two_flushed_ledgers, flip_payload
from livebk import LiveCluster
from scanner.cli import main
from scanner.metadata.bookie_registry import registration_path
from scanner.metadata.uri import open_metadata
from scanner.storage.entry import DigestVerifier
from scanner.storage.layout import discover_layout
from test_bookie_identity import registration_bytes

NAMES = {n: f"bookie-{n}.bookies.livebk.test" for n in range(1, 5)}


def _rot(bookie, meta) -> None:
    fragment = meta.fragments()[0]
    index = fragment.bookie_index(bookie.bookie_id)
    entry = next(e for e in range(5, meta.last_entry_id) if fragment.holds(index, e))
    flip_payload(bookie, meta.ledger_id, entry, DigestVerifier(meta.digest_type, meta.password).digest_length)


def repair(capsys, bookie, ledger_id: int) -> tuple[int, dict]:
    status = main(["repair", "--bookie-conf", str(bookie.conf), "--ledger", str(ledger_id), "--no-dry-run",
                   "--format", "json"])
    (attempt,) = json.loads(capsys.readouterr().out)["attempts"]
    return status, attempt


def test_custom_bookie_ids_are_repaired_from_and_to_and_a_tls_peer_is_refused(tmp_path, capsys):
    with LiveCluster(tmp_path / "bk", bookie_count=4, custom_ids=NAMES) as cluster:
        bookie2 = cluster.bookies[1]
        assert discover_layout(bookie2.conf).bookie_id == NAMES[2]
        a, b = _two_flushed_ledgers(cluster, bookie2)
        bookie2.stop()
        _rot(bookie2, a)
        _rot(bookie2, b)
        bookie2.start()

        status, moved = repair(capsys, bookie2, a.ledger_id)
        assert status == 0 and moved["outcome"] == "moved", moved
        (move,) = moved["moves"]
        assert move["from"] == NAMES[2] and move["to"] in NAMES.values() and move["to"] not in a.segments[0][1]
        assert cluster.read_every_copy([a.ledger_id]).bad() == []

        # A peer of b advertises TLS: its copies cannot be read by this client.
        peer = next(x for x in b.segments[0][1] if x != NAMES[2])
        client = KazooClient(hosts=cluster.zk_connect_string)
        client.start()
        try:
            path = registration_path("/ledgers", peer)
            honest, _ = client.get(path)
            port = cluster.bookie(peer).port
            client.set(path, registration_bytes("127.0.0.1", port, extensions=["tls"]))
            with open_metadata(cluster.metadata_uri) as store:
                before = store.ledger(b.ledger_id).segments
            status, refused = repair(capsys, bookie2, b.ledger_id)
            with open_metadata(cluster.metadata_uri) as store:
                after = store.ledger(b.ledger_id).segments
            client.set(path, honest)
        finally:
            client.stop()
            client.close()
        assert status == 1 and refused["outcome"] == "refused", refused
        assert f"bookie {peer} advertises TLS" in refused["detail"] and refused["moves"] == []
        assert after == before
