"""A metadata dump (``file:``) read by Spark, so the audit's driver never loads a million znodes.

Spark parses the dump where the executors run: split by lines when it has one znode per line (as
``bookie-scanner metadata dump`` writes it), else as one JSON document. The driver keeps only the
znodes that are not ledgers (the root, ``LAYOUT``, the bookie registry, the under-replication marks,
the ledger tree's intermediate levels) in a ``SnapshotStore`` of their own; the ledger znodes stay in
Spark (``ledger_rows``) for the executors to judge.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from scanner.metadata.snapshot import DumpFormatError, SnapshotStore, write_dump_nodes
from scanner.metadata.store import MetadataStore, ZNode

LEDGER_LEAF = "/L[0-9]+$"  # the last name of a ledger znode, under every ledger manager
_LEDGER_LINE = '"path" *: *"[^"]*/L[0-9]+"'  # a dump line holding such a znode (base64 data holds no quote)


class DumpFrameStore(MetadataStore):
    """The dump at ``path``, its ledgers in Spark and everything else in a small store on the driver."""

    def __init__(self, spark, path: str | Path):
        self.dump_path = Path(path)
        self.uri = self.dump_path.resolve().as_uri()
        self._spark = spark
        self._per_line = _one_znode_per_line(self.dump_path)
        self._small = _small_store(self._rows(ledgers=False).where(~_ledger_leaf()).collect())
        self.root, self.manager = self._small.root, self._small.manager

    def ledger_rows(self, partitions: int):
        """(path, data, ctime, mzxid) of the dump's znodes under the root that look like ledgers, as a DataFrame
        of at least ``partitions`` partitions when the dump is one JSON document (read by one task)."""
        from pyspark.sql import functions as F

        rows = self._rows(ledgers=True).where(F.col("path").startswith(self.root + "/") & _ledger_leaf()).select(
            "path", "data", "ctime", "mzxid")
        return rows if self._per_line else rows.repartition(partitions)  # lines are split as Spark reads them

    def _rows(self, ledgers: bool):
        """The znodes; with one znode per line, only the lines that look like ledgers' (or only the others)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

        schema = StructType([StructField("path", StringType()), StructField("data_b64", StringType()),
                             StructField("ephemeral", BooleanType()), StructField("mzxid", LongType()),
                             StructField("version", LongType()), StructField("ctime", LongType())])
        if self._per_line:
            line = F.regexp_replace(F.trim("value"), ",$", "")
            wanted = line.rlike(_LEDGER_LINE) if ledgers else ~line.rlike(_LEDGER_LINE)  # the other half is not parsed
            # a guard Spark cannot reorder (a filter could run after a later filter on the parsed fields)
            parsed = F.when(wanted & ~line.isin("[", "]", ""), F.from_json(line, schema, {"mode": "FAILFAST"}))
            nodes = self._spark.read.text(self.uri).select(parsed.alias("node")).where(
                F.col("node").isNotNull()).select("node.*")
        else:
            nodes = self._spark.read.schema(schema).option("multiLine", True).option("mode", "FAILFAST").json(self.uri)
        return nodes.select("path", F.unbase64("data_b64").alias("data"), F.coalesce("ephemeral", F.lit(False))
                            .alias("ephemeral"), F.coalesce("mzxid", F.lit(0)).alias("mzxid"),
                            F.coalesce("version", F.lit(0)).alias("version"), "ctime")

    def node(self, path: str) -> ZNode | None:
        return self._small.node(path)

    def children(self, path: str) -> list[str]:
        return self._small.children(path)

    def close(self) -> None:
        self._small.close()


def _ledger_leaf():
    from pyspark.sql import functions as F

    return F.col("path").rlike(LEDGER_LEAF)


def _one_znode_per_line(path: Path) -> bool:
    with path.open("rb") as dump:
        return dump.read(2) in (b"[\n", b"[\r")


def _small_store(rows) -> SnapshotStore:
    """The rows as a SnapshotStore (checked and laid out as any dump is)."""
    handle, name = tempfile.mkstemp(prefix="bookie-scanner-dump-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as out:
            write_dump_nodes(_znodes(rows), out)
        return SnapshotStore(name)
    finally:
        os.unlink(name)


def _znodes(rows) -> Iterator[ZNode]:
    for row in rows:
        if row.path is None:
            raise DumpFormatError("a znode of the dump has no 'path'")
        yield ZNode(row.path, None if row.data is None else bytes(row.data), row.ephemeral, row.mzxid, row.version,
                    row.ctime)
