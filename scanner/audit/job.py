"""The cluster audit (BP-34) on Spark: every bookie's exported listing joined with every ledger's metadata.

The driver reads only what is small: the bookie registry, the under-replication marks, and the ledger
tree's intermediate levels. The ledger znodes are read on the executors into one DataFrame
(``metadata_source``), each ledger prepared there: a closed ledger without placement or availability
trouble comes with the listing every bookie must have exported for it to be clean.

Judging is then done in bulk: Spark compares those listings with the exported ones, byte for byte, in
one join on (ledger, bookie). Only the ledgers that comparison cannot clear (a listing that differs or is
missing or damaged, an open ledger, a listing without metadata, a placement or availability violation)
are judged in Python, one ledger at a time, by ``judging.judge_ledger``. Before a violation is
reported, the executor that found it reads its ledger's metadata again and judges again a ledger whose
metadata changed meanwhile, as BP-34 asks. The driver holds nothing per ledger.

On a cluster, ``spark-submit`` runs ``scanner/spark_submit.py``, the ``audit`` command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from scanner.audit.arrow_rows import batch_rows, row_batches
from scanner.audit.contract import DEFAULT_MIN_RACKS, Category, Violation, long_under_replicated
from scanner.audit.export import export_schema
from scanner.audit.metadata_source import (READ_BATCH, ZooKeeperSource, connected, ledger_frame, read_nodes,
                                            zookeeper_source)
from scanner.audit.judging import (AuditContext, BookieListing, LedgerNode, LedgerOutcome, Status, judge_ledger,
                                   outcome_row, outcome_schema, violation_row, violation_schema)
from scanner.metadata.ledger_paths import ledger_path
from scanner.metadata.store import MetadataStore
from scanner.metadata.zookeeper import ZooKeeperStore
from scanner.repair.marks import DamagedMark, decode_mark, underreplication_path

DEFAULT_MAX_UNDER_REPLICATED_MS = 24 * 3600 * 1000
VIOLATIONS_AT_A_TIME = 10_000  # a range of the report: the driver holds two while it reports them
_MARK_LEAF = re.compile(r"urL(\d+)")
EXPORT_PARTITION = "bookie_id="  # the directories `bookie-scanner export` writes a bookie's rows into


class AuditInputError(Exception):
    """Exports or metadata the audit cannot use; one line."""


@dataclass(frozen=True, slots=True)
class AuditOptions:
    racks: Mapping[str, str] | None = None
    min_racks: int = DEFAULT_MIN_RACKS
    enforce_min_racks: bool = False
    max_under_replicated_ms: int = DEFAULT_MAX_UNDER_REPLICATED_MS


@dataclass
class AuditResult:
    """A finished audit: ``violations`` is a cached DataFrame of ``violation_schema``; call ``close`` after use."""

    violations: object
    ledgers_checked: int
    exported_bookies: tuple[str, ...]
    registered_bookies: tuple[str, ...]
    counts: dict[str, int]
    not_judged: dict[str, int]
    rejudged: int
    judged_one_by_one: int  # ledgers the bulk comparison of listings could not clear
    problems: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "ledgers_checked": self.ledgers_checked,
            "bookies": len(self.exported_bookies),
            "violations": self.counts,
            "exported_bookies": list(self.exported_bookies),
            "registered_bookies": list(self.registered_bookies),
            "ledgers_not_judged": self.not_judged,
            "rejudged_after_metadata_change": self.rejudged,
            "ledgers_judged_one_by_one": self.judged_one_by_one,
            "problems": self.problems,
        }

    def sorted_violations(self) -> Iterator[Violation]:
        """Every violation, by ledger then category, streamed from the executors."""
        from scanner.audit.judging import violation_from_row

        # ranges of a bounded size, a job each: a sort's one coalesced partition would bring them all at once.
        # The next range's job runs while the driver reports this one (two ranges held at most), so the
        # executors are not idle while the driver writes, nor the driver while a range is sorted.
        parts = max(1, sum(self.counts.values()) // VIOLATIONS_AT_A_TIME)
        for row in self.violations.repartitionByRange(parts, "ledger_id").sortWithinPartitions(
                "ledger_id", "category").toLocalIterator(prefetchPartitions=True):
            yield violation_from_row(row)

    def close(self) -> None:
        self.violations.unpersist()


def run_audit(spark, store: MetadataStore, exports_path: str, options: AuditOptions, now_ms: int) -> AuditResult:
    """Audit the cluster ``store`` describes against the exports under ``exports_path``."""
    from pyspark.sql import functions as F
    from pyspark.storagelevel import StorageLevel

    exports, exported = _read_exports(spark, exports_path)
    registry = store.bookies()
    registered = registry.writable | registry.readonly
    marks = marked_ledgers(store)
    context = spark.sparkContext.broadcast(AuditContext(frozenset(registered), frozenset(exported),
                                                        frozenset(marks), options.racks, options.min_racks,
                                                        options.enforce_min_racks))
    # the ledgers are read and prepared once, in the first action on this cache, which holds little more
    # than a status per ledger: the znode and the listings only of the ledgers to judge one by one
    compared = _compared(ledger_frame(spark, store, context), exports).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        statuses = {status: count for status, count in compared.groupBy("status").count().collect()
                    if status is not None}  # None: listings of a ledger the metadata does not have
        source = zookeeper_source(store) if isinstance(store, ZooKeeperStore) else None  # a dump does not change
        outcomes = compared.where("judge").select(*LedgerRow._fields).mapInArrow(
            functools.partial(_judged, context, source), outcome_schema()).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            tally = outcomes.groupBy("has_metadata", "status", "rejudged").count().collect()
            for has_metadata, status, _, count in tally:
                if not has_metadata:  # listings of a ledger the metadata does not have
                    statuses[status] = statuses.get(status, 0) + count
            problems = [row.problem for row in
                        outcomes.select(F.explode("problems").alias("problem")).limit(100).collect()]
            aged = [violation_row(v) for v in long_under_replicated(marks, now_ms, options.max_under_replicated_ms)]
            violations = outcomes.select(F.explode("violations").alias("violation")).select("violation.*")
            if aged:  # a frame of the driver's rows is read in Python tasks of their own (seconds, cold), even empty
                violations = violations.union(spark.createDataFrame(aged, violation_schema()))
            violations = violations.persist(StorageLevel.MEMORY_AND_DISK)
            found = dict(violations.groupBy("category").count().collect())
        finally:
            outcomes.unpersist()
    finally:
        compared.unpersist()
    return AuditResult(
        violations=violations,
        ledgers_checked=statuses.get(Status.JUDGED.value, 0),
        exported_bookies=exported,
        registered_bookies=tuple(sorted(registered)),
        counts={category.value: found.get(category.value, 0) for category in Category},
        not_judged={status.value: statuses.get(status.value, 0) for status in Status if status is not Status.JUDGED},
        rejudged=sum(count for _, _, rejudged, count in tally if rejudged),
        judged_one_by_one=sum(count for *_, count in tally),
        problems=problems,
    )


def _compared(ledgers, exports):
    """Every ledger (ledger_id, status; null: no metadata) and whether a comparison of listings leaves it to
    ``judge_ledger`` (judge), with the rest of a ``LedgerRow`` where it does (null where it does not).

    Every ledger's listings are gathered in one join with its metadata. A ledger is cleared when it has
    clean listings and the listings exported for it are exactly those: the same bookies, the same bytes,
    nothing damaged, every index read. Anything else (a listing that differs, is missing or damaged, a
    listing of a bookie outside the ensembles or of a ledger without metadata, a judged ledger without
    clean listings) is judged in full; ledgers with metadata that is not judged (marked, undecodable) are not.
    """
    from pyspark.sql import functions as F

    listings = exports.groupBy("ledger_id").agg(
        F.collect_list(F.struct("bookie_id", "entries", "damaged")).alias("listings"),
        F.max((F.col("damaged_count") > 0) | F.col("index_problem").isNotNull()).alias("damage"))
    joined = ledgers.join(listings, "ledger_id", "full_outer")
    exported = F.transform("listings", lambda listing: F.struct(listing["bookie_id"].alias("bookie_id"),
                                                                listing["entries"].alias("want")))
    nothing_owed = F.col("listings").isNull() & (F.size("clean_listings") == 0)  # e.g. a closed empty ledger
    cleared = F.col("clean_listings").isNotNull() & (
        nothing_owed | (~F.col("damage") & (F.array_sort(exported) == F.array_sort("clean_listings"))))
    judge = F.col("status").isNull() | ((F.col("status") == Status.JUDGED.value) & ~F.coalesce(cleared, F.lit(False)))
    return joined.select("ledger_id", "status", judge.alias("judge"),
                         *(F.when(judge, F.col(name)).alias(name) for name in LedgerRow._fields[1:]))


def _read_exports(spark, exports_path: str):
    """Every bookie's listing under ``exports_path`` and the ids of the bookies that exported: in
    ``bookie_id=<id>/`` partitions of that directory (every bookie exporting into one directory), or of
    its subdirectories (one per bookie)."""
    try:
        directories, bookies = export_dirs(spark, exports_path)
        frames = [spark.read.schema(export_schema()).option("basePath", directory).parquet(directory)
                  for directory in directories]
    except AuditInputError:
        raise
    except Exception as exc:  # AnalysisException and Hadoop's IOExceptions arrive through py4j
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise AuditInputError(f"cannot read exports at {exports_path}: {first_line}") from None
    return functools.reduce(lambda left, right: left.unionByName(right), frames), bookies


def export_dirs(spark, exports_path: str) -> tuple[list[str], tuple[str, ...]]:
    """The directories under ``exports_path`` that hold ``bookie_id=<id>/`` partitions (any Hadoop filesystem),
    and the bookie ids the partitions name."""
    hadoop_fs = spark._jvm.org.apache.hadoop.fs
    root = hadoop_fs.Path(exports_path)
    filesystem = root.getFileSystem(spark._jsc.hadoopConfiguration())
    if not filesystem.exists(root):
        raise AuditInputError(f"{exports_path}: no such directory (expected the directory the bookies exported into)")

    def subdirs(path):
        return [status.getPath() for status in filesystem.listStatus(path)
                if status.isDirectory() and not status.getPath().getName().startswith(("_", "."))]

    def partitions(path) -> list[str]:
        return [child.getName() for child in subdirs(path) if child.getName().startswith(EXPORT_PARTITION)]

    found = {exports_path: partitions(root)}
    if not found[exports_path]:
        found = {child.toString(): named for child in subdirs(root) if (named := partitions(child))}
    if not found:
        raise AuditInputError(f"{exports_path}: no bookie exports; expected {EXPORT_PARTITION}<id>/ directories "
                              f"in it (every bookie exporting into it) or in its subdirectories (one per bookie)")
    bookies = {urllib.parse.unquote(name[len(EXPORT_PARTITION):]) for named in found.values() for name in named}
    return sorted(found), tuple(sorted(bookies))


def marked_ledgers(store: MetadataStore) -> dict[int, int | None]:
    """Ledger id -> mark ctime (ms; None if the mark has none) of every under-replication mark in ``store``.

    Read through the store, so a dump's marks count as much as a live cluster's. A mark whose data
    does not decode still marks its ledger, without a ctime.
    """
    marks: dict[int, int | None] = {}
    queue = [f"{underreplication_path(store.root)}/ledgers"]
    while queue:
        parent = queue.pop()
        for child in store.children(parent):
            path = f"{parent}/{child}"
            leaf = _MARK_LEAF.fullmatch(child)
            if leaf is None:
                queue.append(path)
                continue
            node = store.node(path)
            if node is None:
                continue  # re-replicated since it was listed
            try:
                marks[int(leaf.group(1))] = decode_mark(node.data or b"", path).ctime
            except DamagedMark:
                marks[int(leaf.group(1))] = None
    return marks


class LedgerRow(NamedTuple):
    """A ledger to judge in full: its znode (None data: the metadata has none) and every bookie's listing of it."""

    ledger_id: int
    path: str | None
    data: bytes | None
    ctime: int | None
    mzxid: int | None
    listings: list | None  # of rows (bookie_id, entries, damaged), read by name


def _judged(context_broadcast, source: ZooKeeperSource | None, batches):
    """``mapInArrow``: ``judge_rows`` on the task's ledgers, its outcomes as rows of ``outcome_schema``."""
    rows = (LedgerRow(*row) for row in batch_rows(batches))
    return row_batches(map(outcome_row, judge_rows(context_broadcast, source, rows)), outcome_schema())


def judge_rows(context_broadcast, source: ZooKeeperSource | None, rows) -> Iterator[LedgerOutcome]:
    """``judge_ledger`` on each row (ledger_id, path, data, ctime, mzxid, listings), as the executors run it.

    With ZooKeeper (``source``), a violating ledger's metadata is read again, a batch at a time, and a
    ledger whose metadata changed since it was first read (or is gone) is judged again on what it is now:
    BP-34's rule, nothing reported on the word of an earlier read. A dump does not change (None).
    """
    context = context_broadcast.value
    with contextlib.ExitStack() as stack:
        client = None  # connected at the first violation to confirm
        pending: list[tuple[LedgerOutcome, list[BookieListing]]] = []
        for row in rows:
            node = None if row.data is None else LedgerNode(row.path, bytes(row.data), row.ctime, row.mzxid)
            listings = _listings(row.listings or ())
            outcome = judge_ledger(row.ledger_id, node, listings, context)
            if source is None or not outcome.violations:
                yield outcome
                continue
            pending.append((outcome, listings))
            if len(pending) == READ_BATCH:
                client = client or stack.enter_context(connected(source))
                yield from _confirmed(client, source, pending, context)
                pending = []
        if pending:
            client = client or stack.enter_context(connected(source))
            yield from _confirmed(client, source, pending, context)


def _confirmed(client, source: ZooKeeperSource, pending, context) -> Iterator[LedgerOutcome]:
    paths = [ledger_path(source.manager, source.root, outcome.ledger_id) for outcome, _ in pending]
    for (outcome, listings), node in zip(pending, read_nodes(client, source, paths)):
        if (None if node is None else node.mzxid) == outcome.mzxid:
            yield outcome
        else:
            yield dataclasses.replace(judge_ledger(outcome.ledger_id, node, listings, context), rejudged=True)


def _listings(rows) -> list[BookieListing]:
    return [BookieListing(row["bookie_id"], bytes(row["entries"]), bytes(row["damaged"])) for row in rows]
