"""The audit's per-ledger steps, as they run on Spark's executors.

``clean_listings``: znode bytes in; the listing each bookie must have exported for the ledger to be
clean, when listings alone can tell (Spark then compares them in bulk); ``judge_ledger``: znode bytes and
listings in, an outcome out, for the ledgers that comparison cannot clear.

Pure and picklable: no Spark, no ZooKeeper. Everything the steps need beyond one ledger's row travels
in an ``AuditContext`` (broadcast once per job).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scanner.audit.availability import AvailabilityError, SequenceGroup, decode_runs, encode_runs, merge_runs
from scanner.audit.contract import (DEFAULT_MIN_RACKS, Category, Violation, ledger_violations, placement_violations,
                                    unavailable_bookies, write_set_runs)
from scanner.metadata.ledger import MetadataFormatError, parse_ledger_metadata


class Status(enum.StrEnum):
    JUDGED = "judged"
    MARKED = "marked"  # already marked under-replicated: BP-34 leaves it to re-replication this round
    UNDECODABLE = "undecodable"  # metadata that does not decode is nobody's to judge


@dataclass(frozen=True, slots=True)
class AuditContext:
    registered: frozenset[str]  # bookies under available/ and available/readonly/
    exported: frozenset[str]  # bookies whose listing is in the exports
    marked: frozenset[int]  # ledgers with an under-replication mark
    racks: Mapping[str, str] | None = None
    min_racks: int = DEFAULT_MIN_RACKS
    enforce_min_racks: bool = False  # enforceMinNumRacksPerWriteQuorum: a write set in the default rack breaks it


@dataclass(frozen=True, slots=True)
class LedgerNode:
    """A ledger's metadata znode as the driver read it."""

    path: str
    data: bytes
    ctime: int | None
    mzxid: int  # tells whether the metadata changed before a violation is reported


@dataclass(frozen=True, slots=True)
class BookieListing:
    bookie_id: str
    entries: bytes  # AvailabilityOfEntriesOfLedger of every indexed entry
    damaged: bytes  # the same encoding: indexed entries with a lost or corrupt copy


@dataclass(frozen=True, slots=True)
class LedgerOutcome:
    ledger_id: int
    status: Status
    violations: tuple[Violation, ...] = ()
    mzxid: int | None = None  # of the metadata judged; None for a ledger without metadata
    problems: tuple[str, ...] = ()  # listings that could not be read (counted as holding nothing)
    rejudged: bool = False  # judged again: the metadata changed after it was first read


def judge_ledger(ledger_id: int, node: LedgerNode | None, listings: Iterable[BookieListing],
                 context: AuditContext) -> LedgerOutcome:
    """BP-34's verdict on one ledger: its metadata (None: the store has none) against every bookie's listing."""
    mzxid = None if node is None else node.mzxid
    if ledger_id in context.marked:
        return LedgerOutcome(ledger_id, Status.MARKED, mzxid=mzxid)
    metadata = None
    if node is not None:
        try:
            metadata = parse_ledger_metadata(ledger_id, node.data, node.ctime, source=node.path)
        except MetadataFormatError as exc:
            return LedgerOutcome(ledger_id, Status.UNDECODABLE, mzxid=mzxid, problems=(str(exc),))
    runs, problems = {}, []
    for listing in listings:
        try:
            source = f"listing of ledger {ledger_id} by {listing.bookie_id}"
            runs[listing.bookie_id] = (decode_runs(listing.entries, f"{source}: entries"),
                                       decode_runs(listing.damaged, f"{source}: damaged"))
        except AvailabilityError as exc:
            problems.append(str(exc))
    violations = ledger_violations(ledger_id, metadata, runs, racks=context.racks, min_racks=context.min_racks,
                                   enforce_min_racks=context.enforce_min_racks)
    if metadata is not None:
        violations += unavailable_bookies(metadata, context.registered, context.exported)
    return LedgerOutcome(ledger_id, Status.JUDGED, tuple(violations), mzxid, tuple(problems))


def clean_listings(ledger_id: int, node: LedgerNode, context: AuditContext
                   ) -> tuple[Status, tuple[tuple[str, bytes], ...] | None]:
    """The ledger's status and, for a closed ledger without placement or availability violations, the
    ``entries`` bytes every bookie holding a share of it must have exported (and nothing damaged) for it to
    be clean: exactly its write sets' entries, encoded as the export encodes them. None: judge it in full.

    Those bytes equal for every bookie of the ensembles, and no other bookie listing the ledger, is
    exactly the case where ``judge_ledger`` finds nothing.
    """
    if ledger_id in context.marked:
        return Status.MARKED, None
    try:
        metadata = parse_ledger_metadata(ledger_id, node.data, node.ctime, source=node.path)
    except MetadataFormatError:
        return Status.UNDECODABLE, None
    if (not metadata.is_closed
            or placement_violations(metadata, context.racks, context.min_racks, context.enforce_min_racks)
            or unavailable_bookies(metadata, context.registered, context.exported)):
        return Status.JUDGED, None
    runs: dict[str, list] = {}
    for fragment in metadata.fragments():
        for index, bookie in enumerate(fragment.bookies):
            runs.setdefault(bookie, []).extend(write_set_runs(fragment, index))
    encoded: dict[tuple, bytes] = {}  # bookies holding the same entries (write quorum = ensemble) share the bytes
    return Status.JUDGED, tuple((bookie, encoded.get(key) or encoded.setdefault(key, encode_runs(key)))
                                for bookie, held in runs.items() if held for key in (merge_runs(held),))


def violation_row(violation: Violation) -> tuple:
    """A violation as a row of ``violation_schema``."""
    entries = None if violation.entries is None else [
        (g.first_sequence_start, g.last_sequence_start, g.sequence_size, g.sequence_period) for g in violation.entries]
    return (violation.category.value, violation.ledger_id, entries, list(violation.bookies), violation.detail,
            violation.copies)


def outcome_row(outcome: LedgerOutcome) -> tuple:
    """An outcome as a row of ``outcome_schema``."""
    return (outcome.ledger_id, outcome.status.value, outcome.mzxid is not None, outcome.rejudged,
            list(outcome.problems), [violation_row(violation) for violation in outcome.violations])


def violation_from_row(row: Sequence) -> Violation:
    category, ledger_id, entries, bookies, detail, copies = row
    return Violation(Category(category), ledger_id,
                     None if entries is None else tuple(SequenceGroup(*map(int, group)) for group in entries),
                     tuple(bookies), detail, copies)


def outcome_schema():
    """The Spark schema of the ledgers judged one by one: ``judge_ledger``'s outcomes."""
    from pyspark.sql.types import ArrayType, BooleanType, LongType, StringType, StructField, StructType

    return StructType([
        StructField("ledger_id", LongType(), False),
        StructField("status", StringType(), False),
        StructField("has_metadata", BooleanType(), False),  # False: listings of a ledger the metadata does not have
        StructField("rejudged", BooleanType(), False),
        StructField("problems", ArrayType(StringType(), False), False),
        StructField("violations", ArrayType(violation_schema(), False), False),
    ])


def violation_schema():
    """The Spark schema of the audit's violations (also its Parquet output)."""
    from pyspark.sql.types import (ArrayType, IntegerType, LongType, StringType, StructField, StructType)

    group = StructType([StructField("first_sequence_start", LongType(), False),
                        StructField("last_sequence_start", LongType(), False),
                        StructField("sequence_size", LongType(), False),  # a run may exceed 2^31 entries
                        StructField("sequence_period", LongType(), False)])
    return StructType([
        StructField("category", StringType(), False),
        StructField("ledger_id", LongType(), False),
        StructField("entries", ArrayType(group, False), True),  # exact: sequence groups
        StructField("bookies", ArrayType(StringType(), False), False),
        StructField("detail", StringType(), False),
        StructField("copies", IntegerType(), True),
    ])
