"""The README's demo: a generated bookie with injected faults, scanned against an embedded dump."""

import json

from scanner.cli import main
from scanner.sample.sample_cluster import build_sample


def test_demo_finds_exactly_the_injected_faults(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "the scan found every injected fault and nothing else" in out
    for category in ("lost_entry", "corrupt_entry", "missing_ledger", "missing_entry", "damaged_entry_log",
                     "orphan_ledger"):
        assert category in out


def test_demo_sample_can_be_kept_and_scanned_again(tmp_path, capsys):
    keep = tmp_path / "sample"
    assert main(["demo", "--keep", str(keep), "--format", "json"]) == 0
    capsys.readouterr()
    status = main(["scan", "--full-speed", "--bookie-conf", str(keep / "bk_server.conf"), "--metadata",
                   f"file:{keep / 'zk-dump.json'}", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 1
    assert report["summary"]["findings"] == {"corrupt_entry": 1, "damaged_entry_log": 2, "lost_entry": 1,
                                             "missing_entry": 1, "missing_ledger": 1, "orphan_ledger": 1}


def test_sample_is_deterministic(tmp_path):
    first = build_sample(tmp_path / "a")
    second = build_sample(tmp_path / "b")
    assert first.faults == second.faults
    for path in sorted((tmp_path / "a" / "bookie").rglob("*.log")):
        twin = tmp_path / "b" / "bookie" / path.relative_to(tmp_path / "a" / "bookie")
        assert path.read_bytes() == twin.read_bytes()
