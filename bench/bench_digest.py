"""Throughput of the digest scan against plain reads of the same files, measured in one run.

Writes a set of CRC32C entry logs into a temporary directory (removed afterwards), once with
64 KiB payloads and once with 100-byte payloads, then times on one core:

  cat      read every file in 1 MiB chunks (the baseline)
  crc32c   read in 1 MiB chunks and CRC32C them (the digest cost without record handling)
  floor    per record only what any Python verifier must do: unpack its header, CRC32C its bytes
           around the stored digest (two calls), compare; no index join, no ledgers map, no pacing.
           Its entries/s bound what a pure-Python scan can reach on this core.
  verify   the scan's record walker over every file (the scanner's hot path)

with the page cache warm, and cold too when it can drop the page cache (needs root).
Ratios are against cat in the same run, so they hold across machines; GB/s are this machine's.

    python bench/bench_digest.py                 # 1 GiB per payload size
    python bench/bench_digest.py --size 256M --no-cold
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

import crc32c

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scanner.scan.record_walk import walk_records  # noqa: E402
from scanner.storage.entry import DigestType, DigestVerifier, build_entry  # noqa: E402
from scanner.storage.entrylog import EntryLog  # noqa: E402

CHUNK = 1 << 20
LEDGERS = 16  # records of this many ledgers interleave, as in a bookie's entry log
GOALS = {65536: "≥ 2 GB/s and within 3x cat (warm); within 1.1x cat (cold)", 100: "≥ 1,000,000 entries/s (warm)"}


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def write_logs(directory: Path, total: int, payload_size: int, log_size: int) -> tuple[list[Path], int]:
    """Entry logs of CRC32C entries adding up to about ``total`` bytes; returns the files and the entry count."""
    payload = os.urandom(payload_size)
    paths, entries, log_id = [], 0, 0
    next_entry = [0] * LEDGERS
    written_total = 0
    while written_total < total:
        path = directory / f"{log_id:x}.log"
        with open(path, "wb") as out:
            out.write(b"BKLO" + struct.pack(">i", 1) + bytes(1016))
            written, batch = 1024, []
            while written < log_size and written_total + written < total:
                ledger = entries % LEDGERS
                entry_id = next_entry[ledger]
                next_entry[ledger] += 1
                body = build_entry(ledger + 1, entry_id, entry_id - 1, (entry_id + 1) * payload_size,
                                   payload, DigestType.CRC32C)
                batch.append(struct.pack(">i", len(body)))
                batch.append(body)
                written += 4 + len(body)
                entries += 1
                if len(batch) >= 2048:
                    out.write(b"".join(batch))
                    batch.clear()
            out.write(b"".join(batch))
        written_total += written
        paths.append(path)
        log_id += 1
    return paths, entries


def read_all(paths: list[Path]) -> None:
    buffer = bytearray(CHUNK)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buffer):
                pass


def crc_all(paths: list[Path]) -> None:
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    for path in paths:
        value = 0
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buffer):
                value = crc32c.crc32c(view[:n], value)


_RECORD_START = struct.Struct(">iqq")  # length prefix, ledger id, entry id
_DIGEST = struct.Struct(">I")


def floor_all(paths: list[Path]) -> int:
    """Every CRC32C record checked with nothing else around it; the count."""
    checked = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            checked += _floor_walk(path, memoryview(mapped))  # mapped whole: no chunk bookkeeping either
    return checked


def _floor_walk(path: Path, data: memoryview) -> int:
    checked = 0
    unpack, unpack_digest, crc = _RECORD_START.unpack_from, _DIGEST.unpack_from, crc32c.crc32c
    try:
        pos, end = 1024, len(data)  # records start after the 1 KiB header
        while pos + 20 <= end:
            length = unpack(data, pos)[0]
            following = pos + 4 + length
            if length <= 0 or following > end:
                break  # the end of the records (these logs have no ledgers map)
            if crc(data[pos + 40:following], crc(data[pos + 4:pos + 36])) != unpack_digest(data, pos + 36)[0]:
                raise SystemExit(f"{path}: digest mismatch at {pos}: the floor must check what verify checks")
            checked += 1
            pos = following
    finally:
        data.release()
    return checked


def verify_all(paths: list[Path]) -> int:
    verifier = DigestVerifier(DigestType.CRC32C)
    verified = 0
    for path in paths:
        with EntryLog(path, int(path.stem, 16)) as log:
            walk = walk_records(log, lambda ledger_id: verifier)
            failures = sum(1 for _ in walk.failures())
            if failures or log.problems:
                raise SystemExit(f"{path}: {failures} failures, problems {log.problems}")
            verified += walk.stats.entries_verified
    return verified


def drop_page_cache() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def timed(run, paths: list[Path], cold: bool) -> float:
    if cold:
        drop_page_cache()
    else:
        read_all(paths)
    start = time.perf_counter()
    run(paths)
    return time.perf_counter() - start


def resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def bench(directory: Path, total: int, payload_size: int, log_size: int, cold: bool, repeat: int) -> None:
    started = time.perf_counter()
    paths, entries = write_logs(directory, total, payload_size, log_size)
    size = sum(p.stat().st_size for p in paths)
    print(f"\n== {payload_size}-byte payloads: {len(paths)} logs, {size / 1e9:.2f} GB, {entries:,} entries "
          f"(written in {time.perf_counter() - started:.1f} s)")
    modes = [("warm", False)] + ([("cold", True)] if cold else [])
    rss_before = resident_mib()
    for mode, is_cold in modes:
        results = {name: min(timed(run, paths, is_cold) for _ in range(repeat))
                   for name, run in (("cat", read_all), ("crc32c", crc_all), ("floor", floor_all),
                                             ("verify", verify_all))}
        for name, seconds in results.items():
            print(f"  {mode:4} {name:7} {size / seconds / 1e9:6.2f} GB/s  {entries / seconds / 1e6:6.2f} M entries/s"
                  f"  {seconds / results['cat']:5.2f}x cat")
    print(f"  resident memory: {rss_before:.0f} MiB before the passes, {resident_mib():.0f} MiB after")
    print(f"  goal: {GOALS[payload_size]}")
    for path in paths:
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1G", help="bytes of entry logs per payload size (e.g. 1G, 256M)")
    parser.add_argument("--log-size", default="256M", help="size of each entry log")
    parser.add_argument("--dir", default=None, help="where to create the temporary directory")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the fastest counts")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-cache measurements")
    parser.add_argument("--cpu", type=int, default=0, help="CPU to pin the process to (one core)")
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    cold = not args.no_cold and drop_page_cache()
    if not args.no_cold and not cold:
        print("cannot drop the page cache (not root?): cold measurements skipped")
    directory = Path(tempfile.mkdtemp(prefix="bench-digest-", dir=args.dir))
    try:
        for payload_size in (65536, 100):
            bench(directory, parse_size(args.size), payload_size, parse_size(args.log_size), cold, args.repeat)
    finally:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
