"""The scan as an operator runs it: Pulsar's configs on copies of the corpus bookies, damaged indexes,
ids that name nothing, metadata that does not decode, and one line on stderr for every mistake."""

from __future__ import annotations

import base64
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from corpus import CORPUS, assert_clean_report, by_category, scan, scan_args, timeless
from scanner.cli import main
from scanner.metadata.ledger import parse_ledger_metadata, serialize_ledger_metadata
from tree_state import snapshot

DUMP = CORPUS / "zk-dump.json"


def pulsar_home(tmp_path: Path, name: str, metadata_uri: str, source: Path | None = None) -> Path:
    """A Pulsar-style install: the bookie's data under data/bookkeeper/ledgers, its conf naming that relative path."""
    home = tmp_path / "pulsar"
    shutil.copytree(source or CORPUS / name / "ledgers", home / "data" / "bookkeeper" / "ledgers")
    conf = (CORPUS / "bookie-configs" / f"{name}.conf").read_text().splitlines()
    replaced = {"ledgerDirectories": "data/bookkeeper/ledgers", "metadataServiceUri": metadata_uri}
    lines = [f"{key}={replaced[key]}" if (key := line.split("=", 1)[0]) in replaced else line for line in conf]
    (home / "conf").mkdir()
    (home / "conf" / "bookkeeper.conf").write_text("\n".join(lines) + "\n")
    return home


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert captured.out == ""
    return line


@pytest.fixture
def pulsar_metadata(zookeeper, zk_load_dump):
    """The corpus metadata in ZooKeeper under a chroot, named as Pulsar's bookies name it."""
    chroot = zk_load_dump(DUMP)
    return f"metadata-store:zk:{zookeeper.connect_string}{chroot}"


def test_pulsar_bookie_with_relative_dirs_and_a_metadata_store_uri(tmp_path, capsys, monkeypatch, pulsar_metadata):
    home = pulsar_home(tmp_path, "bookie3", pulsar_metadata)
    before = snapshot(home / "data")
    conf = str(home / "conf" / "bookkeeper.conf")
    status, report = scan(capsys, "--bookie-conf", conf, "--bookie-home", str(home))
    assert_clean_report("bookie3", status, report)
    monkeypatch.chdir(home)  # where Pulsar starts its bookie: the relative dirs resolve as the bookie's do
    status_here, report_here = scan(capsys, "--bookie-conf", "conf/bookkeeper.conf")
    assert (status_here, timeless(report_here)) == (status, timeless(report))
    assert snapshot(home / "data") == before


def test_relative_dirs_from_elsewhere_say_what_to_pass(tmp_path, capsys, monkeypatch):
    home = pulsar_home(tmp_path, "bookie3", f"file:{DUMP}")
    monkeypatch.chdir(tmp_path)
    assert main(["scan", "--full-speed", "--bookie-conf", str(home / "conf" / "bookkeeper.conf")]) == 2
    line = one_error_line(capsys)
    assert f"{tmp_path / 'data' / 'bookkeeper' / 'ledgers'}: expected a bookie dir" in line
    assert "data/bookkeeper/ledgers is relative" in line and "--bookie-home" in line


@pytest.mark.parametrize("uri, says", [
    ("metadata-store:oxia://oxia:6648/bookkeeper", "Pulsar's oxia metadata store is not supported"),
    ("metadata-store:etcd:http://etcd:2379", "Pulsar's etcd metadata store is not supported"),
])
def test_other_pulsar_metadata_stores_are_refused_in_one_line(tmp_path, capsys, uri, says):
    home = pulsar_home(tmp_path, "bookie1", uri)
    assert main(["scan", "--full-speed", "--bookie-conf", str(home / "conf" / "bookkeeper.conf"), "--bookie-home", str(home)]) == 2
    assert says in one_error_line(capsys)


def test_a_conf_without_ledger_directories_names_the_missing_key(tmp_path, capsys):
    conf = tmp_path / "bk_server.conf"
    conf.write_text("bookiePort=3181\n")
    assert main(["scan", "--full-speed", "--bookie-conf", str(conf), "--metadata", f"file:{DUMP}"]) == 2
    assert one_error_line(capsys).startswith(f"bookie-scanner scan: {conf}: ledgerDirectories is not set")


def test_rocksdb_without_current_is_index_damage_not_a_usage_error(tmp_path, capsys):
    copy = tmp_path / "ledgers"
    shutil.copytree(CORPUS / "bookie3" / "ledgers", copy)
    (copy / "current" / "locations" / "CURRENT").unlink()
    before = snapshot(copy)
    status, report = scan(capsys, *scan_args("bookie3", copy), "--metadata", f"file:{DUMP}")
    assert status == 1
    found = by_category(report)
    [unreadable] = found.pop("unreadable_index")
    assert f"{copy / 'current'}: the index does not open" in unreadable["detail"]
    assert "CURRENT" in unreadable["detail"]
    missing = found.pop("missing_ledger")
    assert len(missing) > 30 and all("the index is unreadable" in f["detail"] for f in missing)
    assert set(found) == {"orphan_ledger"}
    assert main(["inspect", "locations", *scan_args("bookie3", copy), "--ledger", "10", "--format", "json"]) == 1
    assert "CURRENT" in json.loads(capsys.readouterr().out)["problem"]
    assert snapshot(copy) == before


def test_a_broken_idx_file_is_a_finding_about_its_ledger(tmp_path, capsys):
    copy = tmp_path / "ledgers"
    shutil.copytree(CORPUS / "bookie1" / "ledgers", copy)
    index = copy / "current" / "0" / "5" / "5.idx"
    index.write_bytes(index.read_bytes()[:10])
    status, report = scan(capsys, *scan_args("bookie1", copy), "--metadata", f"file:{DUMP}", "--ledger", "5")
    assert status == 1
    [finding] = report["findings"]
    assert (finding["category"], finding["ledger_id"], finding["entries"]) == ("missing_ledger", 5, [[0, 19]])
    assert finding["detail"].startswith(f"the index is unreadable ({index}: ")
    assert main(["inspect", "index", str(index)]) == 1
    assert "expected at least 12 header bytes" in capsys.readouterr().out


@pytest.mark.parametrize("args, says", [
    (["--rate", "-5"], "argument --rate: rate '-5': expected a number with an optional prefix"),
    (["--rate", "fast"], "argument --rate: rate 'fast': expected a number with an optional prefix"),
    (["--ledger", str(2**63)], f"argument --ledger: ledger id {2**63} is out of range: expected 0 to {2**63 - 1}"),
    (["--ledger", "-1"], "argument --ledger: ledger id -1 is out of range: expected 0 to"),
    (["--ledger", "999999"], "ledger 999999 is neither in this bookie's index nor in the metadata"),
    (["--entry-log", "99"], "entry log 99 (63.log) is in none of the ledger dirs"),
    (["--entry-log", "0xzz"], "argument --entry-log: entry log '0xzz': expected a decimal id (26), 0x1a or 1a.log"),
    (["--settle-seconds", "-1"], "--settle-seconds must be 0 to 3600, got -1"),
])
def test_ids_and_rates_that_name_nothing_are_one_line_usage_errors(capsys, args, says):
    assert main(["scan", "--full-speed", *scan_args("bookie1"), "--metadata", f"file:{DUMP}", *args]) == 2
    line = one_error_line(capsys)
    assert line.startswith("bookie-scanner scan: ") and says in line, line


@pytest.mark.parametrize("spelling", ["0", "0x0", "0.log"])
def test_an_entry_log_is_named_as_its_file_is(capsys, spelling):
    status, report = scan(capsys, *scan_args("bookie1"), "--metadata", f"file:{DUMP}", "--entry-log", spelling)
    assert report["summary"]["entry_logs_scanned"] == 1 and status == 0


def test_a_ledger_whose_metadata_does_not_decode_is_in_the_report(tmp_path, capsys):
    nodes = json.loads(DUMP.read_text())
    [node] = [n for n in nodes if n["path"] == "/ledgers/00/0000/L0005"]
    node["data_b64"] = base64.b64encode(b"BookieMetadataFormatVersion\t3\n\xff\xff\xff").decode()
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(nodes))
    status, report = scan(capsys, *scan_args("bookie1"), "--metadata", f"file:{dump}")
    assert status == 1
    [not_judged] = by_category(report)["not_judged"]
    assert not_judged["ledger_id"] == 5 and "does not decode" in not_judged["detail"]
    assert report["summary"]["findings"]["not_judged"] == 1


def test_findings_name_the_pulsar_topic_of_a_damaged_ledger(tmp_path, capsys):
    nodes = json.loads(DUMP.read_text())
    [node] = [n for n in nodes if n["path"] == "/ledgers/01/2345/L6789"]
    meta = parse_ledger_metadata(123456789, base64.b64decode(node["data_b64"]), None)
    topic = "public/default/persistent/orders-partition-3"
    pulsar = (("application", b"pulsar"), ("component", b"managed-ledger"), ("pulsar/managed-ledger", topic.encode()))
    node["data_b64"] = base64.b64encode(
        serialize_ledger_metadata(dataclasses.replace(meta, custom_metadata=pulsar))).decode()
    dump = tmp_path / "dump.json"
    dump.write_text(json.dumps(nodes))
    copy = CORPUS / "corrupted" / "bookie1-corrupted" / "ledgers"
    status, report = scan(capsys, *scan_args("bookie1", copy), "--metadata", f"file:{dump}", "--ledger", "123456789")
    assert status == 1
    assert [(f["category"], f["ledger_name"]) for f in report["findings"]] == [("corrupt_entry", topic)]
    assert main(["scan", "--full-speed", *scan_args("bookie1", copy), "--metadata", f"file:{dump}", "--ledger", "123456789"]) == 1
    assert f"ledger 123456789 ({topic}) entries 8" in capsys.readouterr().out


def test_ledger_dirs_alone_are_enough(capsys):
    status, report = scan(capsys, "--ledger-dirs", str(CORPUS / "bookie3" / "ledgers"), "--metadata", f"file:{DUMP}")
    assert_clean_report("bookie3", status, report)
    assert report["storage"] == "db"  # told by the RocksDB dirs, with no conf to say it


def test_version_and_every_command_explains_itself(capsys):
    assert main(["--version"]) == 0 and capsys.readouterr().out.startswith("bookie-scanner 0.")
    for thing in ("entry-log", "index", "locations", "ledger"):
        assert main(["inspect", thing, "--help"]) == 0
        help_text = capsys.readouterr().out
        assert "--format {text,json}" in help_text and len(help_text.split("\n\n")[1]) > 40, help_text


def test_demo_json_is_json(capsys):
    assert main(["demo", "--format", "json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["kind"] == "scan_report" and report["summary"]["findings"]["corrupt_entry"] == 1
    assert "found every injected fault" in captured.err
