"""Every ledger znode of the cluster as one Spark DataFrame, read where the work runs, never on the driver.

ZooKeeper: the driver lists only the ledger tree's intermediate levels (the hierarchical managers' 2-4-4
tree has a parent per 10,000 ledger ids); each Spark task reads a share of those parents, in ledger-id
order, with a kazoo client of its own: a parent's children in one request, their data in ``multiRead``
batches. A dump (``file:``): Spark parses it (``dump_frame``) and the ledger znodes are spread over the
executors. So the read scales with executors and the driver holds no ledger znode.

In the same task (a ``mapInArrow`` function: Arrow batches in and out, ``arrow_rows``) each znode is
prepared by ``judging.clean_listings``: the frame's rows are the znode
(ledger_id, path, data, ctime, mzxid), the ledger's status and, when listings alone can clear it, the
listing every bookie must have exported.
"""

from __future__ import annotations

import contextlib
import functools
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from scanner.audit.arrow_rows import batch_rows, row_batches
from scanner.audit.dump_frame import DumpFrameStore
from scanner.audit.judging import AuditContext, LedgerNode, clean_listings
from scanner.audit.spark_session import tasks as stage_tasks
from scanner.metadata.ledger_paths import LedgerManager, leaf_parents, ledger_id_from_path
from scanner.metadata.store import MetadataStore, MetadataUnavailable
from scanner.metadata.zookeeper import ZooKeeperStore

READ_BATCH = 500  # znodes a multiRead asks for: a few hundred KiB of answer, well below ZooKeeper's 1 MiB limit
IN_FLIGHT = 8  # multiRead requests a task keeps sent before it awaits the first answer


@dataclass(frozen=True, slots=True)
class ZooKeeperSource:
    """What an executor needs to connect on its own: the ensemble, chroot, credentials and the ledger tree."""

    hosts: str
    chroot: str
    auth: tuple[tuple[str, str], ...]
    root: str
    manager: LedgerManager


def zookeeper_source(store: ZooKeeperStore) -> ZooKeeperSource:
    """Where the executors read the ledgers ``store`` reads, each with a client of its own."""
    client = store.client
    return ZooKeeperSource(store.hosts, client.chroot or "", tuple(sorted(client.auth_data)), store.root,
                           store.manager)


def ledger_frame(spark, store: MetadataStore, context_broadcast):
    """Every ledger of ``store``, prepared for judging, as a DataFrame of ``ledger_schema``, read on the executors."""
    tasks = stage_tasks(spark)
    if isinstance(store, DumpFrameStore):
        nodes = store.ledger_rows(tasks)
        read = functools.partial(_dump_ledgers, store.manager, store.root)
    elif isinstance(store, ZooKeeperStore):
        parents = [(parent,) for parent in leaf_parents(store.manager, store.root, store.children)]
        nodes = spark.createDataFrame(spark.sparkContext.parallelize(parents, max(1, min(len(parents), tasks))),
                                      "parent string")
        read = functools.partial(_zookeeper_ledgers, zookeeper_source(store))
    else:
        raise TypeError(f"the audit reads ZooKeeper or a dump through Spark, not {type(store).__name__}")
    return nodes.mapInArrow(functools.partial(_prepared, read, context_broadcast), ledger_schema())


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


@contextlib.contextmanager
def connected(source: ZooKeeperSource):
    """A kazoo client of this task's own on ``source``'s ensemble (chroot and credentials applied)."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=source.hosts + source.chroot, auth_data=list(source.auth) or None, timeout=30)
    try:
        client.start(timeout=30)
    except Exception as exc:  # noqa: BLE001 (kazoo's timeout and auth failures have no common base)
        raise MetadataUnavailable(f"{_where(source)}: an executor could not connect: {type(exc).__name__}") from None
    try:
        yield client
    finally:
        client.stop()
        client.close()


def zookeeper_nodes(source: ZooKeeperSource, parents: Iterable[str]) -> Iterator[tuple]:
    """(ledger_id, path, data, ctime, mzxid) of every ledger under ``parents``, read with a client of this task's own."""
    from kazoo.exceptions import KazooException

    with connected(source) as client:
        for parent in parents:
            try:
                names = sorted(client.get_children(parent))
            except KazooException as exc:
                raise MetadataUnavailable(f"{_where(source)}: listing {parent} failed: {type(exc).__name__}") from None
            leaves = [(ledger_id, path) for path in (f"{parent}/{name}" for name in names)
                      if (ledger_id := ledger_id_from_path(source.manager, source.root, path)) is not None]
            for (ledger_id, path), node in zip(leaves, read_nodes(client, source, [path for _, path in leaves])):
                if node is not None:  # None: deleted since its parent was listed
                    yield ledger_id, path, node.data, node.ctime, node.mzxid


def read_nodes(client, source: ZooKeeperSource, paths: list[str]) -> Iterator[LedgerNode | None]:
    """The znodes at ``paths`` (None: no such znode), in order, in ``multiRead`` batches with a few in flight."""
    from scanner.audit.multi_read import read_nodes_async

    pending: deque = deque()
    for start in range(0, len(paths), READ_BATCH):
        batch = paths[start:start + READ_BATCH]
        pending.append((batch, read_nodes_async(client, batch)))
        if len(pending) > IN_FLIGHT:
            yield from _answered(source, *pending.popleft())
    while pending:
        yield from _answered(source, *pending.popleft())


def _answered(source: ZooKeeperSource, paths: list[str], answer) -> Iterator[LedgerNode | None]:
    from kazoo.exceptions import KazooException

    try:
        found = answer.get(timeout=60)
    except KazooException as exc:
        raise MetadataUnavailable(f"{_where(source)}: reading {paths[0]} and {len(paths) - 1} more failed: "
                                  f"{type(exc).__name__}") from None
    for path, node in zip(paths, found):
        yield None if node is None else LedgerNode(path, node[0] or b"", node[1].ctime, node[1].mzxid)


def _where(source: ZooKeeperSource) -> str:
    return f"ZooKeeper {source.hosts}{source.chroot}"


def _zookeeper_ledgers(source: ZooKeeperSource, rows: Iterable[tuple]) -> Iterator[tuple]:
    return zookeeper_nodes(source, (parent for parent, in rows))


def _dump_ledgers(manager: LedgerManager, root: str, rows: Iterable[tuple]) -> Iterator[tuple]:
    for path, data, ctime, mzxid in rows:
        ledger_id = ledger_id_from_path(manager, root, path)
        if ledger_id is not None:
            yield ledger_id, path, data or b"", ctime, mzxid


def _prepared(read, context_broadcast, batches):
    """``mapInArrow``: the ledgers ``read`` finds in the task's rows, each with its status and clean listings."""
    context: AuditContext = context_broadcast.value

    def rows() -> Iterator[tuple]:
        for ledger_id, path, data, ctime, mzxid in read(batch_rows(batches)):
            status, listings = clean_listings(ledger_id, LedgerNode(path, data, ctime, mzxid), context)
            yield ledger_id, path, data, ctime, mzxid, status.value, listings

    return row_batches(rows(), ledger_schema())
