"""Every JSON document the commands print matches its schema in ``schemas/`` (real output, real corpus)."""

from __future__ import annotations

import copy
import json

import pytest

from corpus import CORPUS, scan_args
from json_schemas import _registry, assert_valid
from scanner.cli import main
from scanner.repair.marks import UnderreplicationMarks

DUMP = CORPUS / "zk-dump.json"
DAMAGED = CORPUS / "corrupted" / "bookie3-corrupted" / "ledgers"


def printed(capsys, *args: str) -> dict:
    main([*args, "--format", "json"])
    return json.loads(capsys.readouterr().out)


def test_every_schema_file_is_a_valid_schema_with_its_kind_as_id():
    _, schemas = _registry()
    assert {"envelope", "scan_report", "audit_report", "marks", "inspect_entry_log", "inspect_index",
            "inspect_locations", "ledger_metadata"} <= set(schemas)
    for kind, schema in schemas.items():
        assert schema["$id"] == f"urn:bookie-scanner:schema:{kind}"


def test_scan_report_of_a_damaged_bookie(capsys):
    report = printed(capsys, "scan", "--full-speed", *scan_args("bookie3", DAMAGED), "--metadata", f"file:{DUMP}")
    assert {f["category"] for f in report["findings"]} >= {"corrupt_entry", "lost_entry", "damaged_entry_log"}
    assert_valid(report)
    broken = copy.deepcopy(report)
    broken["findings"][0]["category"] = "something_else"
    with pytest.raises(AssertionError):
        assert_valid(broken)  # the schema does say something
    del broken["schema_version"]
    with pytest.raises(AssertionError):
        assert_valid(broken)


def test_demo_report(capsys):
    assert_valid(printed(capsys, "demo"))


def test_inspect_documents(capsys):
    current = CORPUS / "bookie1" / "ledgers" / "current"
    assert_valid(printed(capsys, "inspect", "entry-log", str(DAMAGED / "current" / "0.log"), "--metadata", f"file:{DUMP}"))
    assert_valid(printed(capsys, "inspect", "index", str(current / "0" / "5" / "5.idx")))
    assert_valid(printed(capsys, "inspect", "locations", *scan_args("bookie3"), "--ledger", "10"))
    assert_valid(printed(capsys, "inspect", "ledger", "--metadata", f"file:{DUMP}", "--ledger", "46"))
    assert_valid(printed(capsys, "metadata", "show", "--metadata", f"file:{DUMP}", "--ledger", "4294967311"))


def test_marks(capsys, zookeeper, zk_client, zk_load_dump):
    root = f"{zk_load_dump(DUMP)}/ledgers"
    UnderreplicationMarks(zk_client, root).mark_many([5, 46], ["127.0.0.1:3183"])
    listing = printed(capsys, "marks", "--metadata", f"zk://{zookeeper.connect_string}{root}")
    assert listing["count"] == 2
    assert_valid(listing)


def test_agent_status_running_and_not_running(tmp_path):
    from scanner.sample.sample_cluster import build_sample
    from test_agent_service import AgentProcess, cli, wait_for, write_config

    sample = build_sample(tmp_path / "sample")
    config = write_config(tmp_path, sample, f"file:{sample.dump}")
    down = json.loads(cli(config, "status", "--format", "json").stdout)
    assert down["status"] == "not_running" and down["kind"] == "agent_status"
    assert_valid(down)
    agent = AgentProcess(config, tmp_path / "state", tmp_path / "agent.err").start()
    try:
        agent.wait_ready()
        wait_for(lambda: agent.scanner()["passes_completed"] >= 1, 60, "the first pass did not end")
        up = json.loads(cli(config, "status", "--format", "json").stdout)
    finally:
        assert agent.terminate() == 0
    assert up["status"] != "not_running" and up["findings"]
    assert_valid(up)
    del up["bookie_id"]
    with pytest.raises(AssertionError):
        assert_valid(up)
