"""`bookie-scanner inspect`: one entry log, one index file, one ledger's locations and metadata."""

import json

from corpus import CORPUS, scan_args
from scanner.cli import main
from scanner.metadata.snapshot import SnapshotStore
from scanner.storage.entry import master_key

DUMP = f"file:{CORPUS / 'zk-dump.json'}"
INDEX_5 = CORPUS / "bookie1" / "ledgers" / "current" / "0" / "5" / "5.idx"
with SnapshotStore(CORPUS / "zk-dump.json") as _store:
    PASSWORD_5 = _store.ledger(5).password


def run_json(capsys, *args):
    status = main(["inspect", *args, "--format", "json"])
    return status, json.loads(capsys.readouterr().out)


def test_entry_log_records_carry_digest_verdicts(capsys):
    log = CORPUS / "corrupted" / "bookie1-corrupted" / "ledgers" / "current" / "0.log"
    status, out = run_json(capsys, "entry-log", str(log), "--metadata", DUMP)
    bad = [(r["ledger_id"], r["entry_id"]) for r in out["records"] if r["digest"] == "DIGEST MISMATCH"]
    assert status == 1 and bad == [(123456789, 8)]
    assert {r["digest"] for r in out["records"]} <= {"ok", "DIGEST MISMATCH", "unchecked"}
    assert out["header"]["ledgers_map_offset"] > 0 and out["problems"] == []


def test_entry_log_cut_short_shows_its_problems(capsys):
    log = CORPUS / "corrupted" / "bookie1-corrupted" / "ledgers" / "current" / "1.log"
    status, out = run_json(capsys, "entry-log", str(log))
    assert status == 1
    assert any("ledger 17 entry 68" in p for p in out["problems"])


def test_index_file_header_and_slots(capsys):
    status, out = run_json(capsys, "index", str(INDEX_5))
    assert status == 0 and [s["entry_id"] for s in out["entries"]] == list(range(20))
    assert out["master_key"] is None  # a write credential: only when asked for
    status, out = run_json(capsys, "index", str(INDEX_5), "--show-secrets")
    assert status == 0 and out["master_key"] == master_key(PASSWORD_5).hex()


def test_master_keys_are_printed_only_with_show_secrets(capsys):
    key = master_key(PASSWORD_5).hex()
    for args in (["index", str(INDEX_5)], ["locations", *scan_args("bookie1"), "--ledger", "5"]):
        assert main(["inspect", *args]) == 0
        hidden = capsys.readouterr().out
        assert key not in hidden and "master key hidden (--show-secrets)" in hidden
        assert main(["inspect", *args, "--show-secrets"]) == 0
        assert f"master key {key}" in capsys.readouterr().out
    status, out = run_json(capsys, "locations", *scan_args("bookie1"), "--ledger", "5")
    assert out["index"]["master_key"] is None


def test_locations_in_db_storage(capsys):
    status, out = run_json(capsys, "locations", *scan_args("bookie3"), "--ledger", "10")
    assert status == 0 and out["storage"] == "db" and out["entries"]
    assert all(s["offset"] >= 1028 for s in out["entries"])


def test_ledger_metadata_from_a_dump(capsys):
    status, out = run_json(capsys, "ledger", "--metadata", DUMP, "--ledger", "46")
    assert status == 0
    assert "127.0.0.1:3183" in json.dumps(out)
