"""Memory and time of a scan's metadata reads from a dump file (``--metadata file:``), at scale.

Writes the metadata dump of a cluster with 10^4 .. 10^6 ledgers (as bench_scale.py's bookies have;
one znode per line, as ``bookie-scanner metadata dump`` writes it) into a temporary directory,
then, in a fresh interpreter per size: opens ``SnapshotStore(dump)``, walks every ledger id and
reads every ledger's metadata once, as a scan does. Reports the time of each step and the peak
RSS of that interpreter; the baseline is the peak RSS of a fresh interpreter that only imports
the store, measured in the same run.

    python bench/bench_metadata_dump.py                    # 10^4, 10^5, 10^6 ledgers
    python bench/bench_metadata_dump.py --ledgers 100000
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measured_child import run_measured  # noqa: E402
from scale_bookie import write_metadata_dump  # noqa: E402


def measure(dump: Path | None) -> dict:
    """In this interpreter: seconds to open, walk and read every ledger of ``dump`` (None: imports only)."""
    from scanner.metadata.snapshot import SnapshotStore

    if dump is None:
        return {}
    started = time.perf_counter()
    with SnapshotStore(dump) as store:
        opened = time.perf_counter()
        ids = 0
        for ledger_id in store.ledger_ids():
            if store.ledger(ledger_id) is None:
                raise SystemExit(f"ledger {ledger_id} listed but not readable")
            ids += 1
        done = time.perf_counter()
    return {"ledgers": ids, "open_s": opened - started, "walk_and_read_s": done - opened}


def run_child(dump: Path | None) -> tuple[dict, float]:
    """``measure`` in a fresh interpreter; returns its figures and its peak RSS in MiB."""
    child = run_measured([sys.executable, __file__, "--measure", str(dump) if dump else ""])
    if child.exit_status != 0:
        raise SystemExit(f"measuring {dump} failed with exit status {child.exit_status}: {child.error_tail}")
    return json.loads(child.output), child.peak_rss_mib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ledgers", type=int, action="append", help="ledger count (repeatable; default 10^4..10^6)")
    parser.add_argument("--entries-per-ledger", type=int, default=10, help="entries of each ledger (metadata only)")
    parser.add_argument("--dir", default=None, help="where to create the temporary directory")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(Path(args.measure) if args.measure else None)))
        return
    _, baseline = run_child(None)
    print(f"fresh interpreter with the store imported: {baseline:.0f} MiB peak RSS")
    print(f"{'ledgers':>9} {'dump MB':>8} {'open s':>7} {'walk+read s':>11} {'peak RSS MiB':>12} {'over baseline':>13}")
    directory = Path(tempfile.mkdtemp(prefix="bench-metadata-dump-", dir=args.dir))
    try:
        for ledgers in args.ledgers or (10**4, 10**5, 10**6):
            dump = directory / f"zk-dump-{ledgers}.json"
            write_metadata_dump(ledgers, args.entries_per_ledger, 100, dump)
            figures, peak = run_child(dump)
            print(f"{figures['ledgers']:>9,} {dump.stat().st_size / 1e6:>8.0f} {figures['open_s']:>7.1f} "
                  f"{figures['walk_and_read_s']:>11.1f} {peak:>12.0f} {peak - baseline:>13.0f}", flush=True)
            dump.unlink()
    finally:
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
