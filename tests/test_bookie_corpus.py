"""Storage views of the real BookKeeper 4.16.7 bookies: indexes agree with what the bookies returned,
every indexed entry reads and verifies, injected damage shows up as typed errors, nothing is written."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

import pytest

from corpus import CORPUS
from scanner.storage.bookie import BookieStorage, open_bookie
from scanner.storage.entry import DIGEST_LENGTH, METADATA_LENGTH, DigestType, DigestVerifier, master_key
from scanner.storage.entrylog import EntryLog, EntryLogError, TruncatedRecord
from scanner.storage.layout import discover_layout
from tree_state import snapshot

BOOKIES = {1: "interleaved", 2: "sorted", 3: "db", 4: "db"}
CORRUPTED = {"bookie1-corrupted": 1, "bookie3-corrupted": 3}
DIGEST_TYPES = {"CRC32": DigestType.CRC32, "CRC32C": DigestType.CRC32C, "MAC": DigestType.HMAC, "DUMMY": DigestType.DUMMY}


@pytest.fixture(scope="module")
def manifest():
    return json.loads((CORPUS / "manifest.json").read_text())


@pytest.fixture(scope="module")
def corruption_report():
    report = json.loads((CORPUS / "corrupted" / "corruption-report.json").read_text())
    return {experiment["copy_dir"].split("/")[-1]: experiment for experiment in report["experiments"]}


@pytest.fixture(scope="module")
def verifiers(manifest):
    return {
        ledger["ledger_id"]: DigestVerifier(DIGEST_TYPES[ledger["digest_type"]], ledger["password"].encode())
        for ledger in manifest["ledgers"]
    }


@pytest.fixture(scope="module")
def payload_sha256(manifest):
    return {
        (ledger["ledger_id"], entry["entry_id"]): entry["sha256"]
        for ledger in manifest["ledgers"]
        for entry in ledger["entries"]
    }


def layout_of(number: int, ledger_dir: Path):
    return discover_layout(CORPUS / "bookie-configs" / f"bookie{number}.conf", ledger_dirs=[ledger_dir])


def indexed_entries(storage: BookieStorage):
    for ledger_id in storage.ledger_ids():
        for entry_id, location in storage.locations(ledger_id):
            yield ledger_id, entry_id, location


def read_all(storage: BookieStorage):
    """{(ledger, entry): stored entry bytes, or the EntryLogError its location gave}."""
    logs: dict[Path, EntryLog] = {}
    results = {}
    try:
        for ledger_id, entry_id, location in indexed_entries(storage):
            try:
                path = storage.entry_log_path(ledger_id, location.entry_log_id)
                log = logs.get(path) or logs.setdefault(path, EntryLog(path, location.entry_log_id))
                results[ledger_id, entry_id] = bytes(log.read_entry(location.pos, ledger_id, entry_id))
            except EntryLogError as error:
                results[ledger_id, entry_id] = error
    finally:
        for log in logs.values():
            log.close()
    return results


def digest_failures(entries: dict, verifiers) -> set[tuple[int, int]]:
    return {key for key, entry in entries.items() if not isinstance(entry, Exception)
            and not verifiers[key[0]].verify(memoryview(entry))}


def payload(entry: bytes, verifier: DigestVerifier) -> bytes:
    return entry[METADATA_LENGTH + DIGEST_LENGTH[verifier.digest_type]:]


@pytest.mark.parametrize("number", sorted(BOOKIES))
def test_layout_from_the_bookie_config_and_cookie(number):
    layout = layout_of(number, CORPUS / f"bookie{number}" / "ledgers")
    assert (CORPUS / f"bookie{number}" / "ledgers" / "current" / "VERSION").is_file()
    assert layout.storage == BOOKIES[number]
    assert layout.bookie_id == f"127.0.0.1:318{number}"
    assert layout.index_dirs == layout.ledger_dirs == (CORPUS / f"bookie{number}" / "ledgers",)


@pytest.mark.parametrize("number", sorted(BOOKIES))
def test_index_lists_exactly_the_entries_the_bookie_returned_and_each_verifies(
    number, tmp_path, verifiers, payload_sha256
):
    with gzip.open(CORPUS / "bookie-entries" / f"bookie{number}.jsonl.gz", "rt") as rows:
        expected = {(row["ledger_id"], row["entry_id"]) for row in map(json.loads, rows)}
    with open_bookie(layout_of(number, CORPUS / f"bookie{number}" / "ledgers"), work_dir=tmp_path) as storage:
        ledger_ids = list(storage.ledger_ids())
        entries = read_all(storage)

    assert ledger_ids == sorted(set(ledger_ids))
    assert set(entries) == expected
    assert not [error for error in entries.values() if isinstance(error, Exception)]
    assert digest_failures(entries, verifiers) == set()
    for (ledger_id, entry_id), entry in entries.items():
        sha = hashlib.sha256(payload(entry, verifiers[ledger_id])).hexdigest()
        assert sha == payload_sha256[ledger_id, entry_id], (ledger_id, entry_id)
    assert os.listdir(tmp_path) == []  # the scratch dir of the RocksDB views is gone


@pytest.mark.parametrize("number", sorted(BOOKIES))
def test_master_keys_in_the_index_match_the_ledger_passwords(number, tmp_path, manifest):
    passwords = {ledger["ledger_id"]: ledger["password"].encode() for ledger in manifest["ledgers"]}
    with open_bookie(layout_of(number, CORPUS / f"bookie{number}" / "ledgers"), work_dir=tmp_path) as storage:
        states = {ledger_id: storage.ledger_index(ledger_id) for ledger_id in storage.ledger_ids()}
    assert states
    for ledger_id, state in states.items():
        assert state.master_key == master_key(passwords[ledger_id]), ledger_id


def test_ledger_5_lost_its_index_but_its_records_remain_in_the_entry_logs(corruption_report):
    fault = next(f for f in corruption_report["bookie1-corrupted"]["faults"] if f["kind"] == "index_file_deleted")
    ledger_dir = CORPUS / "corrupted" / "bookie1-corrupted" / "ledgers"
    with open_bookie(layout_of(1, ledger_dir)) as storage:
        assert 5 not in list(storage.ledger_ids())
        assert storage.ledger_index(5) is None
        assert list(storage.locations(5)) == []
        in_logs = set()
        for log_file in storage.entry_logs():
            with EntryLog(log_file.path, log_file.entry_log_id) as log:
                in_logs.update(record.entry_id for record in log.records() if record.ledger_id == 5)
    assert in_logs == set(fault["entries_it_indexed"])


@pytest.mark.parametrize("copy", sorted(CORRUPTED))
def test_cut_and_vanished_records_fail_to_read_with_typed_errors(copy, tmp_path, corruption_report, verifiers):
    experiment = corruption_report[copy]
    truncation = next(f for f in experiment["faults"] if f["kind"] == "entry_log_truncated")
    flip = next(f for f in experiment["faults"] if f["kind"] == "payload_byte_flip")
    gone = {(e["ledger_id"], e["entry_id"]) for e in truncation["entries_whose_record_is_incomplete_or_gone"]}
    cut = truncation["cut_inside_record"]
    layout = layout_of(CORRUPTED[copy], CORPUS / "corrupted" / copy / "ledgers")
    with open_bookie(layout, work_dir=tmp_path) as storage:
        entries = read_all(storage)

    failed = {key for key, result in entries.items() if isinstance(result, EntryLogError)}
    assert gone <= set(entries)  # every one of them is still indexed
    assert failed == gone
    assert isinstance(entries[cut["ledger_id"], cut["entry_id"]], TruncatedRecord)
    assert digest_failures(entries, verifiers) == {(flip["ledger_id"], flip["entry_id"])}


def test_reading_everything_leaves_every_bookie_dir_byte_for_byte_unchanged(tmp_path):
    bookie_dirs = [(n, CORPUS / f"bookie{n}") for n in BOOKIES] + [
        (n, CORPUS / "corrupted" / copy) for copy, n in CORRUPTED.items()
    ]
    before = {root: snapshot(root) for _, root in bookie_dirs}
    for number, root in bookie_dirs:
        with open_bookie(layout_of(number, root / "ledgers"), work_dir=tmp_path) as storage:
            for ledger_id in storage.ledger_ids():
                storage.ledger_index(ledger_id)
            read_all(storage)
            for log_file in storage.entry_logs():
                with EntryLog(log_file.path, log_file.entry_log_id) as log:
                    for _ in log.records():
                        pass
    assert {root: snapshot(root) for _, root in bookie_dirs} == before
