"""One bookie's listing for the cluster audit: per ledger, the entries its index holds, in BP-34's condensed form.

Parquet written with pyarrow (no JVM on the bookie host), one row per (bookie, ledger), in a Hive-style
partition per bookie: ``DIR/bookie_id=<id>/part-00000.parquet`` (the id escaped as a URI path segment,
``:`` -> ``%3A``, as Spark names and reads partition values). Columns:

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
  exported_at      timestamp (an instant, stored in UTC)

A listing is built straight from the index, one run of consecutive entry ids at a time: memory grows
with sequence groups, never with entries. Re-exporting a bookie replaces its partition and nothing else,
so every bookie can export into the same directory.
"""

from __future__ import annotations

import datetime
import logging
import os
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from scanner.audit.availability import EntryAvailability, Run, merge_runs
from scanner.checks.findings import Category, Finding
from scanner.storage.bookie import BookieStorage
from scanner.storage.dbstorage import DbIndexError
from scanner.storage.indexfile import IndexFileError

log = logging.getLogger(__name__)

PARTITION_COLUMN = "bookie_id"
DAMAGE_CATEGORIES = frozenset({Category.LOST_ENTRY, Category.CORRUPT_ENTRY})
ROWS_PER_BATCH = 100_000  # ledgers per Parquet row group: bounds the export's memory on huge bookies
PARQUET_FILE = "part-00000.parquet"

_SEQUENCE_GROUP = pa.struct([
    pa.field("first_sequence_start", pa.int64(), nullable=False),
    pa.field("last_sequence_start", pa.int64(), nullable=False),
    pa.field("sequence_size", pa.int32(), nullable=False),
    pa.field("sequence_period", pa.int32(), nullable=False),
])
_SEQUENCE_GROUPS = pa.list_(pa.field("element", _SEQUENCE_GROUP, nullable=False))

# The columns of an export's Parquet file (the bookie id is in the partition directory's name).
PARQUET_SCHEMA = pa.schema([
    pa.field("ledger_id", pa.int64(), nullable=False),
    pa.field("entries", pa.binary(), nullable=False),
    pa.field("entry_groups", _SEQUENCE_GROUPS, nullable=False),
    pa.field("entry_count", pa.int64(), nullable=False),
    pa.field("damaged", pa.binary(), nullable=False),
    pa.field("damaged_groups", _SEQUENCE_GROUPS, nullable=False),
    pa.field("damaged_count", pa.int64(), nullable=False),
    pa.field("index_problem", pa.string()),
    pa.field("storage", pa.string(), nullable=False),
    pa.field("exported_at", pa.timestamp("us", tz="UTC"), nullable=False),  # Spark's TIMESTAMP: an instant
])
# Partition directories are named as Spark names them (``bookie_id=127.0.0.1%3A3181``) and read them back.
_HIVE_PARTITIONING = ds.partitioning(pa.schema([pa.field(PARTITION_COLUMN, pa.string())]), flavor="hive")


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


def export_schema():
    """The export as the audit reads it on Spark: the Parquet columns plus the ``bookie_id`` partition column."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(PARQUET_SCHEMA.insert(0, pa.field(PARTITION_COLUMN, pa.string(), nullable=False)))


def write_export(listings: Iterable[LedgerListing], bookie_id: str, storage_kind: str, output: str,
                 rows_per_batch: int = ROWS_PER_BATCH) -> ExportSummary:
    """Write one bookie's listings under ``output`` (see ``exports_filesystem``), replacing its partition.

    The listing streams into one Parquet file, a row group per batch, in a staging directory beside the
    partitions (hidden from readers by its ``_`` prefix); only when it is complete is the old partition
    deleted and the file renamed into place.
    """
    filesystem, root = exports_filesystem(output)
    partition, _ = _HIVE_PARTITIONING.format(pc.field(PARTITION_COLUMN) == bookie_id)
    target = f"{root}/{partition}"
    staging = f"{root}/_export-{uuid.uuid4().hex}"
    exported_at = datetime.datetime.now(datetime.timezone.utc)
    ledgers = entries = damaged = problems = 0
    rows = iter(listings)
    filesystem.create_dir(staging)
    try:
        with filesystem.open_output_stream(f"{staging}/{PARQUET_FILE}") as stream, \
                pq.ParquetWriter(stream, PARQUET_SCHEMA) as writer:
            while batch := list(islice(rows, rows_per_batch)):
                writer.write_batch(_record_batch(batch, storage_kind, exported_at))
                ledgers += len(batch)
                entries += sum(listing.entries.entry_count for listing in batch)
                damaged += sum(listing.damaged.entry_count for listing in batch)
                problems += sum(listing.index_problem is not None for listing in batch)
        # object stores cannot rename a directory, every filesystem can rename a file: the partition is one file
        if filesystem.get_file_info(target).type != pafs.FileType.NotFound:
            filesystem.delete_dir(target)
        filesystem.create_dir(target)
        filesystem.move(f"{staging}/{PARQUET_FILE}", f"{target}/{PARQUET_FILE}")
    finally:
        filesystem.delete_dir(staging)
    return ExportSummary(bookie_id, _partition_location(output, target, partition), ledgers, entries, damaged,
                         problems)


def exports_filesystem(output: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of an exports directory: a local path, or a URI of pyarrow's filesystems.

    ``hdfs://`` (through libhdfs), ``s3://`` (``s3a://``, Hadoop's name for it, is taken as ``s3://``),
    ``gs://``, ``file://``. Raises ``ValueError`` for a scheme pyarrow does not know, ``OSError`` when
    the filesystem cannot be reached.
    """
    if "://" not in output:
        return pafs.LocalFileSystem(), os.path.abspath(output)
    if output.startswith("s3a://"):
        output = "s3://" + output.removeprefix("s3a://")
    filesystem, path = pafs.FileSystem.from_uri(output)
    return filesystem, path.rstrip("/")


def _partition_location(output: str, target: str, partition: str) -> str:
    """Where the partition is, as the operator names it: an absolute path, or the URI without its options."""
    if "://" not in output:
        return target
    return f"{output.partition('?')[0].rstrip('/')}/{partition}"


def _record_batch(listings: Sequence[LedgerListing], storage_kind: str,
                  exported_at: datetime.datetime) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([_row(listing, storage_kind, exported_at) for listing in listings],
                                      schema=PARQUET_SCHEMA)


def _row(listing: LedgerListing, storage_kind: str, exported_at: datetime.datetime) -> dict:
    return {"ledger_id": listing.ledger_id,
            "entries": listing.entries.encode(), "entry_groups": _groups(listing.entries),
            "entry_count": listing.entries.entry_count,
            "damaged": listing.damaged.encode(), "damaged_groups": _groups(listing.damaged),
            "damaged_count": listing.damaged.entry_count,
            "index_problem": listing.index_problem, "storage": storage_kind, "exported_at": exported_at}


def _groups(availability: EntryAvailability) -> list[tuple[int, int, int, int]]:
    return [(g.first_sequence_start, g.last_sequence_start, g.sequence_size, g.sequence_period)
            for g in availability.groups]
