"""Memory and time of a scan's metadata reads at scale: from a dump file, and from a real ZooKeeper.

For 10^4 .. 10^6 ledgers (the cluster bench_scale.py's bookies belong to: hierarchical manager, one
znode per ledger), each store is filled, then measured in a fresh interpreter per size: open the
store, walk every ledger id, read every ledger's metadata in batches of the pass's size (pipelined
on ZooKeeper, one query per parent on a dump), as a scan does. Reports the time of each step and
the peak RSS of that interpreter; the baseline is the peak RSS of a fresh interpreter that only
imports the stores, measured in the same run.

  file:       the dump (``bookie-scanner metadata dump``'s format) is written into a temporary directory
  zookeeper:  Debian's ZooKeeper runs on 127.0.0.1 (a temporary data dir, ``--zk-heap-mb`` of heap);
              each size gets a tree of its own under ``/sizeN``, created with pipelined requests

    python bench/bench_metadata.py                         # both stores, 10^4, 10^5, 10^6 ledgers
    python bench/bench_metadata.py --store zookeeper --ledgers 100000
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measured_child import run_measured  # noqa: E402
from scale_bookie import ROOT, cluster_nodes, write_metadata_dump  # noqa: E402
from scanner.scan.index_step import METADATA_BATCH  # noqa: E402

PIPELINE = 500  # znode creations in flight while filling ZooKeeper


def measure(uri: str) -> dict:
    """In this interpreter: seconds to open, list and read every ledger of the store at ``uri`` ("": imports only)."""
    from scanner.metadata.uri import open_metadata

    if not uri:
        return {}
    started = time.perf_counter()
    with open_metadata(uri) as store:
        opened = time.perf_counter()
        ids = store.ledger_ids()
        ledgers = 0
        while batch := list(islice(ids, METADATA_BATCH)):
            for read in store.ledger_batch(batch):
                if read.meta is None:
                    raise SystemExit(f"ledger {read.ledger_id} listed but not readable: {read.error}")
            ledgers += len(batch)
        done = time.perf_counter()
    return {"ledgers": ledgers, "open_s": opened - started, "walk_and_read_s": done - opened}


def run_child(uri: str) -> tuple[dict, float]:
    """``measure`` in a fresh interpreter; returns its figures and its peak RSS in MiB."""
    child = run_measured([sys.executable, __file__, "--measure", uri])
    if child.exit_status != 0:
        raise SystemExit(f"measuring {uri} failed with exit status {child.exit_status}: {child.error_tail}")
    return json.loads(child.output), child.peak_rss_mib


def fill_zookeeper(client, prefix: str, ledgers: int, entries_per_ledger: int) -> None:
    """Create the cluster's znodes under ``prefix``, ``PIPELINE`` requests in flight (a session keeps their order)."""
    client.ensure_path(prefix)
    pending = []
    for node in cluster_nodes(ledgers, entries_per_ledger, 100):
        pending.append(client.create_async(prefix + node.path, node.data or b"", ephemeral=node.ephemeral))
        if len(pending) >= PIPELINE:
            for request in pending:
                request.get()
            pending.clear()
    for request in pending:
        request.get()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ledgers", type=int, action="append", help="ledger count (repeatable; default 10^4..10^6)")
    parser.add_argument("--store", choices=("file", "zookeeper"), action="append", help="default: both")
    parser.add_argument("--entries-per-ledger", type=int, default=10, help="entries of each ledger (metadata only)")
    parser.add_argument("--zk-heap-mb", type=int, default=2048, help="ZooKeeper's JVM heap")
    parser.add_argument("--dir", default=None, help="where to create the temporary directory")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure)))
        return
    _, baseline = run_child("")
    print(f"fresh interpreter with the stores imported: {baseline:.0f} MiB peak RSS")
    print(f"{'store':>9} {'ledgers':>9} {'fill s':>7} {'open s':>7} {'walk+read s':>11} {'ledgers/s':>9} "
          f"{'peak RSS MiB':>12} {'over baseline':>13}")
    directory = Path(tempfile.mkdtemp(prefix="bench-metadata-", dir=args.dir))
    try:
        for store in args.store or ("file", "zookeeper"):
            sizes = args.ledgers or (10**4, 10**5, 10**6)
            rows = (_file_rows if store == "file" else _zookeeper_rows)(directory, sizes, args)
            for ledgers, fill_s, (figures, peak) in rows:
                rate = figures["ledgers"] / figures["walk_and_read_s"]
                print(f"{store:>9} {figures['ledgers']:>9,} {fill_s:>7.1f} {figures['open_s']:>7.1f} "
                      f"{figures['walk_and_read_s']:>11.1f} {rate:>9,.0f} {peak:>12.0f} {peak - baseline:>13.0f}",
                      flush=True)
    finally:
        shutil.rmtree(directory)


def _file_rows(directory: Path, sizes, args):
    for ledgers in sizes:
        dump = directory / f"zk-dump-{ledgers}.json"
        started = time.perf_counter()
        write_metadata_dump(ledgers, args.entries_per_ledger, 100, dump)
        filled = time.perf_counter() - started
        yield ledgers, filled, run_child(f"file:{dump}")
        dump.unlink()


def _zookeeper_rows(directory: Path, sizes, args):
    from kazoo.client import KazooClient
    from zookeeper_server import ZooKeeperServer

    server = ZooKeeperServer(directory / "zookeeper", heap_mb=args.zk_heap_mb)
    server.start()
    client = KazooClient(hosts=server.connect_string, timeout=30)
    try:
        client.start()
        for ledgers in sizes:
            prefix = f"/size{ledgers}"
            started = time.perf_counter()
            fill_zookeeper(client, prefix, ledgers, args.entries_per_ledger)
            filled = time.perf_counter() - started
            yield ledgers, filled, run_child(f"zk://{server.connect_string}{prefix}{ROOT}")
    finally:
        client.stop()
        client.close()
        server.stop()


if __name__ == "__main__":
    main()
