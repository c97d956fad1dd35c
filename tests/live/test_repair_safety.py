"""Moves that agree with what BookKeeper's own repairers left behind, on a real five-bookie cluster.

A ledger of write quorum 3 whose fragment BookKeeper's ``shell recover`` moved off one bookie holds
copies that differ from the writer's in their last-add-confirmed field and digest (the recovery re-adds
every entry with the LAC it knows), the same entries all the same. Damage on another bookie of that
ledger is then local rot with two good peers, not "replicas that disagree": the move must happen, and
BookKeeper's own client must read every entry in order from every bookie of the new ensemble. The bookie
``shell recover`` moved the fragment away from still holds the ledger outside its ensembles (its garbage
collector will delete it): it is never the move's target.
"""

from __future__ import annotations

import json

from live.test_repair_command import _two_flushed_ledgers, flip_payload
from livebk import LiveCluster
from scanner.cli import main
from scanner.metadata.uri import open_metadata
from scanner.storage.entry import DigestVerifier


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
        assert move["to"] not in ensemble and move["to"] != recovered  # the one still holding the ledger: never

        with open_metadata(cluster.metadata_uri) as store:
            now = store.ledger(ledger.ledger_id).segments[0][1]
        assert bookie2.bookie_id not in now and move["to"] in now
        view = cluster.read_every_copy([ledger.ledger_id])
        assert view.bad() == [] and all(len(p) == 1 for p in view.payloads().values())
        assert len(view.copies) == (ledger.last_entry_id + 1) * 3
