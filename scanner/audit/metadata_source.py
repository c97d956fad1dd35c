"""Every ledger znode of the cluster as one Spark DataFrame, read where the work runs, never on the driver.

ZooKeeper: the driver lists only the ledger tree's intermediate levels (the hierarchical managers' 2-4-4
tree has a parent per 10,000 ledger ids); each Spark task reads a share of those parents, in ledger-id
order, with a kazoo client of its own: a parent's children in one request, their data in ``multiRead``
batches. A dump (``file:``): Spark's JSON reader parses it on an executor, and the znodes under the
ledgers root that are ledgers are kept. So the read scales with executors and the driver holds no znode.

In the same task each znode is prepared by ``judging.clean_listings``: the frame's rows are the znode
(ledger_id, path, data, ctime, mzxid), the ledger's status and, when listings alone can clear it, the
listing every bookie must have exported.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from scanner.audit.judging import AuditContext, LedgerNode, clean_listings
from scanner.metadata.ledger_paths import LedgerManager, leaf_parents, ledger_id_from_path
from scanner.metadata.store import MetadataStore, MetadataUnavailable

READ_BATCH = 500  # znodes a multiRead asks for: a few hundred KiB of answer, well below ZooKeeper's 1 MiB limit
IN_FLIGHT = 8  # multiRead requests a task keeps sent before it awaits the first answer
TASKS_PER_CORE = 4  # ZooKeeper tasks per core Spark offers: a slow parent does not hold the others back


@dataclass(frozen=True, slots=True)
class ZooKeeperSource:
    """What an executor needs to connect on its own: the ensemble, chroot, credentials and the ledger tree."""

    hosts: str
    chroot: str
    auth: tuple[tuple[str, str], ...]
    root: str
    manager: LedgerManager


@dataclass(frozen=True, slots=True)
class DumpSource:
    """A dump file every executor can read at ``uri`` (a shared filesystem, or one machine)."""

    uri: str
    root: str
    manager: LedgerManager


def metadata_source(store: MetadataStore) -> ZooKeeperSource | DumpSource:
    """Where the executors read the metadata ``store`` reads (a ZooKeeper ensemble or a dump file)."""
    from scanner.metadata.snapshot import SnapshotStore
    from scanner.metadata.zookeeper import ZooKeeperStore

    if isinstance(store, ZooKeeperStore):
        client = store.client
        return ZooKeeperSource(store.hosts, client.chroot or "", tuple(sorted(client.auth_data)), store.root,
                               store.manager)
    if isinstance(store, SnapshotStore):
        return DumpSource(Path(store.dump_path).resolve().as_uri(), store.root, store.manager)
    raise TypeError(f"the audit reads ZooKeeper or a dump, not {type(store).__name__}")


def ledger_frame(spark, store: MetadataStore, context_broadcast):
    """Every ledger of ``store``, prepared for judging, as a DataFrame of ``ledger_schema``, read on the executors."""
    source = metadata_source(store)
    if isinstance(source, DumpSource):
        rows = _dump_rows(spark, source).mapPartitions(functools.partial(_dump_ledgers, source.manager, source.root))
    else:
        parents = list(leaf_parents(source.manager, source.root, store.children))
        tasks = max(1, min(len(parents), spark.sparkContext.defaultParallelism * TASKS_PER_CORE))
        rows = spark.sparkContext.parallelize(parents, tasks).mapPartitions(functools.partial(zookeeper_nodes, source))
    return spark.createDataFrame(rows.mapPartitions(functools.partial(_prepared, context_broadcast)), ledger_schema())


def ledger_schema():
    from pyspark.sql.types import ArrayType, BinaryType, LongType, StringType, StructField, StructType

    listing = StructType([StructField("bookie_id", StringType(), False), StructField("want", BinaryType(), False)])
    return StructType([
        StructField("ledger_id", LongType(), False),
        StructField("path", StringType(), False),
        StructField("data", BinaryType(), False),
        StructField("ctime", LongType(), True),
        StructField("mzxid", LongType(), False),
        StructField("status", StringType(), False),
        StructField("clean_listings", ArrayType(listing, False), True),  # null: judge in full
    ])


def zookeeper_nodes(source: ZooKeeperSource, parents: Iterable[str]) -> Iterator[tuple]:
    """(ledger_id, path, data, ctime, mzxid) of every ledger under ``parents``, read with a client of this task's own."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException

    from scanner.audit.multi_read import read_nodes_async

    client = KazooClient(hosts=source.hosts + source.chroot, auth_data=list(source.auth) or None, timeout=30)
    where = f"ZooKeeper {source.hosts}{source.chroot}"
    try:
        client.start(timeout=30)
    except Exception as exc:  # noqa: BLE001 (kazoo's timeout and auth failures have no common base)
        raise MetadataUnavailable(f"{where}: an executor could not connect: {type(exc).__name__}") from None
    try:
        for parent in parents:
            try:
                names = sorted(client.get_children(parent))
            except KazooException as exc:
                raise MetadataUnavailable(f"{where}: listing {parent} failed: {type(exc).__name__}") from None
            leaves = [(ledger_id, path) for path in (f"{parent}/{name}" for name in names)
                      if (ledger_id := ledger_id_from_path(source.manager, source.root, path)) is not None]
            pending = []
            for start in range(0, len(leaves), READ_BATCH):
                batch = leaves[start:start + READ_BATCH]
                pending.append((batch, read_nodes_async(client, [path for _, path in batch])))
                if len(pending) >= IN_FLIGHT:
                    yield from _answered(*pending.pop(0), where)
            for batch, answer in pending:
                yield from _answered(batch, answer, where)
    finally:
        client.stop()
        client.close()


def _answered(batch: list[tuple[int, str]], answer, where: str) -> Iterator[tuple]:
    from kazoo.exceptions import KazooException

    try:
        found = answer.get(timeout=60)
    except KazooException as exc:
        raise MetadataUnavailable(f"{where}: reading {batch[0][1]} and {len(batch) - 1} more failed: "
                                  f"{type(exc).__name__}") from None
    for (ledger_id, path), node in zip(batch, found):
        if node is not None:  # None: deleted since its parent was listed
            data, stat = node
            yield ledger_id, path, data or b"", stat.ctime, stat.mzxid


def _dump_rows(spark, source: DumpSource):
    """(path, data, ctime, mzxid) of the dump's znodes under the root whose last name looks like a ledger's."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

    schema = StructType([StructField("path", StringType()), StructField("data_b64", StringType()),
                         StructField("ephemeral", BooleanType()), StructField("mzxid", LongType()),
                         StructField("version", LongType()), StructField("ctime", LongType())])
    nodes = (spark.read.schema(schema).option("multiLine", True).option("mode", "FAILFAST").json(source.uri)
             .where(F.col("path").startswith(source.root + "/") & F.col("path").rlike("/L[0-9]+$")))
    return nodes.select("path", F.unbase64(F.coalesce("data_b64", F.lit(""))).alias("data"), "ctime",
                        F.coalesce("mzxid", F.lit(0)).alias("mzxid")).rdd


def _dump_ledgers(manager: LedgerManager, root: str, rows) -> Iterator[tuple]:
    for path, data, ctime, mzxid in rows:
        ledger_id = ledger_id_from_path(manager, root, path)
        if ledger_id is not None:
            yield ledger_id, path, bytes(data), ctime, mzxid


def _prepared(context_broadcast, nodes) -> Iterator[tuple]:
    context: AuditContext = context_broadcast.value
    for ledger_id, path, data, ctime, mzxid in nodes:
        status, listings = clean_listings(ledger_id, LedgerNode(path, data, ctime, mzxid), context)
        yield ledger_id, path, data, ctime, mzxid, status.value, listings
