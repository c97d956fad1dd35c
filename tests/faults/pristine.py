"""What an undamaged corpus bookie holds, to aim faults at and to say what each one must be reported as.

Records are found by a walk written here from the file format (not by the scanner's reader), the
index locations through the scanner's read-only storage view, and which entries this bookie owes
from the corpus manifest (the real BookKeeper client's placement).
"""

from __future__ import annotations

import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

from corpus import CORPUS, bookie_id, manifest, scan, scan_args
from scanner.storage.bookie import open_bookie
from scanner.storage.layout import discover_layout

DUMP = CORPUS / "zk-dump.json"
RECORDS_START = 1024  # entry log header size
PAGE = 4096
_LOG_HEADER = struct.Struct(">4siqi")
_RECORD_START = struct.Struct(">iqq")


@dataclass(frozen=True)
class Record:
    """A data record: ``prefix`` is the offset of its 4-byte length, ``pos`` (= prefix + 4) its location."""

    prefix: int
    length: int
    ledger_id: int
    entry_id: int

    @property
    def pos(self) -> int:
        return self.prefix + 4

    @property
    def end(self) -> int:
        return self.pos + self.length


@dataclass(frozen=True)
class Log:
    entry_log_id: int
    name: str  # relative to the ledger dir's current/
    size: int
    ledgers_map_offset: int
    records: tuple[Record, ...]

    @property
    def records_end(self) -> int:
        return self.ledgers_map_offset or self.size


def walk_records(data: bytes) -> tuple[int, tuple[Record, ...]]:
    """(ledgers map offset, every data record) of an undamaged entry log's bytes."""
    _, _, map_offset, _ = _LOG_HEADER.unpack_from(data, 0)
    end = map_offset or len(data)
    records, prefix = [], RECORDS_START
    while prefix + _RECORD_START.size <= end:
        length, ledger_id, entry_id = _RECORD_START.unpack_from(data, prefix)
        if length <= 0 or prefix + 4 + length > end:
            break
        records.append(Record(prefix, length, ledger_id, entry_id))
        prefix += 4 + length
    return map_offset, tuple(records)


class Pristine:
    """One corpus bookie as the corpus holds it, plus its clean scan."""

    def __init__(self, name: str, capsys):
        self.name = name
        self.bookie_id = bookie_id(name)
        self.ledger_dir = CORPUS / name / "ledgers"
        current = self.ledger_dir / "current"
        self.logs: dict[int, Log] = {}
        for path in sorted(current.glob("*.log"), key=lambda p: int(p.stem, 16)):
            data = path.read_bytes()
            if data:
                map_offset, records = walk_records(data)
                self.logs[int(path.stem, 16)] = Log(int(path.stem, 16), path.name, len(data), map_offset, records)
        self.ledgers = {l["ledger_id"]: l for l in manifest()["ledgers"]}
        layout = discover_layout(CORPUS / "bookie-configs" / f"{name}.conf", ledger_dirs=[self.ledger_dir])
        self.storage_kind = layout.storage
        self.locations: dict[tuple[int, int], tuple[int, int]] = {}  # (ledger, entry) -> (log, pos)
        with tempfile.TemporaryDirectory() as work_dir, open_bookie(layout, work_dir=Path(work_dir)) as storage:
            self.indexed_ledgers = tuple(storage.ledger_ids())
            for ledger_id in self.indexed_ledgers:
                for entry_id, location in storage.locations(ledger_id):
                    self.locations[ledger_id, entry_id] = (location.entry_log_id, location.pos)
        status, report = scan(capsys, *self.scan_args(self.ledger_dir))
        self.baseline = finding_keys(report)

    def scan_args(self, ledger_dir: Path) -> list[str]:
        return [*scan_args(self.name, ledger_dir), "--metadata", f"file:{DUMP}"]

    # -- what the manifest says --

    def is_live(self, ledger_id: int) -> bool:
        ledger = self.ledgers.get(ledger_id)
        return ledger is not None and ledger["status"] != "DELETED"

    def owes(self, ledger_id: int, entry_id: int) -> bool:
        """The metadata places the entry on this bookie (what a scan judges), for a ledger that still exists."""
        if not self.is_live(ledger_id):
            return False
        return entry_id in self.ledgers[ledger_id]["expected_on_by_placement"].get(self.bookie_id, [])

    def owed_entries(self, ledger_id: int) -> list[int]:
        return sorted(self.ledgers[ledger_id]["expected_on_by_placement"].get(self.bookie_id, []))

    def has_digest(self, ledger_id: int) -> bool:
        return self.ledgers[ledger_id]["digest_type"] != "DUMMY"

    # -- where things are --

    def newest_log(self) -> Log:
        return self.logs[max(self.logs)]

    def finished_log(self) -> Log:
        """The first log with a ledgers map (rotated, never written again); the newest log when none has one."""
        return next((log for log in self.logs.values() if log.ledgers_map_offset), self.newest_log())

    def is_indexed_copy(self, log: Log, record: Record) -> bool:
        return self.locations.get((record.ledger_id, record.entry_id)) == (log.entry_log_id, record.pos)

    def victim(self, log: Log) -> Record:
        """A record near the middle of ``log`` whose damage a scan must report: the indexed copy of an
        entry this bookie owes, of a closed ledger with a digest, with a payload."""
        def fits(record: Record) -> bool:
            ledger = self.ledgers.get(record.ledger_id)
            return (ledger is not None and ledger["status"] == "CLOSED" and self.has_digest(record.ledger_id)
                    and not ledger.get("expected_minus_stored") and self.owes(record.ledger_id, record.entry_id)
                    and self.is_indexed_copy(log, record) and record.length > 64)
        return _nearest_middle(log, [r for r in log.records if fits(r)])

    def owed_record(self, log: Log) -> Record:
        """A record near the middle of ``log`` that is the indexed copy of an entry this bookie owes (of an
        open ledger too: the newest log may hold nothing else)."""
        return _nearest_middle(log, [r for r in log.records if self.is_indexed_copy(log, r)
                                     and self.owes(r.ledger_id, r.entry_id) and r.length > 64])

    def lost_from(self, log: Log, cut: int) -> set[tuple[int, int]]:
        """Owed entries whose indexed record in ``log`` starts at or after file offset ``cut``."""
        return {(r.ledger_id, r.entry_id) for r in log.records
                if r.prefix >= cut and self.is_indexed_copy(log, r) and self.owes(r.ledger_id, r.entry_id)}


def _nearest_middle(log: Log, records: list[Record]) -> Record:
    assert records, f"no record in entry log {log.entry_log_id} to aim at"
    middle = log.records_end // 2
    return min(records, key=lambda r: abs(r.prefix - middle))


_MODELS: dict[str, Pristine] = {}


def pristine(name: str, capsys) -> Pristine:
    """The model of corpus bookie ``name``, built once per session; ``capsys`` takes its clean scan's report."""
    if name not in _MODELS:
        _MODELS[name] = Pristine(name, capsys)
    return _MODELS[name]


def finding_keys(report: dict) -> set[tuple]:
    """(category, ledger, entry, entry log, offset) per entry of every finding; offsets only where they
    name one record or one spot of a file (corrupt_entry, damaged_entry_log)."""
    keys = set()
    for f in report["findings"]:
        offset = f["offset"] if f["category"] in ("corrupt_entry", "damaged_entry_log") else None
        if f["entries"] is None:
            keys.add((f["category"], f["ledger_id"], None, f["entry_log"], offset))
        else:
            for first, last in f["entries"]:
                keys.update((f["category"], f["ledger_id"], e, f["entry_log"], offset) for e in range(first, last + 1))
    return keys
