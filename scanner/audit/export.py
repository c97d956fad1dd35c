"""One bookie's listing for the cluster audit: per ledger, the entries its index holds, in BP-34's condensed form.

Parquet, one row per (bookie, ledger), in a Hive-style partition per bookie: ``DIR/bookie_id=<id>/*.parquet``
(the id escaped as Spark escapes partition values, ``:`` -> ``%3A``). Columns:

  bookie_id        string   partition column: the bookie's id as ensembles name it
  ledger_id        bigint
  entries          binary   AvailabilityOfEntriesOfLedger bytes of every indexed entry: what BookKeeper's
                            GetListOfEntriesOfLedger would answer for this bookie and ledger
  entry_groups     array<struct<first_sequence_start: bigint, last_sequence_start: bigint,
                                sequence_size: int, sequence_period: int>>   the same groups, readable in SQL
  entry_count      bigint
  damaged          binary   the same encoding for the indexed entries whose copy the scan found lost or
                            corrupt (lost_entry, corrupt_entry): they are not good copies
  damaged_groups   array<struct<...>>   as entry_groups
  damaged_count    bigint
  index_problem    string   why the ledger's index could not be read (then entries is empty), else null
  storage          string   interleaved | sorted | db
  exported_at      timestamp

A listing is built straight from the index, one run of consecutive entry ids at a time: memory grows
with sequence groups, never with entries. Re-exporting a bookie replaces its partition and nothing else,
so every bookie can export into the same directory.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice

from scanner.audit.availability import EntryAvailability, Run, merge_runs
from scanner.checks.findings import Category, Finding
from scanner.storage.bookie import BookieStorage
from scanner.storage.dbstorage import DbIndexError
from scanner.storage.indexfile import IndexFileError

log = logging.getLogger(__name__)

PARTITION_COLUMN = "bookie_id"
DAMAGE_CATEGORIES = frozenset({Category.LOST_ENTRY, Category.CORRUPT_ENTRY})
ROWS_PER_BATCH = 100_000  # ledgers handed to Spark at once: bounds the driver's memory on huge bookies


@dataclass(frozen=True, slots=True)
class LedgerListing:
    """What one bookie holds of one ledger."""

    ledger_id: int
    entries: EntryAvailability  # every indexed entry
    damaged: EntryAvailability  # indexed entries whose copy is lost or corrupt
    index_problem: str | None = None


@dataclass(frozen=True, slots=True)
class ExportSummary:
    bookie_id: str
    path: str  # the bookie's partition directory
    ledgers: int
    entries: int
    damaged: int
    index_problems: int


def damaged_runs(findings: Iterable[Finding]) -> dict[int, tuple[Run, ...]]:
    """Per ledger, the canonical runs of entries a scan found lost or corrupt."""
    runs: dict[int, list[Run]] = defaultdict(list)
    for finding in findings:
        if finding.category in DAMAGE_CATEGORIES and finding.ledger_id is not None and finding.entries:
            runs[finding.ledger_id].extend(finding.entries)
    return {ledger_id: merge_runs(ledger_runs) for ledger_id, ledger_runs in runs.items()}


def bookie_listings(storage: BookieStorage, damage: Mapping[int, Sequence[Run]]) -> Iterator[LedgerListing]:
    """A listing of every ledger in the bookie's index, ascending; ``damage`` from ``damaged_runs``."""
    for ledger_id in storage.ledger_ids():
        damaged = EntryAvailability.from_runs(damage.get(ledger_id, ()))
        try:
            entries = EntryAvailability.from_entry_ids(entry_id for entry_id, _ in storage.locations(ledger_id))
        except FileNotFoundError:
            continue  # deleted by garbage collection after the index listed it
        except (IndexFileError, DbIndexError) as exc:
            log.warning("ledger %d: index unreadable, listed as holding nothing: %s", ledger_id, exc)
            yield LedgerListing(ledger_id, EntryAvailability(), damaged, str(exc))
            continue
        yield LedgerListing(ledger_id, entries, damaged)


def export_schema(with_partition: bool = True):
    """The Spark schema of an export (with the ``bookie_id`` partition column, as the audit reads it)."""
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField,
                                   StructType, TimestampType)

    group = StructType([
        StructField("first_sequence_start", LongType(), False),
        StructField("last_sequence_start", LongType(), False),
        StructField("sequence_size", IntegerType(), False),
        StructField("sequence_period", IntegerType(), False),
    ])
    fields = [
        StructField("ledger_id", LongType(), False),
        StructField("entries", BinaryType(), False),
        StructField("entry_groups", ArrayType(group, False), False),
        StructField("entry_count", LongType(), False),
        StructField("damaged", BinaryType(), False),
        StructField("damaged_groups", ArrayType(group, False), False),
        StructField("damaged_count", LongType(), False),
        StructField("index_problem", StringType(), True),
        StructField("storage", StringType(), False),
        StructField("exported_at", TimestampType(), False),
    ]
    if with_partition:
        fields.insert(0, StructField(PARTITION_COLUMN, StringType(), False))
    return StructType(fields)


def write_export(spark, listings: Iterable[LedgerListing], bookie_id: str, storage_kind: str, output: str,
                 rows_per_batch: int = ROWS_PER_BATCH) -> ExportSummary:
    """Write one bookie's listings under ``output`` (any path Spark's Hadoop filesystems take), replacing its partition.

    Batches go to a staging directory beside the partitions (hidden from readers by its ``_`` prefix),
    which then replaces the bookie's partition in one rename.
    """
    jvm = spark._jvm
    partition = jvm.org.apache.spark.sql.catalyst.catalog.ExternalCatalogUtils.getPartitionPathString(
        PARTITION_COLUMN, bookie_id)
    root = jvm.org.apache.hadoop.fs.Path(output)
    target = jvm.org.apache.hadoop.fs.Path(root, partition)
    staging = jvm.org.apache.hadoop.fs.Path(root, f"_export-{uuid.uuid4().hex}")
    filesystem = root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    schema = export_schema(with_partition=False)
    exported_at = datetime.datetime.now(datetime.timezone.utc)
    ledgers = entries = damaged = problems = 0
    rows = iter(listings)
    try:
        while True:
            batch = [_row(listing, storage_kind, exported_at) for listing in islice(rows, rows_per_batch)]
            if batch or not ledgers:
                spark.createDataFrame(batch, schema).write.mode("append").parquet(staging.toString())
            if not batch:
                break
            ledgers += len(batch)
            entries += sum(row[3] for row in batch)
            damaged += sum(row[6] for row in batch)
            problems += sum(row[7] is not None for row in batch)
        filesystem.delete(target, True)
        if not filesystem.rename(staging, target):
            raise OSError(f"{output}: could not move the staged export {staging.getName()} to {partition}")
    finally:
        filesystem.delete(staging, True)
    return ExportSummary(bookie_id, target.toString(), ledgers, entries, damaged, problems)


def _row(listing: LedgerListing, storage_kind: str, exported_at: datetime.datetime) -> tuple:
    return (listing.ledger_id,
            listing.entries.encode(), _groups(listing.entries), listing.entries.entry_count,
            listing.damaged.encode(), _groups(listing.damaged), listing.damaged.entry_count,
            listing.index_problem, storage_kind, exported_at)


def _groups(availability: EntryAvailability) -> list[tuple[int, int, int, int]]:
    return [(g.first_sequence_start, g.last_sequence_start, g.sequence_size, g.sequence_period)
            for g in availability.groups]
