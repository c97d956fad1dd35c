"""``bookie-scanner repair`` on a real four-bookie BookKeeper 4.16.7 cluster, damage put into a bookie's own files.

- a flipped payload byte on bookie2 (DbLedgerStorage), ledger A: a dry run says the fragment would
  move and changes nothing; the real run moves bookie2's share of the fragment to the spare bookie,
  every copy verified, and BookKeeper's own client then reads every entry of A, in order, from every
  bookie its metadata names, with good digests, also after bookie2 restarts;
- an entry of ledger B corrupted identically on every copy (the writer's bad bytes): nothing verifies
  anywhere, so nothing moves and the metadata stays as it was.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import time

from json_schemas import assert_valid
from livebk import LiveBookie, LiveCluster, side_by_side
from scanner.cli import main
from scanner.metadata.uri import open_metadata
from scanner.storage.bookie import open_bookie
from scanner.storage.entry import DigestType, DigestVerifier
from scanner.storage.layout import discover_layout
from test_agent_service import leaked

PAYLOAD_AT = 100  # the byte flipped, counted from the start of the payload
WRITING_ROUNDS_SECONDS = 300.0  # rounds of writing for the ledgers a test needs, at most


def flip_payload(bookie, ledger_id: int, entry_id: int, digest_length: int) -> None:
    """With the bookie stopped: flip one payload byte of the entry's record in its entry log."""
    layout = discover_layout(bookie.conf)
    with tempfile.TemporaryDirectory() as scratch, open_bookie(layout, work_dir=scratch) as storage:
        location = dict(storage.locations(ledger_id))[entry_id]
        path = storage.entry_log_path(ledger_id, location.entry_log_id)
    with open(path, "r+b") as log:
        log.seek(location.pos + 32 + digest_length + PAYLOAD_AT)
        byte = log.read(1)[0]
        log.seek(-1, 1)
        log.write(bytes([byte ^ 0xFF]))


def _two_flushed_ledgers(cluster, bookie):
    """Two closed ledgers on ``bookie`` (one segment, a digest that can be checked), B of write quorum 3, written
    before later ledgers rotated the logs past them (so they are flushed). The fill makes one such ledger of
    write quorum 3 in four and deletes about half of what it made, so it can leave none: rounds of a few more
    ledgers go on until there are two (within ``WRITING_ROUNDS_SECONDS``)."""
    cluster.fill(16, seed=1)
    with open_metadata(cluster.metadata_uri) as store:
        written = set(store.ledger_ids())
    deadline = time.monotonic() + WRITING_ROUNDS_SECONDS
    for seed in itertools.count(3, 2):
        if time.monotonic() > deadline:
            break
        cluster.fill(6, seed=seed)  # rotates the logs past the ledgers written so far
        with open_metadata(cluster.metadata_uri) as store:
            ledgers = [m for m in map(store.ledger, sorted(written)) if m is not None]
            mine = [m for m in ledgers if m.is_closed and m.digest_type is not DigestType.DUMMY
                    and len(m.segments) == 1 and bookie.bookie_id in m.segments[0][1] and m.last_entry_id > 20]
            b = next((m for m in mine if m.write_quorum == 3), None)
            a = next((m for m in mine if m is not b), None)
            if a is not None and b is not None:
                return a, b
            written = set(store.ledger_ids())
    raise AssertionError(f"the writers left no two closed ledgers on {bookie.name} to damage: {sorted(written)}")


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    status = main(list(argv) + ["--format", "json"])
    return status, json.loads(capsys.readouterr().out)


def test_repair_moves_a_rotten_copy_away_and_leaves_the_writers_bad_bytes_alone(tmp_path, capsys):
    with LiveCluster(tmp_path / "bk", bookie_count=4) as cluster:
        bookie2 = cluster.bookies[1]
        a, b = _two_flushed_ledgers(cluster, bookie2)
        index = a.segments[0][1].index(bookie2.bookie_id)
        rot = next(e for e in range(5, a.last_entry_id) if (index - e) % 3 < a.write_quorum)
        digest = DigestVerifier(a.digest_type, a.password).digest_length
        holders = [cluster.bookie(bookie_id) for bookie_id in b.segments[0][1]]  # bookie2 among them
        side_by_side(LiveBookie.stop, holders)
        for bookie in holders:
            if bookie is bookie2:
                flip_payload(bookie, a.ledger_id, rot, digest)
            flip_payload(bookie, b.ledger_id, 4, DigestVerifier(b.digest_type, b.password).digest_length)
        side_by_side(LiveBookie.start, holders)
        before = {m.ledger_id: m.segments for m in (a, b)}

        state = tmp_path / "state"
        status, dry = run_json(capsys, "repair", "--bookie-conf", str(bookie2.conf), "--ledger", str(a.ledger_id),
                               "--state-dir", str(state))
        assert status == 0 and [t["outcome"] for t in dry["attempts"]] == ["would_move"], dry
        assert dry["attempts"][0]["damaged_entries"] == [[rot, rot]]
        assert_valid(dry)
        assert main(["repair", "--bookie-conf", str(bookie2.conf), "--ledger", str(a.ledger_id)]) == 0
        assert f"ledger {a.ledger_id} (damaged entries {rot}): would_move: " in capsys.readouterr().out
        assert not (state / "repairs.jsonl").exists()
        with open_metadata(cluster.metadata_uri) as store:
            assert store.ledger(a.ledger_id).segments == before[a.ledger_id]

        status, moved = run_json(capsys, "repair", "--bookie-conf", str(bookie2.conf), "--ledger", str(a.ledger_id),
                                 "--no-dry-run", "--state-dir", str(state))
        assert status == 0, moved
        (attempt,) = moved["attempts"]
        assert attempt["outcome"] == "moved" and attempt["remarked"]
        (move,) = attempt["moves"]
        spare = cluster.bookies[3].bookie_id if cluster.bookies[3].bookie_id not in a.segments[0][1] else None
        assert move["from"] == bookie2.bookie_id and move["to"] not in a.segments[0][1]
        assert spare is None or move["to"] == spare
        journal = [json.loads(line) for line in (state / "repairs.jsonl").read_text().splitlines()]
        assert [(j["ledger_id"], j["outcome"], j["damaged_entries"]) for j in journal] == [
            (a.ledger_id, "moved", [[rot, rot]])]
        with open_metadata(cluster.metadata_uri) as store:
            assert bookie2.bookie_id not in store.ledger(a.ledger_id).segments[0][1]
        view = cluster.read_every_copy([a.ledger_id])
        assert view.bad() == [] and all(len(p) == 1 for p in view.payloads().values())
        assert len(view.copies) == (a.last_entry_id + 1) * a.write_quorum
        bookie2.restart()
        assert cluster.read_every_copy([a.ledger_id]).bad() == []

        status, left = run_json(capsys, "repair", "--bookie-conf", str(bookie2.conf), "--ledger", str(b.ledger_id),
                                "--no-dry-run", "--state-dir", str(state))
        assert status == 1
        (attempt,) = left["attempts"]
        assert attempt["outcome"] == "no_good_copy" and "write_path" in attempt["detail"], attempt
        (answer,) = attempt["answers"]  # entry 4: every peer holds a copy, none verifies
        assert answer["entry_id"] == 4 and {c["state"] for c in answer["copies"]} == {"bad"}, answer
        with open_metadata(cluster.metadata_uri) as store:
            assert store.ledger(b.ledger_id).segments == before[b.ledger_id]
        # The copies were added with the ledgers' master keys; neither they nor the passwords are journaled or shown.
        shown = (state / "repairs.jsonl").read_text() + json.dumps([dry, moved, left])
        assert leaked(shown, [a.password, b.password]) == []
