"""How the Spark audit scales with entries: 10^7, 10^8 and 10^9 entry copies over 100 bookies, on local[2].

Synthetic exports are generated directly as sequence groups on Spark's executors (never a row per
entry) and written as Parquet under a temp dir, with a dump of the matching ledger metadata. Every
size has the same ledgers (ensemble 3, write quorum 3, so each bookie holds one run per ledger),
only longer: 10x the entries per size. Every 10th ledger lacks a range of 10 entries on one bookie
(under-replicated), every 20th has 5 damaged copies on another; the audit must find exactly those.

Printed per size: groups in the exports, the audit's wall time, and its ratio to the smallest size
measured in the same run. The ratios should stay near 1: the audit's work follows groups, not entries.

    python bench/bench_audit.py                  # 2,000 ledgers
    python bench/bench_audit.py --ledgers 20000
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scanner.audit.availability import EntryAvailability  # noqa: E402
from scanner.audit.export import export_schema  # noqa: E402
from scanner.audit.job import AuditOptions, run_audit  # noqa: E402
from scanner.audit.spark_session import spark_session  # noqa: E402
from scanner.metadata.ledger import LedgerMetadata, LedgerState, serialize_ledger_metadata  # noqa: E402
from scanner.metadata.ledger_paths import LedgerManager, ledger_path  # noqa: E402

BOOKIES = [f"10.1.{n // 250}.{n % 250}:3181" for n in range(100)]
QUORUM = 3
SIZES = (10**7, 10**8, 10**9)
LAYOUT = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1\n"


def ensemble(ledger_id: int) -> tuple[str, ...]:
    return tuple(BOOKIES[(ledger_id * QUORUM + k) % len(BOOKIES)] for k in range(QUORUM))


def export_rows(ledger_id: int, entries: int, exported_at):
    """The three bookies' rows of one ledger, made from runs: a gap on the first, damage on the second."""
    rows = []
    for position, bookie in enumerate(ensemble(ledger_id)):
        runs = [(0, entries - 1)]
        if position == 0 and ledger_id % 10 == 0:
            middle = entries // 2
            runs = [(0, middle - 1), (middle + 10, entries - 1)]
        damaged = [(entries // 3, entries // 3 + 4)] if position == 1 and ledger_id % 20 == 0 else []
        held, bad = EntryAvailability.from_runs(runs), EntryAvailability.from_runs(damaged)
        rows.append((bookie, ledger_id, held.encode(), _groups(held), held.entry_count,
                     bad.encode(), _groups(bad), bad.entry_count, None, "db", exported_at))
    return rows


def _groups(availability):
    return [(g.first_sequence_start, g.last_sequence_start, g.sequence_size, g.sequence_period)
            for g in availability.groups]


def write_dump(path: Path, ledgers: int, entries: int) -> None:
    nodes = [{"path": "/ledgers", "data_b64": None, "ephemeral": False, "mzxid": 1, "version": 0},
             {"path": "/ledgers/LAYOUT", "data_b64": base64.b64encode(LAYOUT).decode(), "ephemeral": False,
              "mzxid": 2, "version": 0}]
    for ledger_id in range(ledgers):
        meta = LedgerMetadata(ledger_id=ledger_id, format_version=3, ensemble_size=QUORUM, write_quorum=QUORUM,
                              ack_quorum=2, state=LedgerState.CLOSED, last_entry_id=entries - 1, length=entries,
                              segments=((0, ensemble(ledger_id)),), digest_type=None, password=None, ctime=None,
                              custom_metadata=(), ctoken=None)
        nodes.append({"path": ledger_path(LedgerManager.HIERARCHICAL, "/ledgers", ledger_id),
                      "data_b64": base64.b64encode(serialize_ledger_metadata(meta)).decode(),
                      "ephemeral": False, "mzxid": 3 + ledger_id, "version": 0})
    path.write_text(json.dumps(nodes))


def audit(spark, exports: Path, dump: Path) -> tuple[float, dict[str, int]]:
    """Wall seconds of one audit (metadata read, join, judgement, violations materialized) and its counts."""
    from scanner.metadata.snapshot import SnapshotStore

    with SnapshotStore(dump) as store:
        started = time.perf_counter()
        result = run_audit(spark, store, str(exports), AuditOptions(), now_ms=0)
        result.violations.count()
        elapsed = time.perf_counter() - started
    result.close()
    return elapsed, {category: n for category, n in result.counts.items() if n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ledgers", type=int, default=2000)
    args = parser.parse_args()
    spark = spark_session("bench_audit", "local[2]", conf={"spark.ui.enabled": "false",
                                                           "spark.sql.shuffle.partitions": "8"})
    exported_at = datetime.datetime.now(datetime.timezone.utc)
    baseline = None
    print(f"{args.ledgers} ledgers, E=Wq={QUORUM}, {len(BOOKIES)} bookies, local[2]")
    print(f"{'entry copies':>14} {'entries/ledger':>15} {'groups':>8} {'audit s':>8} {'ratio':>6}  violations")
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        datasets = []
        for size in SIZES:
            entries = size // (args.ledgers * QUORUM)
            exports, dump = Path(tmp) / f"exports-{size}", Path(tmp) / f"dump-{size}.json"
            rows = spark.sparkContext.parallelize(range(args.ledgers), 8).flatMap(
                lambda ledger_id, n=entries: export_rows(ledger_id, n, exported_at))
            spark.createDataFrame(rows, export_schema()).write.partitionBy("bookie_id").parquet(str(exports))
            groups = spark.read.parquet(str(exports)).selectExpr(
                "sum(size(entry_groups) + size(damaged_groups))").first()[0]
            write_dump(dump, args.ledgers, entries)
            datasets.append((size, entries, groups, exports, dump))
        audit(spark, *datasets[0][3:])  # warm-up: JIT and Python workers, not the audit, would dominate the first run
        for size, entries, groups, exports, dump in datasets:
            elapsed, counts = audit(spark, exports, dump)
            baseline = baseline or elapsed
            print(f"{size:>14,} {entries:>15,} {groups:>8,} {elapsed:>8.1f} {elapsed / baseline:>6.2f}  {counts}")
    spark.stop()


if __name__ == "__main__":
    main()
