"""Sustained pacing accuracy of throttle.Pacer on the real clock.

For each case a loop takes chunks the way a scan would (64 KiB reads, or batches of 100-byte
entries) for --seconds and prints the achieved rate against the configured one. The baseline,
measured first in the same run, is the take rate of an unlimited pacer: the share of it a case
needs shows how much headroom the pacer's own cost leaves. Goal: every error within ±5 %.
"achieved" counts everything, the initial burst (0.1 s of the rate) included; "steady" leaves the
burst out, which is the rate a long scan sees.

    .venv/bin/python bench/bench_throttle.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass

from throttle import NO_JITTER, Pacer

MIB = 1 << 20
ENTRY_BYTES = 100
ENTRIES_PER_BATCH = 64
BURST_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class Case:
    label: str
    bytes_per_second: float | None
    entries_per_second: float | None
    chunk_bytes: int
    chunk_entries: int  # 0: the loop takes bytes only
    threads: int = 1

    @property
    def limit(self) -> tuple[str, float]:
        if self.bytes_per_second is not None:
            return "B/s", self.bytes_per_second
        return "entries/s", self.entries_per_second


def scan_batch(entries_per_second: float | None, bytes_per_second: float | None, threads: int = 1) -> Case:
    label = f"{ENTRIES_PER_BATCH} x {ENTRY_BYTES} B entries"
    return Case(label, bytes_per_second, entries_per_second, ENTRIES_PER_BATCH * ENTRY_BYTES, ENTRIES_PER_BATCH, threads)


def read_chunk(bytes_per_second: float, threads: int = 1) -> Case:
    return Case("64 KiB reads", bytes_per_second, None, 64 * 1024, 0, threads)


CASES = [
    read_chunk(1 * MIB), read_chunk(20 * MIB), read_chunk(200 * MIB),
    scan_batch(None, 1 * MIB), scan_batch(None, 20 * MIB), scan_batch(None, 200 * MIB),
    scan_batch(100_000, None),
    read_chunk(20 * MIB, threads=4),
]


def drive(pacer: Pacer, case: Case, seconds: float) -> tuple[int, int, float]:
    """Take chunks from ``case.threads`` threads for ``seconds``; (bytes, entries, elapsed)."""
    totals = [[0, 0] for _ in range(case.threads)]
    started = time.monotonic()
    deadline = started + seconds

    def loop(total: list[int]) -> None:
        while time.monotonic() < deadline:
            if case.chunk_entries:
                pacer.take_entries(case.chunk_entries)
            pacer.take_bytes(case.chunk_bytes)
            total[0] += case.chunk_bytes
            total[1] += case.chunk_entries

    workers = [threading.Thread(target=loop, args=(total,)) for total in totals]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - started
    return sum(t[0] for t in totals), sum(t[1] for t in totals), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each sustained run (default 20)")
    args = parser.parse_args()

    baseline_case = scan_batch(None, None)
    _, entries, elapsed = drive(Pacer(None, None, jitter=NO_JITTER), baseline_case, min(args.seconds, 3.0))
    ceiling = entries / baseline_case.chunk_entries / elapsed
    print(f"baseline: unlimited pacer, {ceiling:,.0f} batches/s (take_entries + take_bytes per batch)", flush=True)
    print(f"{'case':<24} {'thr':>3} {'configured':>16} {'achieved':>16} {'error':>8} {'steady':>8} {'of ceiling':>10}")
    worst = 0.0
    for case in CASES:
        pacer = Pacer(case.bytes_per_second, case.entries_per_second, burst_seconds=BURST_SECONDS, jitter=NO_JITTER)
        total_bytes, total_entries, elapsed = drive(pacer, case, args.seconds)
        unit, configured = case.limit
        amount = total_bytes if unit == "B/s" else total_entries
        achieved = amount / elapsed
        error = (achieved / configured - 1) * 100
        steady = ((amount - configured * BURST_SECONDS) / elapsed / configured - 1) * 100
        worst = max(worst, abs(error))
        needed = configured / (case.chunk_bytes if unit == "B/s" else case.chunk_entries) / ceiling
        shown = (lambda v: f"{v / MIB:,.3f} MiB/s") if unit == "B/s" else (lambda v: f"{v:,.0f} ent/s")
        print(f"{case.label:<24} {case.threads:>3} {shown(configured):>16} {shown(achieved):>16} "
              f"{error:>+7.2f}% {steady:>+7.2f}% {needed:>9.1%}", flush=True)
    print(f"worst error {worst:.2f}% ({'within' if worst <= 5 else 'OUTSIDE'} the ±5 % goal)")


if __name__ == "__main__":
    main()
