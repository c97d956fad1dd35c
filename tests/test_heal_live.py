"""Heal in place on the real BookKeeper 4.16.7 cluster: damage put into the bookies' own files by hand.

One cluster, three kinds of damage, as issue 16 asks:
- a flipped payload byte on one bookie (ledger A, write quorum 2, on bookie2: DbLedgerStorage) is
  local rot: healed, a real BookKeeper client then reads the right bytes from that bookie alone,
  and a scan of the ledger finds nothing;
- an entry of ledger B (write quorum 3) corrupted identically on every copy is write-path damage:
  left alone;
- an entry of ledger B rotten on bookie1 (.idx storage) whose two peers hold different copies that
  both verify is divergent: reported, left alone.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable

import pytest

from livebk import live_cluster  # noqa: F401  (the fixture)
from test_agent_service import AgentProcess, leaked, wait_for
from scanner.cli import main
from scanner.metadata.uri import open_metadata
from scanner.storage.bookie import open_bookie
from scanner.storage.entry import DigestType, DigestVerifier, build_entry, parse_header
from scanner.storage.layout import discover_layout

pytestmark = pytest.mark.live

PAYLOAD_AT = 100  # the byte flipped, counted from the start of the payload
_HEX_ROW = re.compile(r"^\|[0-9a-f]{8}\|((?: [0-9a-f]{2}){1,16})", re.MULTILINE)


def stored_entry(bookie, ledger_id: int, entry_id: int) -> tuple[str, int, bytes]:
    """(entry log path, offset, bytes) of the entry's record in the bookie's files, read-only."""
    layout = discover_layout(bookie.conf)
    with tempfile.TemporaryDirectory() as scratch, open_bookie(layout, work_dir=scratch) as storage:
        location = dict(storage.locations(ledger_id))[entry_id]
        path = storage.entry_log_path(ledger_id, location.entry_log_id)
    with open(path, "rb") as log:
        log.seek(location.pos - 4)
        length = int.from_bytes(log.read(4), "big")
        return str(path), location.pos, log.read(length)


def overwrite(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as log:
        log.seek(offset)
        log.write(data)


def flipped(entry: bytes, digest_length: int) -> bytes:
    at = 32 + digest_length + PAYLOAD_AT
    return entry[:at] + bytes([entry[at] ^ 0xFF]) + entry[at + 1:]


def damage(bookie, changes: list[tuple[int, int, Callable[[bytes], bytes]]]) -> None:
    """Stop the bookie, rewrite entries in its entry logs in place (same length), start it again."""
    bookie.stop()
    for ledger_id, entry_id, change in changes:
        path, pos, entry = stored_entry(bookie, ledger_id, entry_id)
        new = change(entry)
        assert len(new) == len(entry) and new != entry
        overwrite(path, pos, new)
    bookie.start()


def run_json(capsys, *argv: str) -> tuple[int, dict]:
    status = main(list(argv) + ["--format", "json"])
    return status, json.loads(capsys.readouterr().out)


def outcomes(heal_report: dict) -> list[tuple[int, str, str]]:
    return [(r["entry_id"], r["verdict"], r["action"]) for r in heal_report["results"]]


def damaged_in_scan(capsys, bookie, ledger_id: int) -> set[int]:
    _, report = run_json(capsys, "scan", "--full-speed", "--bookie-conf", str(bookie.conf), "--ledger", str(ledger_id))
    return {e for f in report["findings"] if f["category"] in ("corrupt_entry", "lost_entry")
            for first, last in f["entries"] for e in range(first, last + 1)}


def read_from_one_bookie(cluster, bookie, ledger_id: int, entry_id: int) -> bytes:
    """The entry as BookKeeper's own client (BookieShell readledger -b) gets it from ``bookie`` alone."""
    shell = cluster.shell("readledger", "-l", str(ledger_id), "-fe", str(entry_id), "-le", str(entry_id + 1),
                          "-b", bookie.bookie_id, "-m")
    assert f"Eid={entry_id}" in shell.stdout, shell.stdout[-3000:] + shell.stderr[-3000:]
    return bytes.fromhex("".join(_HEX_ROW.findall(shell.stdout)))


def test_local_rot_healed_write_path_and_divergent_left_alone(live_cluster, capsys, tmp_path):
    cluster = live_cluster
    cluster.write(seconds=8)
    cluster.wait_for_writer()
    store = open_metadata(cluster.metadata_uri)
    try:
        ledgers = [store.ledger(i) for i in sorted(store.ledger_ids())]
    finally:
        store.close()
    # The writer alternates write quorum 2 and 3 and digest types; a DUMMY digest verifies anything.
    a, b = (next(m for m in ledgers if m.write_quorum == wq and m.digest_type is not DigestType.DUMMY) for wq in (2, 3))
    assert a.is_closed and b.is_closed
    bookie1, bookie2, bookie3 = cluster.bookies  # bookie2: DbLedgerStorage
    (_, a_bookies), = a.segments
    rot_entry = next(e for e in range(3, a.last_entry_id) if a_bookies[e % 3] == bookie2.bookie_id)
    write_path_entry, divergent_entry = 5, 9
    verifier_a = DigestVerifier(a.digest_type, a.password)
    digest_a, digest_b = verifier_a.digest_length, DigestVerifier(b.digest_type, b.password).digest_length
    good = stored_entry(bookie2, a.ledger_id, rot_entry)[2]
    assert verifier_a.verify(memoryview(good))

    def other_verifying_copy(entry: bytes) -> bytes:
        h = parse_header(entry)
        payload = bytes(x ^ 0x5A for x in entry[32 + digest_b:])
        return build_entry(h.ledger_id, h.entry_id, h.last_add_confirmed, h.length, payload, b.digest_type, b.password)

    def flip_a(entry):
        return flipped(entry, digest_a)

    def flip_b(entry):
        return flipped(entry, digest_b)

    damage(bookie2, [(a.ledger_id, rot_entry, flip_a),
                     (b.ledger_id, write_path_entry, flip_b), (b.ledger_id, divergent_entry, other_verifying_copy)])
    damage(bookie1, [(b.ledger_id, write_path_entry, flip_b), (b.ledger_id, divergent_entry, flip_b)])
    damage(bookie3, [(b.ledger_id, write_path_entry, flip_b)])
    assert damaged_in_scan(capsys, bookie2, a.ledger_id) == {rot_entry}
    assert damaged_in_scan(capsys, bookie1, b.ledger_id) == {write_path_entry, divergent_entry}

    # A dry run (the default) judges and writes nothing.
    state = tmp_path / "state"
    status, dry = run_json(capsys, "heal", "--bookie-conf", str(bookie2.conf), "--ledger", str(a.ledger_id),
                           "--state-dir", str(state))
    assert status == 0
    assert outcomes(dry) == [(rot_entry, "local_rot", "would_heal")]
    assert not (state / "heals.jsonl").exists()
    assert stored_entry(bookie2, a.ledger_id, rot_entry)[2] != good

    status, healed = run_json(capsys, "heal", "--bookie-conf", str(bookie2.conf), "--ledger", str(a.ledger_id),
                              "--no-dry-run", "--state-dir", str(state))
    assert status == 0, healed
    assert outcomes(healed) == [(rot_entry, "local_rot", "healed")]
    journal = [json.loads(line) for line in (state / "heals.jsonl").read_text().splitlines()]
    assert [(j["ledger_id"], j["entry_id"], j["action"]) for j in journal] == [(a.ledger_id, rot_entry, "healed")]
    assert read_from_one_bookie(cluster, bookie2, a.ledger_id, rot_entry) == good
    # On disk once the bookie has flushed (every second here): then a scan finds nothing.
    wait_for(lambda: not damaged_in_scan(capsys, bookie2, a.ledger_id), 30, "the scan still finds the damage")

    status, left = run_json(capsys, "heal", "--bookie-conf", str(bookie1.conf), "--ledger", str(b.ledger_id),
                            "--no-dry-run", "--state-dir", str(state))
    assert status == 1
    assert sorted(outcomes(left)) == [(write_path_entry, "write_path", "left_alone"),
                                      (divergent_entry, "divergent", "left_alone")]
    assert damaged_in_scan(capsys, bookie1, b.ledger_id) == {write_path_entry, divergent_entry}


def test_the_agent_heals_local_rot_it_finds_and_counts_it(live_cluster, tmp_path):
    cluster = live_cluster
    cluster.write(seconds=4)
    cluster.wait_for_writer()
    store = open_metadata(cluster.metadata_uri)
    try:
        a = next(m for m in map(store.ledger, sorted(store.ledger_ids()))
                 if m.write_quorum == 2 and m.digest_type is not DigestType.DUMMY)
    finally:
        store.close()
    bookie1 = cluster.bookies[0]
    (_, a_bookies), = a.segments
    rot_entry = next(e for e in range(a.last_entry_id) if a_bookies[e % 3] == bookie1.bookie_id)
    digest_length = DigestVerifier(a.digest_type, a.password).digest_length
    good = stored_entry(bookie1, a.ledger_id, rot_entry)[2]
    damage(bookie1, [(a.ledger_id, rot_entry, lambda e: flipped(e, digest_length))])

    state = tmp_path / "state"
    config = tmp_path / "scanner.toml"
    config.write_text(f'[bookie]\nconf = "{bookie1.conf}"\n'
                      f'[agent]\nstate_dir = "{state}"\nlisten = "127.0.0.1:0"\nperiod_days = 1\nstart_jitter_minutes = 0\n'
                      '[throttle]\ndisk_backoff = false\n[repair]\nheal = true\n')
    agent = AgentProcess(config, state, tmp_path / "agent.log").start()
    try:
        agent.wait_ready(timeout=60)
        agent.post_suspect({"ledger": a.ledger_id})
        journal = state / "heals.jsonl"
        wait_for(lambda: journal.exists() and "healed" in journal.read_text(), 90,
                 f"no heal journaled; agent log: {(tmp_path / 'agent.log').read_text()[-3000:]}")
        record = json.loads(journal.read_text().splitlines()[0])
        assert (record["ledger_id"], record["entry_id"], record["verdict"], record["action"]) == \
            (a.ledger_id, rot_entry, "local_rot", "healed")
        healed = re.search(r'^bookie_scanner_heals_total\{(.*)\} (\S+)$', agent.metrics(), re.MULTILINE)
        assert healed and 'action="healed"' in healed.group(1) and float(healed.group(2)) == 1.0
        # The heal used the ledger's master key; neither it nor the password is journaled, logged or served.
        served = json.dumps(agent.health()) + agent.metrics() + (tmp_path / "agent.log").read_text()
        assert leaked(journal.read_text() + served, [a.password]) == []
    finally:
        assert agent.terminate() == 0
    # InterleavedLedgerStorage writes the healed copy's entry log and index at its next checkpoint
    # (an entry log rotation, or a clean shutdown); until then it sits in the journal.
    bookie1.stop()
    assert stored_entry(bookie1, a.ledger_id, rot_entry)[2] == good
