"""The whole `bookie-scanner scan` on bookies of production shape, against `cat` of the same entry logs.

Generates bookies (bench/scale_bookie.py: InterleavedLedgerStorage with `.idx` files, and
DbLedgerStorage with its RocksDB indexes; one ledger dir; a clean metadata dump beside each) with

  10^4 ledgers in 10^2 entry logs, 10^5 in 10^3, 10^6 in 10^4      (--quick: the first only)
  100-byte entries (--entries-per-ledger each) and 64 KiB entries (one per ledger, or more, up to --size)
  --order round-robin: every ledger written at once, entry by entry, into logs of 100 kB (10^5 ledgers
  of 10 entries: 1,440 logs), so each log holds a little of very many ledgers (100-byte entries only)

and runs the real command on each, as a child process (`scan --format json`): wall time, entries/s
(the report's entries_verified), GB/s of entry logs, the child's peak RSS, and the ratio to `cat`
of the same logs timed in the same run. Warm: the files are read once just before each timed run.
DbLedgerStorage shapes also time the bare `locations` cursor (BARE_CURSOR) in the same turns, warm: the scan's
CPU against it is issue 21's ratio for DbLedgerStorage.
Cold: every entry log and index file is dropped from the page cache (posix_fadvise DONTNEED, no
root needed) before each timed run. `--cpu N` pins the scan and cat to one core.

    python bench/bench_scale.py --quick                       # smallest shapes, both storages, both sizes
    python bench/bench_scale.py --dir /data/bench --keep      # keep the bookies; a rerun reuses them
    python bench/bench_scale.py --ledgers 1000000 --storage db --entry-size 100 --cpu 1

Bookies are generated into --dir (default: a temporary directory, removed at the end, also on
error), one subdirectory per shape, and removed after their measurement unless --keep. A shape
whose estimated size does not fit the free space is skipped, and said so.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_digest import parse_size  # noqa: E402
from measured_child import pinned_to, run_measured  # noqa: E402
from scale_bookie import LEDGER_CURRENT, ORDERS, GeneratedBookie, Shape, generate, generated, is_generated  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
SHAPES = ((10**4, 10**2), (10**5, 10**3), (10**6, 10**4))  # (ledgers, entry logs)
ENTRY_SIZES = (100, 65536)
STORAGES = ("interleaved", "db")
ROUND_ROBIN_LOG_BYTES = 100_000  # a round-robin bookie's logs: small, as a bookie with many writers rolls them
RECORD_OVERHEAD = 4 + 32 + 8  # length prefix, entry header, the longest common digest
IDX_FILE_BYTES = 12 << 10  # header + one page, in 4 KiB blocks
CAT_BATCH = 1000  # files per cat, well inside ARG_MAX
# The bare `locations` cursor, run by the measured install's own interpreter (so its own rocksdict): every pair
# taken from rocksdict in raw mode through the scanner's read-only view, nothing done with them. The pairs are
# drained by a zero-length deque, the fastest way Python has to take them (a generator per pair, as in
# `sum(1 for _ in pairs)`, adds 0.3-0.4 s at 10^7 pairs).
BARE_CURSOR = """
import collections, sys, tempfile
from pathlib import Path
from scanner.storage.dbstorage import ReadOnlyRocksDb
with tempfile.TemporaryDirectory() as work, ReadOnlyRocksDb(Path(sys.argv[1]), Path(work)) as rocks:
    collections.deque(rocks.pairs_from(b""), maxlen=0)
"""
GOALS = (
    "goals (issue 9): 100-byte entries >= 1 M entries/s warm on one core; 64 KiB >= 2 GB/s warm on one core,"
    " cold <= 1.1x cat; peak RSS <= 150 MB at 10^6 ledgers / 10^4 logs, flat from 10^4"
)


@dataclass(frozen=True)
class Run:
    seconds: float
    cpu_seconds: float
    peak_rss_mib: float
    entries_verified: int
    findings: dict


def shapes(args) -> list[Shape]:
    chosen = []
    for ledgers, logs in SHAPES[:1] if args.quick else SHAPES:
        if args.ledgers and ledgers not in args.ledgers:
            continue
        for entry_size in args.entry_size or ENTRY_SIZES:
            per_ledger = args.entries_per_ledger if entry_size < 4096 else max(1, args.size // (ledgers * entry_size))
            if args.order == "round-robin":
                if entry_size >= 4096:
                    continue
                logs = -(-ledgers * per_ledger * (entry_size + RECORD_OVERHEAD) // ROUND_ROBIN_LOG_BYTES)
            for storage in args.storage or STORAGES:
                chosen.append(Shape(storage, ledgers, logs, entry_size, per_ledger, args.order))
    return chosen


def estimated_bytes(shape: Shape) -> int:
    logs = shape.entries * (shape.entry_size + RECORD_OVERHEAD)
    index = shape.ledgers * IDX_FILE_BYTES if shape.storage == "interleaved" else shape.entries * 24
    return logs + index + shape.ledgers * 300  # and the dump


def drop_from_page_cache(paths) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cat_seconds(paths: Iterable[Path | str], cpu: int | None) -> float:
    started = time.perf_counter()
    paths = iter(paths)
    while batch := [str(path) for path in itertools.islice(paths, CAT_BATCH)]:
        subprocess.run(["cat", *batch], stdout=subprocess.DEVNULL, check=True, preexec_fn=pinned_to(cpu))
    return time.perf_counter() - started


def scan(bookie: GeneratedBookie, scanner: Path, cpu: int | None) -> Run:
    command = [str(scanner), "scan", "--full-speed", "--bookie-conf", str(bookie.bookie_conf),
               "--metadata", f"file:{bookie.dump}", "--format", "json"]
    child = run_measured(command, cpu)
    if child.exit_status not in (0, 1):
        raise SystemExit(f"scan of {bookie.directory} exited {child.exit_status}: {child.error_tail}")
    summary = json.loads(child.output)["summary"]
    return Run(child.seconds, child.cpu_seconds, child.peak_rss_mib, summary["entries_verified"], summary["findings"])


def bare_cursor_cpu(bookie: GeneratedBookie, scanner: Path, cpu: int | None) -> float:
    """CPU seconds of a process of the install's interpreter that only takes every pair of the `locations` DB."""
    command = [str(scanner.parent / "python"), "-c", BARE_CURSOR, str(bookie.directory / LEDGER_CURRENT / "locations")]
    child = run_measured(command, cpu)
    if child.exit_status != 0:
        raise SystemExit(f"the bare cursor on {bookie.directory} exited {child.exit_status}: {child.error_tail}")
    return child.cpu_seconds


def measure(bookie: GeneratedBookie, scanner: Path, cold: bool, repeat: int, cpu: int | None,
            cursor: bool) -> tuple[float, Run, float | None]:
    """(the fastest cat, the fastest scan, the bare cursor's least CPU if ``cursor``) with the files warm or cold
    before each timed run."""
    def prepare() -> None:
        files = itertools.chain(bookie.entry_logs, bookie.index_files())
        if cold:
            drop_from_page_cache(files)
        else:
            cat_seconds(files, cpu)

    cats, runs, cursors = [], [], []
    for _ in range(repeat):  # cat and scan take turns: a shared disk's good and bad moments fall on both
        prepare()
        cats.append(cat_seconds(bookie.entry_logs, cpu))
        prepare()
        runs.append(scan(bookie, scanner, cpu))
        if cursor:
            prepare()
            cursors.append(bare_cursor_cpu(bookie, scanner, cpu))
    return min(cats), min(runs, key=lambda run: run.seconds), min(cursors, default=None)


def bookie_for(shape: Shape, root: Path) -> tuple[GeneratedBookie, bool]:
    """The shape's bookie under ``root``, generated unless a complete one is there; True if generated now."""
    directory = root / shape.name
    if is_generated(directory):
        return generated(directory), False
    shutil.rmtree(directory, ignore_errors=True)  # an interrupted generation
    started = time.perf_counter()
    bookie = generate(shape, directory)
    print(f"  generated {shape.name} in {time.perf_counter() - started:.0f} s", flush=True)
    return bookie, True


def print_row(shape: Shape, cache: str, logs_bytes: int, cat: float, run: Run) -> None:
    findings = "" if not run.findings else f"  FINDINGS {run.findings}"
    print(f"{shape.storage:>11} {shape.ledgers:>9,} {shape.entry_logs:>6,} {shape.entry_size:>6} {cache:>5} "
          f"{run.entries_verified:>11,} {logs_bytes / 1e9:>6.3f} {run.seconds:>7.1f} "
          f"{run.entries_verified / run.seconds / 1e6:>7.3f} {logs_bytes / run.seconds / 1e9:>6.2f} "
          f"{run.seconds / cat:>6.1f} {run.peak_rss_mib:>7.0f} {run.cpu_seconds:>6.1f}{findings}", flush=True)


def print_cursor(run: Run, cursor_cpu: float) -> None:
    print(f"{'':>11} the bare `locations` cursor alone: {cursor_cpu:.2f} CPU s; the scan's CPU "
          f"{run.cpu_seconds:.2f} s is {run.cpu_seconds / cursor_cpu:.2f} x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="only the smallest shapes (10^4 ledgers, 10^2 logs)")
    parser.add_argument("--ledgers", type=int, action="append", help="only the shape with this many ledgers")
    parser.add_argument("--storage", choices=STORAGES, action="append", help="only this storage (repeatable)")
    parser.add_argument("--entry-size", type=int, choices=ENTRY_SIZES, action="append", help="only this payload size")
    parser.add_argument("--entries-per-ledger", type=int, default=10, help="100-byte entries of each ledger here")
    parser.add_argument("--order", choices=ORDERS, default="groups",
                        help="how the ledgers' entries interleave in the logs (round-robin: 100-byte entries only)")
    parser.add_argument("--size", type=parse_size, default=1 << 30,
                        help="bytes of 64 KiB entries per bookie (default 1G; at least one entry per ledger)")
    parser.add_argument("--dir", type=Path, help="where bookies are generated and cached (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the generated bookies for reruns")
    parser.add_argument("--repeat", type=int, default=2, help="scans per measurement; the fastest counts")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-cache measurements")
    parser.add_argument("--cpu", type=int, help="pin the scan (and cat) to this CPU")
    parser.add_argument("--no-cursor", action="store_true",
                        help="do not time the bare `locations` cursor beside DbLedgerStorage's warm scans")
    parser.add_argument("--scanner", type=Path, default=REPOSITORY / ".venv" / "bin" / "bookie-scanner",
                        help="the bookie-scanner command to measure")
    args = parser.parse_args()
    if not args.scanner.is_file():
        parser.error(f"{args.scanner} not found: run ./dev demo or ./dev test first, or give --scanner")
    if args.repeat < 1 or args.entries_per_ledger < 1:
        parser.error("--repeat and --entries-per-ledger must be at least 1")
    if args.dir is not None and args.dir.exists() and not args.dir.is_dir():
        parser.error(f"--dir {args.dir}: not a directory")
    if args.cpu is not None and args.cpu not in os.sched_getaffinity(0):
        parser.error(f"--cpu {args.cpu}: this process may run on CPUs {sorted(os.sched_getaffinity(0))} only")
    root = Path(tempfile.mkdtemp(prefix="bench-scale-", dir=args.dir)) if args.dir is None else args.dir
    root.mkdir(parents=True, exist_ok=True)
    print(f"{'storage':>11} {'ledgers':>9} {'logs':>6} {'entry':>6} {'cache':>5} {'entries':>11} {'GB':>6} "
          f"{'scan s':>7} {'M ent/s':>7} {'GB/s':>6} {'x cat':>6} {'RSS MiB':>7} {'CPU s':>6}")
    try:
        for shape in shapes(args):
            if shape.entry_size >= 4096 and shape.entries * shape.entry_size > args.size:
                print(f"  skipped {shape.name}: one entry per ledger is {shape.ledgers * shape.entry_size / 1e9:.1f} GB, "
                      f"over --size")
                continue
            needed = estimated_bytes(shape)
            if not is_generated(root / shape.name) and needed > shutil.disk_usage(root).free * 0.8:
                print(f"  skipped {shape.name}: needs about {needed / 1e9:.1f} GB, the disk has less free")
                continue
            bookie, fresh = bookie_for(shape, root)
            try:
                logs_bytes = sum(p.stat().st_size for p in bookie.entry_logs)
                for cache in ("warm",) if args.no_cold else ("warm", "cold"):
                    cursor = cache == "warm" and shape.storage == "db" and not args.no_cursor
                    cat, run, cursor_cpu = measure(bookie, args.scanner, cache == "cold", args.repeat, args.cpu, cursor)
                    print_row(shape, cache, logs_bytes, cat, run)
                    if cursor_cpu is not None:
                        print_cursor(run, cursor_cpu)
            finally:
                if fresh and not args.keep:
                    shutil.rmtree(bookie.directory)
    finally:
        if args.dir is None and not args.keep:
            shutil.rmtree(root)
        elif args.keep:
            print(f"bookies kept in {root}")
    print(GOALS)


if __name__ == "__main__":
    main()
