"""Throughput of the index readers against a bare baseline measured in the same run.

`.idx`: IndexFile.locations() vs struct.iter_unpack over the same file's bytes.
RocksDB: DbLedgerIndex.locations() ledger by ledger vs a bare rocksdict scan of the same DB.
Run from the repository root: .venv/bin/python bench/bench_index_readers.py [entries]
"""

from __future__ import annotations

import struct
import sys
import tempfile
import time
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, WriteBatch

from scanner.storage.dbstorage import DbLedgerIndex
from scanner.storage.indexfile import IndexFile
from scanner.storage.location import EntryLocation

ENTRIES_PER_LEDGER = 1000


def timed(action) -> tuple[float, int]:
    start = time.perf_counter()
    count = action()
    return time.perf_counter() - start, count


def bench_index_file(directory: Path, entries: int) -> None:
    path = directory / "1.idx"
    header = (b"BKLE" + struct.pack(">ii", 1, 20) + b"k" * 20 + struct.pack(">ii", 0, 0)).ljust(1024, b"\0")
    slots = b"".join(struct.pack(">q", EntryLocation(e % 7, 1028 + e).encode()) for e in range(entries))
    path.write_bytes(header + slots)

    def baseline() -> int:
        return sum(1 for (raw,) in struct.iter_unpack(">Q", path.read_bytes()[1024:]) if raw)

    def pass_reader() -> int:
        with IndexFile(path) as index:
            return len(index.location_arrays()[0])

    def reader() -> int:
        with IndexFile(path) as index:
            return sum(1 for _ in index.locations())

    base = timed(baseline)
    report(".idx, pass", entries, base, timed(pass_reader))
    report(".idx, per ledger", entries, base, timed(reader))


def bench_rocksdb(directory: Path, entries: int) -> None:
    current = directory / "current"
    ledgers = max(1, entries // ENTRIES_PER_LEDGER)
    for name in ("ledgers", "locations"):
        db = Rdict(str(current / name), options=Options(raw_mode=True))
        batch = WriteBatch(raw_mode=True)
        for ledger_id in range(ledgers):
            if name == "ledgers":
                batch.put(struct.pack(">q", ledger_id), b"\x08\x01\x10\x00\x1a\x00")
                continue
            for entry_id in range(ENTRIES_PER_LEDGER):
                batch.put(struct.pack(">qq", ledger_id, entry_id), struct.pack(">q", 1 << 32 | 1028 + entry_id))
        db.write(batch)
        db.close()

    def baseline() -> int:
        db = Rdict(str(current / "locations"), options=Options(raw_mode=True), access_type=AccessType.read_only())
        try:
            return sum(1 for _ in db.items())
        finally:
            db.close()

    def pass_reader() -> int:
        with DbLedgerIndex(current, directory) as index:
            return sum(len(entry_ids) for _, entry_ids, _ in index.ledger_locations())

    def reader() -> int:
        with DbLedgerIndex(current, directory) as index:
            return sum(1 for ledger_id in index.ledger_ids() for _ in index.locations(ledger_id))

    base = timed(baseline)
    report("RocksDB locations, pass", ledgers * ENTRIES_PER_LEDGER, base, timed(pass_reader))
    report("RocksDB locations, per ledger", ledgers * ENTRIES_PER_LEDGER, base, timed(reader))


def report(what: str, entries: int, baseline: tuple[float, int], reader: tuple[float, int]) -> None:
    assert baseline[1] == reader[1] == entries, (baseline[1], reader[1], entries)
    print(f"{what}: {entries} entries, reader {entries / reader[0]:,.0f}/s, "
          f"baseline {entries / baseline[0]:,.0f}/s, reader/baseline time ratio {reader[0] / baseline[0]:.2f}")


def main() -> None:
    entries = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as scratch:
        bench_index_file(Path(scratch), entries)
        bench_rocksdb(Path(scratch), entries)


if __name__ == "__main__":
    main()
