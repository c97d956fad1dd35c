"""Writes bookie files the way InterleavedLedgerStorage lays them out: for the demo, tests and benchmarks.

Only ever used on directories the scanner creates itself; never on a real bookie.
"""

from __future__ import annotations

import struct
from pathlib import Path

from scanner.storage.location import EntryLocation

LOG_HEADER_SIZE = 1024
INDEX_HEADER_SIZE = 1024
INDEX_PAGE_SIZE = 8192
LEDGERS_MAP_BATCH = 10000


class EntryLogWriter:
    """Appends size-prefixed records to ``<hex id>.log``; ``close`` adds the ledgers map unless told not to."""

    def __init__(self, current_dir: Path, entry_log_id: int):
        self.entry_log_id = entry_log_id
        self.path = Path(current_dir) / f"{entry_log_id:x}.log"
        self._file = open(self.path, "wb")
        self._file.write(entry_log_header())
        self._ledger_bytes: dict[int, int] = {}

    @property
    def position(self) -> int:
        return self._file.tell()

    def append(self, ledger_id: int, entry: bytes) -> EntryLocation:
        self._file.write(struct.pack(">i", len(entry)))
        pos = self._file.tell()
        self._file.write(entry)
        self._ledger_bytes[ledger_id] = self._ledger_bytes.get(ledger_id, 0) + len(entry) + 4
        return EntryLocation(self.entry_log_id, pos)

    def close(self, with_ledgers_map: bool = True) -> None:
        if with_ledgers_map and self._ledger_bytes:
            map_offset = self._file.tell()
            self._file.write(ledgers_map(self._ledger_bytes))
            self._file.seek(0)
            self._file.write(entry_log_header(map_offset, len(self._ledger_bytes)))
        self._file.close()


def entry_log_header(ledgers_map_offset: int = 0, ledgers_count: int = 0) -> bytes:
    """The 1024-byte header; a log gets its ledgers map offset and count only when it is rotated."""
    return (b"BKLO" + struct.pack(">iqi", 1, ledgers_map_offset, ledgers_count)).ljust(LOG_HEADER_SIZE, b"\0")


def ledgers_map(ledger_bytes: dict[int, int]) -> bytes:
    """The ledgers map records (ledger id -> bytes it holds, length prefixes included), in batches."""
    items = sorted(ledger_bytes.items())
    records = []
    for start in range(0, len(items), LEDGERS_MAP_BATCH):
        batch = items[start : start + LEDGERS_MAP_BATCH]
        body = struct.pack(">qqi", -1, -2, len(batch)) + struct.pack(f">{2 * len(batch)}q", *(v for kv in batch for v in kv))
        records.append(struct.pack(">i", len(body)) + body)
    return b"".join(records)


def index_file_path(index_current_dir: Path, ledger_id: int) -> Path:
    return Path(index_current_dir) / f"{(ledger_id >> 8) & 0xFF:x}" / f"{ledger_id & 0xFF:x}" / f"{ledger_id:x}.idx"


def write_index_file(
    index_current_dir: Path,
    ledger_id: int,
    master_key: bytes,
    locations: dict[int, EntryLocation],
    fenced: bool = False,
) -> Path:
    """A version-1 ``.idx`` file: header, then one 8-byte slot per entry id, in whole pages."""
    slots = {entry_id: location.encode() for entry_id, location in locations.items()}
    return write_index_slots(index_current_dir, ledger_id, master_key, slots, fenced)


def write_index_slots(
    index_current_dir: Path,
    ledger_id: int,
    master_key: bytes,
    slots: dict[int, int],
    fenced: bool = False,
) -> Path:
    """``write_index_file`` from encoded locations (entry id -> ``EntryLocation.encode()``)."""
    path = index_file_path(index_current_dir, ledger_id)
    if not path.parent.is_dir():  # a stat is far cheaper than a mkdir that fails
        path.parent.mkdir(parents=True, exist_ok=True)
    header = b"BKLE" + struct.pack(">ii", 1, len(master_key)) + master_key + struct.pack(">ii", int(fenced), 0)
    slots_per_page = INDEX_PAGE_SIZE // 8
    pages = (max(slots) // slots_per_page + 1) if slots else 0
    body = bytearray(pages * INDEX_PAGE_SIZE)
    for entry_id, encoded in slots.items():
        struct.pack_into(">q", body, entry_id * 8, encoded)
    path.write_bytes(header.ljust(INDEX_HEADER_SIZE, b"\0") + bytes(body))
    return path


def write_cookie(current_dir: Path, bookie_id: str, journal_dir: str, ledger_dirs: list[str]) -> Path:
    """``current/VERSION`` in cookie layout 5 (BookKeeper 4.16+)."""
    dirs = "\\t".join([str(len(ledger_dirs)), *ledger_dirs])
    text = f'5\nbookieHost: "{bookie_id}"\njournalDir: "{journal_dir}"\nledgerDirs: "{dirs}"\n'
    path = Path(current_dir) / "VERSION"
    path.write_text(text)
    return path


def write_properties(path: Path, props: dict[str, str]) -> Path:
    path = Path(path)
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path

