"""The scale benchmark's generated bookies: in BookKeeper's formats, clean, and damage in them is found.

If the generator and the scanner disagree, the benchmark measures a scan of findings, not of a
healthy bookie; these tests hold the generator to the readers and to the metadata it writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from scanner.cli import main
from scanner.metadata.snapshot import SnapshotStore
from scanner.storage.dbstorage import DbLedgerIndex
from scanner.storage.entry import DigestType
from scanner.storage.entrylog import EntryLog
from scanner.storage.indexfile import IndexFile, index_file_path, indexed_ledger_ids
from scanner.storage.layout import discover_layout

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from scale_bookie import BOOKIE, ORDERS, Shape, digest_type, generate, held_entries  # noqa: E402

SHAPE = dict(ledgers=300, entry_logs=7, entry_size=100, entries_per_ledger=4)


def scan_json(bookie, capsys) -> tuple[int, dict]:
    status = main(["scan", "--full-speed", "--bookie-conf", str(bookie.bookie_conf), "--metadata", f"file:{bookie.dump}",
                   "--format", "json"])
    return status, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("storage", ["interleaved", "db"])
def test_a_generated_bookie_is_clean_and_its_index_matches_its_logs(tmp_path, capsys, storage, order):
    shape = Shape(storage, **SHAPE, order=order)
    bookie = generate(shape, tmp_path / "bookie")
    assert len(bookie.entry_logs) == shape.entry_logs
    status, report = scan_json(bookie, capsys)
    assert status == 0 and report["findings"] == []
    assert report["summary"]["entries_verified"] == shape.entries
    assert report["summary"]["ledgers_checked"] == shape.ledgers

    walked = {}
    for path in bookie.entry_logs:
        with EntryLog(path, int(path.stem, 16)) as log:
            held = {}
            for record in log.records():
                walked[(record.ledger_id, record.entry_id)] = (log.entry_log_id, record.pos)
                held[record.ledger_id] = held.get(record.ledger_id, 0) + 4 + len(record.entry)
            assert log.ledgers_map() == (held if path != bookie.entry_logs[-1] else None)
            assert not log.problems
    assert {key[0] for key in walked} == set(range(1, shape.ledgers + 1))
    assert all(sorted(e for l, e in walked if l == ledger) == held_entries(ledger, 4) for ledger in (1, 2, 150))
    logs_of_a_ledger = len({walked[(1, e)][0] for e in held_entries(1, 4)})
    # 300 ledgers x 4 entries in 7 logs: a group of 86 ledgers spans two logs; round-robin, each entry is in a log
    assert logs_of_a_ledger == 4 if order == "round-robin" else logs_of_a_ledger <= 2

    layout = discover_layout(bookie.bookie_conf)
    assert (layout.bookie_id, layout.storage) == (BOOKIE, storage)
    assert indexed_locations(layout.index_current_dirs[0], storage, shape.ledgers, tmp_path) == walked
    with SnapshotStore(bookie.dump) as store:
        assert list(store.ledger_ids()) == list(range(1, shape.ledgers + 1))
        assert all(store.ledger(l).digest_type is digest_type(l) for l in store.ledger_ids())
        assert len({digest_type(l) for l in store.ledger_ids()}) == 4


def indexed_locations(current: Path, storage: str, ledgers: int, work_dir: Path) -> dict:
    """(ledger, entry) -> (entry log, pos) as the bookie's index files say."""
    found = {}
    if storage == "db":
        with DbLedgerIndex(current, work_dir) as index:
            assert list(index.ledger_ids()) == list(range(1, ledgers + 1))
            for ledger_id in index.ledger_ids():
                found.update({(ledger_id, e): (loc.entry_log_id, loc.pos) for e, loc in index.locations(ledger_id)})
        return found
    assert sorted(indexed_ledger_ids(current)) == list(range(1, ledgers + 1))
    for ledger_id in range(1, ledgers + 1):
        with IndexFile(current / index_file_path(ledger_id)) as index:
            found.update({(ledger_id, e): (loc.entry_log_id, loc.pos) for e, loc in index.locations()})
    return found


def test_damage_in_a_generated_bookie_is_found(tmp_path, capsys):
    bookie = generate(Shape("interleaved", **SHAPE), tmp_path / "bookie")
    log = bookie.entry_logs[3]
    with EntryLog(log, 3) as entry_log:
        # a DUMMY digest cannot notice a flipped payload byte
        pos, ledger_id = next((r.pos, r.ledger_id) for r in entry_log.records()
                              if digest_type(r.ledger_id) is not DigestType.DUMMY)
    with open(log, "r+b") as f:
        f.seek(pos + 60)  # in the payload whatever the digest's length
        byte = f.read(1)[0]
        f.seek(pos + 60)
        f.write(bytes([byte ^ 0xFF]))
    status, report = scan_json(bookie, capsys)
    assert status == 1
    assert [(f["category"], f["ledger_id"]) for f in report["findings"]] == [("corrupt_entry", ledger_id)]
