"""The whole `bookie-scanner audit` at cluster scale: 100 bookies, metadata from a dump and from a real ZooKeeper.

Synthetic exports (one Parquet file per bookie, written with pyarrow as `export` writes them) and the
matching ledger metadata: every ledger CLOSED, ensemble 3, write quorum 3, on 3 of 100 bookies. Every
10th ledger lacks a few entries in its middle on its first bookie, every 20th has damaged copies of its
last entries on its second: the audit must find exactly those (N/10 + N/20 under_replicated_entry
violations) and nothing else.

Each entry-copy size (default 10^7 and 10^9) has the same ledgers, only longer: the audit's time should
follow sequence groups (the same at every size), not entries. The metadata is a dump file and,
with ``--zookeeper``, Debian's ZooKeeper (2 GiB heap) filled with the same znodes in multi-create
batches. With ``--cluster``, the audit also runs on a standalone Spark cluster started from pyspark's own
``spark-class``: one worker of one core, then two workers of one core each.

Each audit is the command as an operator runs it, in a child process (`python -m scanner.cli audit
--exports DIR --metadata URI --master M --format json`): wall time from start to exit, the driver's peak
RSS (the Python process the operator started) and the JVM's (local mode: driver and executors in one).

    python bench/bench_audit.py                                    # 10^4 ledgers, dump, local[2]
    python bench/bench_audit.py --ledgers 1000000 --zookeeper      # the issue's scale
    python bench/bench_audit.py --ledgers 100000 --cluster --sizes 1e7
    python bench/bench_audit.py --ledgers 100000 --cluster --no-local --sizes 1e7 --pin --turns 2
    python bench/bench_audit.py --ledgers 1000000 --cluster --no-local --sizes 1e7 --worker-cpus 0.8 --turns 2
    python bench/bench_audit.py --ledgers 1000000 --cluster --no-local --sizes 1e7 --worker-cpus 0.6 --driver-cpus 0.8
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from scanner.audit.availability import EntryAvailability  # noqa: E402
from scanner.audit.export import PARQUET_FILE, PARQUET_SCHEMA  # noqa: E402
from scanner.metadata.ledger import LedgerMetadata, LedgerState, serialize_ledger_metadata  # noqa: E402
from scanner.metadata.ledger_paths import LedgerManager, layout_bytes, ledger_path  # noqa: E402
from scanner.metadata.snapshot import write_dump_nodes  # noqa: E402
from scanner.metadata.store import ZNode  # noqa: E402
from cpu_budget import CpuBudget  # noqa: E402
from spark_cluster import StandaloneCluster  # noqa: E402

BOOKIES = [f"10.1.{n // 250}.{n % 250}:3181" for n in range(100)]
QUORUM = 3
ROOT = "/ledgers"
FILL_BATCH = 1000  # znodes created per multi request
MEASURE = """
import glob, json, os, sys, threading, time
from scanner.cli import main
# VmHWM, not ru_maxrss: Linux carries a process's ru_maxrss over from the process it was forked from (the
# bench, holding its generated data) across exec; VmHWM is the peak of that process's own memory
def peak_kib(pid):  # 0 for a process gone, or without memory of its own any more
    try:
        hwm = [line for line in open(f"/proc/{pid}/status") if line.startswith("VmHWM")]
    except OSError:
        return 0
    return int(hwm[0].split()[1]) if hwm else 0
def cpu_seconds(pid):  # user + system time so far, 0 for a process gone
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
jvm_peak_kib = jvm_cpu_s = 0
def watch_children():  # the JVM pyspark starts is never waited for, so wait4 cannot see its peak nor its CPU
    global jvm_peak_kib, jvm_cpu_s
    while True:
        for listing in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
            for child in open(listing).read().split():
                jvm_peak_kib = max(jvm_peak_kib, peak_kib(child))
                jvm_cpu_s = max(jvm_cpu_s, cpu_seconds(child))
        time.sleep(0.5)
threading.Thread(target=watch_children, daemon=True).start()
status = main(sys.argv[1:])
print(json.dumps({"status": status, "driver_rss_kib": peak_kib("self"),
                  "jvm_rss_kib": jvm_peak_kib, "jvm_cpu_s": jvm_cpu_s,
                  "driver_cpu_s": sum(os.times()[:2])}), file=sys.stderr)
"""

def ensemble(ledger_id: int) -> tuple[str, ...]:
    return tuple(BOOKIES[(ledger_id * QUORUM + k) % len(BOOKIES)] for k in range(QUORUM))


def expected_violations(ledgers: int) -> int:
    return len(range(0, ledgers, 10)) + len(range(0, ledgers, 20))


def write_exports(directory: Path, ledgers: int, entries: int) -> int:
    """Every bookie's export of ``ledgers`` ledgers of ``entries`` entries; returns the sequence groups written."""
    if entries < 3:
        raise SystemExit(f"{entries} entries per ledger: the missing and the damaged entries need at least 3")
    middle, gap = entries // 2, max(1, min(10, entries // 4))
    damaged_size = max(1, min(5, entries // 4))  # the last entries, apart from the gap: two violations
    damaged_first = entries - damaged_size
    whole = EntryAvailability.from_runs([(0, entries - 1)])
    gapped = EntryAvailability.from_runs([(0, middle - 1), (middle + gap, entries - 1)])
    damaged = EntryAvailability.from_runs([(damaged_first, damaged_first + damaged_size - 1)])
    nothing = EntryAvailability()
    exported_at = datetime.datetime.now(datetime.timezone.utc)
    rows: dict[str, list[tuple[int, EntryAvailability, EntryAvailability]]] = {bookie: [] for bookie in BOOKIES}
    for ledger_id in range(ledgers):
        for position, bookie in enumerate(ensemble(ledger_id)):
            held = gapped if position == 0 and ledger_id % 10 == 0 else whole
            bad = damaged if position == 1 and ledger_id % 20 == 0 else nothing
            rows[bookie].append((ledger_id, held, bad))
    encoded = {id(a): (a.encode(), [(g.first_sequence_start, g.last_sequence_start, g.sequence_size,
                                     g.sequence_period) for g in a.groups], a.entry_count)
               for a in (whole, gapped, damaged, nothing)}
    groups = 0
    for bookie, bookie_rows in rows.items():
        held = [encoded[id(h)] for _, h, _ in bookie_rows]
        bad = [encoded[id(b)] for _, _, b in bookie_rows]
        groups += sum(len(h[1]) for h in held) + sum(len(b[1]) for b in bad)
        table = pa.table({
            "ledger_id": [ledger_id for ledger_id, _, _ in bookie_rows],
            "entries": [h[0] for h in held], "entry_groups": [h[1] for h in held],
            "entry_count": [h[2] for h in held],
            "damaged": [b[0] for b in bad], "damaged_groups": [b[1] for b in bad],
            "damaged_count": [b[2] for b in bad],
            "index_problem": [None] * len(bookie_rows), "storage": ["db"] * len(bookie_rows),
            "exported_at": [exported_at] * len(bookie_rows),
        }, schema=PARQUET_SCHEMA)
        partition = directory / f"bookie_id={bookie.replace(':', '%3A')}"
        partition.mkdir(parents=True)
        pq.write_table(table, partition / PARQUET_FILE)
    return groups


def cluster_nodes(ledgers: int, entries: int):
    """The cluster's znodes: root, LAYOUT, the registered bookies, the ledger tree with its parents."""
    yield ZNode(ROOT, b"", False, 1, 0, 0)
    yield ZNode(f"{ROOT}/LAYOUT", layout_bytes(LedgerManager.HIERARCHICAL), False, 2, 0, 0)
    yield ZNode(f"{ROOT}/available", b"", False, 3, 0, 0)
    for bookie in BOOKIES:
        yield ZNode(f"{ROOT}/available/{bookie}", b"", False, 4, 0, 0)
    parents: set[str] = set()
    for ledger_id in range(ledgers):
        path = ledger_path(LedgerManager.HIERARCHICAL, ROOT, ledger_id)
        parent = path.rsplit("/", 1)[0]
        if parent not in parents:
            grandparent = parent.rsplit("/", 1)[0]
            if grandparent not in parents:
                parents.add(grandparent)
                yield ZNode(grandparent, b"", False, 5, 0, 0)
            parents.add(parent)
            yield ZNode(parent, b"", False, 5, 0, 0)
        meta = LedgerMetadata(ledger_id=ledger_id, format_version=3, ensemble_size=QUORUM, write_quorum=QUORUM,
                              ack_quorum=2, state=LedgerState.CLOSED, last_entry_id=entries - 1, length=entries,
                              segments=((0, ensemble(ledger_id)),), digest_type=None, password=None, ctime=None,
                              custom_metadata=(), ctoken=None)
        yield ZNode(path, serialize_ledger_metadata(meta), False, 6 + ledger_id, 0, 0)


def fill_zookeeper(client, prefix: str, ledgers: int, entries: int) -> None:
    """Create the cluster's znodes under ``prefix``, ``FILL_BATCH`` to a multi request, a few requests in flight."""
    client.ensure_path(prefix)
    pending, transaction, size = [], client.transaction(), 0
    for node in cluster_nodes(ledgers, entries):
        transaction.create(prefix + node.path, node.data)
        size += 1
        if size == FILL_BATCH:
            pending.append(transaction.commit_async())
            transaction, size = client.transaction(), 0
            if len(pending) >= 4:
                _check_created(pending.pop(0).get())
    if size:
        pending.append(transaction.commit_async())
    for result in pending:
        _check_created(result.get())


def _check_created(results) -> None:
    failed = [result for result in results if isinstance(result, Exception)]
    if failed:
        raise SystemExit(f"filling ZooKeeper failed: {failed[0]!r}")


def run_audit(exports: Path, metadata: str, master: str, environment: dict[str, str],
              cpus: set[int] | None = None, budget: CpuBudget | None = None) -> dict:
    """The `audit` command in a child process (on ``cpus`` only, if given; it and the JVM it starts in ``budget``,
    if given): wall seconds, exit status, violations, the driver's and JVM's peak RSS."""
    command = [sys.executable, "-c", MEASURE, "audit", "--exports", str(exports), "--metadata", metadata,
               "--master", master, "--format", "json"]

    def confine() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if budget is not None:
            budget.join()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=environment,
                          preexec_fn=None if cpus is None and budget is None else confine)
    seconds = time.perf_counter() - started
    measured = json.loads(done.stderr.strip().splitlines()[-1]) if done.stderr.strip() else {}
    if measured.get("status") not in (0, 1):
        raise SystemExit(f"audit failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    summary = json.loads(done.stdout)["summary"]
    return {"seconds": seconds, "violations": {k: v for k, v in summary["violations"].items() if v},
            "checked": summary["ledgers_checked"], "driver_mib": measured["driver_rss_kib"] / 1024,
            "jvm_mib": measured["jvm_rss_kib"] / 1024, "jvm_cpu": measured["jvm_cpu_s"],
            "driver_cpu": measured["driver_cpu_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ledgers", type=int, default=10_000)
    parser.add_argument("--sizes", default="1e7,1e9", help="entry copies, comma-separated (default: 1e7,1e9)")
    parser.add_argument("--zookeeper", action="store_true", help="also audit with the metadata in a real ZooKeeper")
    parser.add_argument("--cluster", action="store_true",
                        help="also on a standalone cluster: 1 worker x 1 core, then 2 workers x 1 core")
    parser.add_argument("--pin", action="store_true",
                        help="with --cluster: each worker (and all it starts) on a CPU of its own, the last CPUs "
                             "first; the audit's driver and the master on the first CPU")
    parser.add_argument("--worker-cpus", type=float, default=None, metavar="CPUS",
                        help="with --cluster: each worker (and all it starts) a CPU budget of this many CPUs of its "
                             "own, a cgroup quota (root), as on a host of its own: the same for one worker and for "
                             "two, and the driver and the master take nothing from it")
    parser.add_argument("--driver-cpus", type=float, default=None, metavar="CPUS",
                        help="with --cluster: the audit's driver (and the JVM it starts) a CPU budget of this many "
                             "CPUs, the same for one worker and for two, as a driver on a host of its own has (without "
                             "it, on 2 CPUs, two workers of 0.8 leave the driver 0.4 and one worker 1.2); e.g. "
                             "--worker-cpus 0.6 --driver-cpus 0.8 on 2 CPUs: the number of workers is then the only "
                             "thing that changes")
    parser.add_argument("--turns", type=int, default=1,
                        help="with --cluster: rounds of (1 worker, 2 workers) taken in turn; each row is one run")
    parser.add_argument("--no-local", action="store_true", help="skip the local[2] runs")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each audit; the fastest counts")
    parser.add_argument("--dir", type=Path, default=None, help="where to create the temporary directory (made if missing)")
    args = parser.parse_args()
    sizes = [int(float(size)) for size in args.sizes.split(",")]
    environment = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO)}
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="bench-audit-", dir=args.dir))
    budget = "" if args.worker_cpus is None else f"; each worker a budget of {args.worker_cpus:g} CPU"
    budget += "" if args.driver_cpus is None else f"; the driver a budget of {args.driver_cpus:g} CPU"
    print(f"{args.ledgers:,} ledgers, E=Wq={QUORUM}, {len(BOOKIES)} bookies, {QUORUM * args.ledgers:,} export rows; "
          f"load {os.getloadavg()[0]:.1f}{budget}", flush=True)
    zookeeper = None
    try:
        datasets = []
        for size in sizes:
            entries = max(1, size // (args.ledgers * QUORUM))
            started = time.perf_counter()
            groups = write_exports(directory / f"exports-{size}", args.ledgers, entries)
            dump = directory / f"dump-{size}.json"
            with dump.open("w") as out:
                write_dump_nodes(cluster_nodes(args.ledgers, entries), out)
            print(f"  generated {size:.0e} entry copies ({entries:,} per ledger, {groups:,} groups) "
                  f"in {time.perf_counter() - started:.0f} s", flush=True)
            metadata = {"dump": f"file:{dump}"}
            if args.zookeeper:
                zookeeper = zookeeper or _zookeeper(directory)
                metadata["zookeeper"] = _filled(zookeeper, size, args.ledgers, entries)
            datasets.append((size, entries, groups, directory / f"exports-{size}", metadata))
        masters = [] if args.no_local else [("local[2]", None)]
        if args.cluster:
            masters += [("1 worker x 1 core", 1), ("2 workers x 1 core", 2)] * args.turns
        cpus = _pinning(args.pin)
        seconds: dict[tuple[str, int, str], list[float]] = {}  # (master, size, metadata) -> each turn's time
        print(f"{'master':>20} {'metadata':>9} {'entry copies':>12} {'groups':>10} {'audit s':>8} {'ratio':>6} "
              f"{'driver MiB':>10} {'JVM MiB':>8} {'driver CPU s':>12} {'JVM CPU s':>9} {'cluster CPU s':>13} "
              f"{'load':>5}  violations")
        expected = expected_violations(args.ledgers)
        for label, workers in masters:
            baselines: dict[str, float] = {}  # per metadata store: its smallest size
            for size, entries, groups, exports, metadata in datasets:
                for store, uri in metadata.items():
                    load = os.getloadavg()[0]
                    run = _best_of(args.repeat, exports, uri, label, workers, directory, environment, cpus,
                                   args.worker_cpus, args.driver_cpus)
                    seconds.setdefault((label, size, store), []).append(run["seconds"])
                    baseline = baselines.setdefault(store, run["seconds"])
                    found = run["violations"]
                    verdict = "" if found == {"under_replicated_entry": expected} else f"  WRONG, expected {expected}"
                    print(f"{label:>20} {store:>9} {size:>12.0e} {groups:>10,} {run['seconds']:>8.1f} "
                          f"{run['seconds'] / baseline:>6.2f} {run['driver_mib']:>10.0f} {run['jvm_mib']:>8.0f} "
                          f"{run['driver_cpu']:>12.1f} {run['jvm_cpu']:>9.1f} {run.get('cluster_cpu', 0):>13.1f} "
                          f"{load:>5.1f}  {found}{verdict}", flush=True)
        for (label, size, store), one in seconds.items():
            if label.startswith("1 worker"):
                two = seconds[("2 workers x 1 core", size, store)]
                print(f"2 workers against 1, {store}, {size:.0e}: "
                      + ", ".join(f"{a / b:.2f}x ({a:.1f} / {b:.1f} s)" for a, b in zip(one, two)))
        print(f"load at the end {os.getloadavg()[0]:.1f}")
    finally:
        if zookeeper is not None:
            zookeeper.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _pinning(pin: bool) -> list[int] | None:
    """The CPUs to pin to, the driver's first and the workers' from the last (None: no pinning)."""
    if not pin:
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    return cpus


def _best_of(repeat: int, exports: Path, uri: str, label: str, workers: int | None, directory: Path,
             environment: dict[str, str], cpus: list[int] | None, worker_cpus: float | None,
             driver_budget: float | None) -> dict:
    runs = []
    driver_cpus = None if cpus is None or workers is None else {cpus[0]}
    for _ in range(repeat):
        if workers is None:
            runs.append(run_audit(exports, uri, label, environment))
            continue
        cluster_dir = Path(tempfile.mkdtemp(prefix="cluster-", dir=directory))
        pinned = None if cpus is None else dict(cpus=cpus[::-1][:workers], master_cpus=driver_cpus)
        driver_group = contextlib.nullcontext() if driver_budget is None else CpuBudget("audit-driver", driver_budget)
        with StandaloneCluster(cluster_dir, workers, cpu_budget=worker_cpus, **(pinned or {})) as cluster, \
                driver_group as budget:
            cpu: dict[int, float] = {}
            done = threading.Event()
            polling = threading.Thread(target=_poll_cpu, args=(cluster, cpu, done))
            polling.start()
            try:
                runs.append(run_audit(exports, uri, cluster.url, environment, driver_cpus, budget))
            finally:
                done.set()
                polling.join()
            runs[-1]["cluster_cpu"] = sum(cpu.values())
    return min(runs, key=lambda run: run["seconds"])


def _poll_cpu(cluster: StandaloneCluster, cpu: dict[int, float], done: threading.Event) -> None:
    """Each process of ``cluster``: its last CPU seconds seen, polled until ``done`` (within half a second of
    each process's end)."""
    while True:
        cpu.update(cluster.process_cpu())
        if done.wait(0.5):
            return


def _zookeeper(directory: Path):
    from zookeeper_server import ZooKeeperServer

    server = ZooKeeperServer(directory / "zookeeper", heap_mb=2048)
    server.start()
    return server


def _filled(server, size: int, ledgers: int, entries: int) -> str:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=server.connect_string, timeout=30)
    client.start(timeout=30)
    try:
        started = time.perf_counter()
        prefix = f"/size{size}"
        fill_zookeeper(client, prefix, ledgers, entries)
        print(f"  ZooKeeper filled with {ledgers:,} ledgers in {time.perf_counter() - started:.0f} s", flush=True)
    finally:
        client.stop()
        client.close()
    return f"zk://{server.connect_string}{prefix}{ROOT}"


if __name__ == "__main__":
    main()
