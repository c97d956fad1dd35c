"""Damage done to a copy of a corpus bookie's ledger dir, the ways disks, bugs and people do it."""

from __future__ import annotations

import contextlib
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

from rocksdict import Options, Rdict

from scanner.storage.indexfile import HEADER_SIZE, SLOT_SIZE, index_file_path

_SLOT = struct.Struct(">Q")
_LOCATION_KEY = struct.Struct(">qq")
_LEDGER_KEY = struct.Struct(">q")


def copy_ledger_dir(source: Path, destination: Path) -> Path:
    """A private copy of a bookie's ledger dir (the corpus itself is never written)."""
    return Path(shutil.copytree(source, destination, symlinks=True))


def xor_byte(path: Path, offset: int, mask: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([old ^ mask]))


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def index_file(ledger_dir: Path, ledger_id: int) -> Path:
    return ledger_dir / "current" / index_file_path(ledger_id)


def set_location(ledger_dir: Path, storage: str, ledger_id: int, entry_id: int,
                 location: tuple[int, int] | None) -> None:
    """Point the index entry of (ledger, entry) at (entry log, pos), or remove it (None)."""
    raw = 0 if location is None else (location[0] << 32) | location[1]
    if storage != "db":
        overwrite(index_file(ledger_dir, ledger_id), HEADER_SIZE + SLOT_SIZE * entry_id, _SLOT.pack(raw))
        return
    key = _LOCATION_KEY.pack(ledger_id, entry_id)
    with _rocksdb(ledger_dir, "locations") as db:
        if location is None:
            del db[key]
        else:
            db[key] = _SLOT.pack(raw)


def move_location_key(ledger_dir: Path, ledger_id: int, entry_id: int, new_entry_id: int) -> None:
    """DbLedgerStorage: the location of (ledger, entry) filed under another entry id instead."""
    key = _LOCATION_KEY.pack(ledger_id, entry_id)
    with _rocksdb(ledger_dir, "locations") as db:
        value = db[key]
        del db[key]
        db[_LOCATION_KEY.pack(ledger_id, new_entry_id)] = value


def set_ledger_record(ledger_dir: Path, ledger_id: int, value: bytes | None) -> None:
    """DbLedgerStorage: replace the ledger's `LedgerData` record in the `ledgers` DB, or remove it (None)."""
    key = _LEDGER_KEY.pack(ledger_id)
    with _rocksdb(ledger_dir, "ledgers") as db:
        if value is None:
            del db[key]
        else:
            db[key] = value


@contextlib.contextmanager
def _rocksdb(ledger_dir: Path, name: str) -> Iterator[Rdict]:
    """One of the copy's RocksDBs opened for writing (bytes keys and values), flushed and closed after."""
    db = Rdict(str(ledger_dir / "current" / name), options=Options(raw_mode=True))
    try:
        yield db
    finally:
        db.flush()
        db.close()
