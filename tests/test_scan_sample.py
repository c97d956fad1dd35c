"""Scans of generated bookies with damage the corpus does not have."""

import json

from scanner.cli import main
from scanner.sample.bookie_writer import index_file_path
from scanner.sample.sample_cluster import build_sample


def scan(capsys, sample, *extra):
    status = main(["scan", "--full-speed", "--bookie-conf", str(sample.bookie_conf), "--metadata", f"file:{sample.dump}",
                   "--format", "json", *extra])
    return status, json.loads(capsys.readouterr().out)


def test_a_garbled_index_file_is_a_missing_ledger_not_a_crash(tmp_path, capsys):
    sample = build_sample(tmp_path / "s")
    idx = index_file_path(sample.ledger_dir / "current", 1)
    idx.write_bytes(b"XXXX" + idx.read_bytes()[4:])
    status, report = scan(capsys, sample, "--ledger", "1")
    [finding] = report["findings"]
    assert status == 1
    assert finding["category"] == "missing_ledger" and finding["ledger_id"] == 1
    assert "index is unreadable" in finding["detail"] and "signature" in finding["detail"]


def test_an_entry_log_gone_before_its_turn_is_not_a_finding(tmp_path, capsys):
    import tempfile

    from scanner.metadata.snapshot import SnapshotStore
    from scanner.scan.full_pass import BookiePass
    from scanner.storage.bookie import open_bookie
    from scanner.storage.layout import discover_layout

    sample = build_sample(tmp_path / "s")
    layout = discover_layout(sample.bookie_conf)
    with tempfile.TemporaryDirectory() as work, open_bookie(layout, work_dir=work) as storage, \
            SnapshotStore(sample.dump) as store, \
            BookiePass(storage, store, layout.bookie_id, None, lambda: open_bookie(layout, work_dir=work)) as logs:
        [listed] = [log for log in logs.log_files if log.entry_log_id == 2]
        listed.path.unlink()  # garbage collection removed it after the scanner listed it
        assert logs.walk(listed) == [] and logs.totals.entry_logs_scanned == 0
    # asked for by name on the command line, a log that is not there is a mistake, not "no findings"
    assert main(["scan", "--full-speed", "--bookie-conf", str(sample.bookie_conf), "--metadata", f"file:{sample.dump}",
                 "--entry-log", "2"]) == 2
    assert "entry log 2 (2.log) is in none of the ledger dirs" in capsys.readouterr().err
