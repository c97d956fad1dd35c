"""The entry-log reader against entry logs written by BookKeeper 4.16.7 (clean and damaged copies)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import struct
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from corpus import CORPUS
from scanner.scan.record_walk import walk_records
from scanner.storage.entry import DIGEST_LENGTH, DigestType, DigestVerifier
from scanner.storage.entrylog import BrokenLedgersMap, EntryLog, EntryLogError, MissingEntry, TruncatedRecord
from scanner.storage.location import EntryLocation

BOOKIES = ["bookie1", "bookie2", "bookie3", "bookie4"]
DIGEST_NAMES = {"CRC32": DigestType.CRC32, "CRC32C": DigestType.CRC32C, "MAC": DigestType.HMAC,
                "DUMMY": DigestType.DUMMY}


@cache
def manifest() -> dict:
    return json.loads((CORPUS / "manifest.json").read_text())


@cache
def ledgers() -> dict[int, dict]:
    return {ledger["ledger_id"]: ledger for ledger in manifest()["ledgers"]}


@cache
def corruption_report() -> dict:
    return json.loads((CORPUS / "corrupted" / "corruption-report.json").read_text())


def verifier_for(ledger_id: int) -> DigestVerifier | None:
    ledger = ledgers().get(ledger_id)
    if ledger is None:
        return None
    return DigestVerifier(DIGEST_NAMES[ledger["digest_type"]], ledger["password"].encode("utf-8"))


def entry_logs(bookie_dir: Path) -> list[Path]:
    return sorted((bookie_dir / "ledgers" / "current").glob("*.log"), key=lambda p: int(p.stem, 16))


def open_log(path: Path) -> EntryLog:
    return EntryLog(path, int(path.stem, 16))


def walk_positions(path: Path) -> dict[tuple[int, int], int]:
    with open_log(path) as log:
        return {(r.ledger_id, r.entry_id): r.pos for r in log.records()}


@pytest.fixture(scope="module", autouse=True)
def corpus_left_untouched():
    files = [p for p in CORPUS.rglob("*") if p.is_file()]
    before = {p: (os.stat(p).st_mtime_ns, os.stat(p).st_ctime_ns, os.stat(p).st_size) for p in files}
    yield
    after = {p: (os.stat(p).st_mtime_ns, os.stat(p).st_ctime_ns, os.stat(p).st_size) for p in files}
    assert after == before


@pytest.mark.parametrize("bookie", BOOKIES)
def test_walk_finds_every_stored_entry_and_every_record_verifies(bookie):
    stored = {}
    with gzip.open(CORPUS / "bookie-entries" / f"{bookie}.jsonl.gz", "rt") as rows:
        for line in rows:
            row = json.loads(line)
            stored[(row["ledger_id"], row["entry_id"])] = row
    seen: Counter[tuple[int, int]] = Counter()
    for path in entry_logs(CORPUS / bookie):
        with open_log(path) as log:
            walked: Counter[int] = Counter()
            for record in log.records():
                key = (record.ledger_id, record.entry_id)
                seen[key] += 1
                walked[record.ledger_id] += len(record.entry) + 4
                ledger = ledgers()[record.ledger_id]
                verifier = verifier_for(record.ledger_id)
                assert verifier.verify(record.entry), (path, key)
                payload = bytes(record.entry[32 + DIGEST_LENGTH[verifier.digest_type]:])
                assert hashlib.sha256(payload).hexdigest() == ledger["entries"][record.entry_id]["sha256"]
                assert len(record.entry) == stored[key]["stored_size"]
            ledgers_map = log.ledgers_map()
            if log.header is not None and log.header.ledgers_map_offset:
                assert ledgers_map == dict(walked), path
            else:
                assert ledgers_map is None
            assert log.problems == [], path
    # GC and compaction never ran on this corpus, so no log holds a copy the index stopped
    # pointing to (after compaction the walk would see more than the index: it must be ⊇).
    assert set(seen) == set(stored)
    assert max(seen.values()) == 1


@pytest.mark.parametrize("bookie", BOOKIES)
def test_digest_walk_over_clean_logs_finds_no_failure(bookie):
    verified = 0
    for path in entry_logs(CORPUS / bookie):
        with open_log(path) as log:
            walk = walk_records(log, verifier_for)
            assert list(walk.failures()) == []
            assert walk.stats.entries_skipped == 0
            verified += walk.stats.entries_verified
    with gzip.open(CORPUS / "bookie-entries" / f"{bookie}.jsonl.gz", "rt") as rows:
        assert verified == sum(1 for _ in rows)


def experiment(copy_dir: str) -> dict:
    return next(e for e in corruption_report()["experiments"] if e["copy_dir"] == copy_dir)


def fault(copy_dir: str, kind: str) -> dict:
    return next(f for f in experiment(copy_dir)["faults"] if f["kind"] == kind)


@pytest.mark.parametrize("copy_dir", ["corrupted/bookie1-corrupted", "corrupted/bookie3-corrupted"])
def test_flipped_payload_byte_is_the_only_digest_failure(copy_dir):
    flip = fault(copy_dir, "payload_byte_flip")
    with open_log(CORPUS / flip["file"]) as log:
        failures = list(walk_records(log, verifier_for).failures())
        assert [(f.ledger_id, f.entry_id, f.pos - 4) for f in failures] == [
            (flip["ledger_id"], flip["entry_id"], flip["record_offset"])]
        assert log.problems == []


@pytest.mark.parametrize("copy_dir", ["corrupted/bookie1-corrupted", "corrupted/bookie3-corrupted"])
def test_truncated_log_names_the_record_cut_in_half_and_the_lost_map(copy_dir):
    cut = fault(copy_dir, "entry_log_truncated")
    inside = cut["cut_inside_record"]
    with open_log(CORPUS / cut["file"]) as log:
        records = list(log.records())
        assert log.valid_end == inside["record_offset"]
        assert all(r.pos + len(r.entry) <= inside["record_offset"] for r in records)
        assert log.ledgers_map() is None
        truncated = [p for p in log.problems if isinstance(p, TruncatedRecord)]
        assert [(p.offset, p.ledger_id, p.entry_id, p.length) for p in truncated] == [
            (inside["record_offset"], inside["ledger_id"], inside["entry_id"], inside["record_size_field"])]
        assert any(isinstance(p, BrokenLedgersMap) for p in log.problems)
        assert len(log.problems) == 2


def idx_location(bookie_dir: Path, ledger_id: int, entry_id: int) -> EntryLocation:
    """The location in an Interleaved ``.idx`` file (read here only to check against the reader)."""
    name = f"{(ledger_id >> 8) & 0xFF:x}/{ledger_id & 0xFF:x}/{ledger_id:x}.idx"
    with open(bookie_dir / "ledgers" / "current" / name, "rb") as idx:
        idx.seek(1024 + 8 * entry_id)
        return EntryLocation.decode(struct.unpack(">q", idx.read(8))[0])


@pytest.mark.parametrize("copy_dir", ["corrupted/bookie1-corrupted", "corrupted/bookie3-corrupted"])
def test_reading_any_lost_entry_by_location_raises_a_typed_error(copy_dir):
    cut = fault(copy_dir, "entry_log_truncated")
    original = CORPUS / experiment(copy_dir)["copied_from"]
    clean_log = original / "ledgers" / "current" / Path(cut["file"]).name
    positions = walk_positions(clean_log)
    lost = [(e["ledger_id"], e["entry_id"]) for e in cut["entries_whose_record_is_incomplete_or_gone"]]
    # The walk of the clean log agrees with the report on which records the cut took.
    cut_at = cut["cut_inside_record"]["record_offset"]
    assert sorted(lost) == sorted(key for key, pos in positions.items() if pos - 4 >= cut_at)
    kinds = Counter()
    with open_log(CORPUS / cut["file"]) as log:
        for ledger_id, entry_id in lost:
            pos = positions[(ledger_id, entry_id)]
            if copy_dir.startswith("corrupted/bookie1"):
                assert idx_location(original, ledger_id, entry_id) == EntryLocation(log.entry_log_id, pos)
            with pytest.raises(EntryLogError) as raised:
                log.read_entry(pos, ledger_id, entry_id)
            kinds[type(raised.value)] += 1
            if (ledger_id, entry_id) == (cut["cut_inside_record"]["ledger_id"], cut["cut_inside_record"]["entry_id"]):
                assert type(raised.value) is TruncatedRecord
        assert kinds == {TruncatedRecord: 1, MissingEntry: len(lost) - 1}
        intact = [(key, pos) for key, pos in positions.items() if pos - 4 < cut_at]
        for (ledger_id, entry_id), pos in intact:
            assert verifier_for(ledger_id).verify(log.read_entry(pos, ledger_id, entry_id))
