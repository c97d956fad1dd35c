"""Throughput of the BP-34 contract (one ledger at a time, as the Spark audit runs it), in groups/s.

Builds synthetic closed ledgers in memory: ``--entries`` entries each, one ensemble change, and
three copies of every entry, with a few ledgers missing a range of entries on one bookie. Every
bookie's listing is made by BookKeeper's rules (one sequence group per run), encoded to bytes once.
Two shapes: ensemble 3 / write quorum 3 (one run per bookie) and ensemble 5 / write quorum 3
(striped: a bookie's listing has a run every 5 entries, so groups grow with entries).

Timed in CPU seconds of this process (steady when the machine is busy), per shape:

  decode     decode_runs for every listing (bytes to canonical runs)
  contract   decode, then ledger_violations for every ledger (what the audit does per ledger)
  per-entry  the baseline: the same verdict by checking every entry against every write set,
             on a sample of ledgers (it is slow), scaled per ledger

Ratios are against per-entry in the same run, so they hold across machines; rates are this machine's.

    python bench/bench_contract.py                         # 1,000 ledgers x 10,000 entries per shape
    python bench/bench_contract.py --ledgers 100000 --shape 3x3    # the audit's target scale
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scanner.audit.availability import EntryAvailability, decode_runs, merge_runs, subtract_runs  # noqa: E402
from scanner.audit.contract import Category, ledger_violations  # noqa: E402
from scanner.metadata.ledger import LedgerMetadata, LedgerState  # noqa: E402

BOOKIES = [f"10.0.{n // 250}.{n % 250}:3181" for n in range(40)]
GAP_SHARE = 0.05  # ledgers with a missing range on one bookie
BASELINE_SAMPLE = 20  # ledgers timed with the per-entry baseline
SHAPES = {"3x3": (3, 3), "5x3": (5, 3)}


def synthetic_ledger(ledger_id: int, entries: int, size: int, quorum: int, rng: random.Random):
    """A closed ledger with one ensemble change, and each bookie's listing as encoded bytes."""
    change = entries // 2
    first_ensemble = rng.sample(BOOKIES, size)
    second_ensemble = list(first_ensemble)
    second_ensemble[rng.randrange(size)] = rng.choice([b for b in BOOKIES if b not in first_ensemble])
    metadata = LedgerMetadata(
        ledger_id=ledger_id, format_version=3, ensemble_size=size, write_quorum=quorum, ack_quorum=2,
        state=LedgerState.CLOSED, last_entry_id=entries - 1, length=0,
        segments=((0, tuple(first_ensemble)), (change, tuple(second_ensemble))),
        digest_type=None, password=None, ctime=None, custom_metadata=(), ctoken=None)
    missing_on, missing = None, ()
    if rng.random() < GAP_SHARE:
        missing_on = rng.choice(first_ensemble)
        start = rng.randrange(change - 100)
        missing = ((start, start + rng.randrange(100)),)
    held: dict[str, list[tuple[int, int]]] = {}
    for fragment in metadata.fragments():
        for index, bookie in enumerate(fragment.bookies):
            held.setdefault(bookie, []).extend(striped_runs(fragment, index))
    held = {bookie: merge_runs(runs) for bookie, runs in held.items()}
    if missing_on is not None:
        held[missing_on] = subtract_runs(held[missing_on], missing)
    listings = {bookie: EntryAvailability.from_runs(runs).encode() for bookie, runs in held.items()}
    return metadata, listings


def striped_runs(fragment, index):
    """The runs a bookie must hold in a fragment, tiled from one period of the round-robin pattern."""
    size, first, last = fragment.ensemble_size, fragment.first_entry_id, fragment.last_entry_id
    if fragment.write_quorum == size:
        return [(first, last)]
    period = merge_runs((offset, offset) for offset in range(size) if fragment.holds(index, offset))
    return [(max(base + a, first), min(base + b, last))
            for base in range(first - first % size, last + 1, size) for a, b in period
            if base + a <= last and base + b >= first]


def decoded(listings):
    return {bookie: (decode_runs(data), ()) for bookie, data in listings.items()}


def per_entry_verdict(metadata, listings):
    """The baseline: every entry of every fragment checked against its write set, one at a time."""
    held = {bookie: EntryAvailability.decode(data) for bookie, data in listings.items()}
    lacking = 0
    for fragment in metadata.fragments():
        for entry in range(fragment.first_entry_id, fragment.last_entry_id + 1):
            for index in fragment.write_set(entry):
                availability = held.get(fragment.bookies[index])
                if availability is None or entry not in availability:
                    lacking += 1
    return lacking


def timed(work):
    start = time.process_time()
    result = work()
    return time.process_time() - start, result


def run_shape(ledgers: int, entries: int, size: int, quorum: int, seed: int) -> None:
    rng = random.Random(seed)
    print(f"\nensemble {size}, write quorum {quorum}: {ledgers:,} ledgers x {entries:,} entries, "
          f"{GAP_SHARE:.0%} with a missing range")
    build_start = time.process_time()
    cases = [synthetic_ledger(ledger_id, entries, size, quorum, rng) for ledger_id in range(ledgers)]
    groups = sum((len(data) - 64) // 24 for _, listings in cases for data in listings.values())
    print(f"  built in {time.process_time() - build_start:.1f} s: {groups:,} sequence groups, "
          f"{groups / ledgers:,.1f} per ledger")

    gc.collect()
    gc.freeze()  # the synthetic cases live to the end: keep the collector from rescanning them

    def decode_all():
        for _, listings in cases:
            decoded(listings)

    decode_seconds, _ = timed(decode_all)

    def audit():
        return sum(
            1 for metadata, listings in cases
            for violation in ledger_violations(metadata.ledger_id, metadata, decoded(listings))
            if violation.category is Category.UNDER_REPLICATED_ENTRY)

    contract_seconds, flagged = timed(audit)
    sample = cases[:BASELINE_SAMPLE]
    baseline_seconds, _ = timed(lambda: [per_entry_verdict(metadata, listings) for metadata, listings in sample])
    baseline_per_ledger = baseline_seconds / len(sample)
    contract_per_ledger = contract_seconds / ledgers

    print(f"  decode     {decode_seconds:8.2f} s  {groups / decode_seconds:14,.0f} groups/s")
    print(f"  contract   {contract_seconds:8.2f} s  {groups / contract_seconds:14,.0f} groups/s  "
          f"{ledgers / contract_seconds:10,.0f} ledgers/s  ({flagged} ledgers under-replicated)")
    print(f"  per-entry  {baseline_per_ledger * 1e3:8.2f} ms per ledger (sample of {len(sample)})")
    print(f"  ratio      contract is {baseline_per_ledger / contract_per_ledger:,.1f}x faster than per-entry; "
          f"decoding is {decode_seconds / contract_seconds:.0%} of the contract's time")
    gc.unfreeze()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=1000)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shape", action="append", choices=sorted(SHAPES),
                        help="ensemble x write quorum (default: both)")
    args = parser.parse_args()
    for shape in args.shape or sorted(SHAPES):
        run_shape(args.ledgers, args.entries, *SHAPES[shape], args.seed)


if __name__ == "__main__":
    main()
