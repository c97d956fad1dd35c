"""``bookie-scanner audit``: BP-34's durability contract across the cluster, on Spark."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from scanner.commands.bookie_args import add_metadata_option
from scanner.commands.output import add_format_option
from scanner.commands.placement_args import add_rack_options, audit_racks, placement_settings
from scanner.envelope import envelope
from scanner.errors import UsageError

DESCRIPTION = """\
Judge every ledger of the cluster against what every bookie exported (`bookie-scanner export`):
  under_replicated_entry  entries of a closed fragment with fewer good copies than the write quorum,
                          on the bookies their write sets name (lost or corrupt copies are not good)
  extra_copy              entries a bookie holds outside its write sets
  placement_violation     an ensemble naming a bookie twice, or (a rack source) write sets breaking the rack rule
  orphan_ledger           bookies hold entries of a ledger the metadata does not have
  long_under_replicated   a ledger marked under-replicated for longer than --max-under-replicated-age
  unavailable_bookie      an ensemble bookie neither registered (available/) nor exported
OPEN and IN_RECOVERY ledgers are not judged on their last fragment; a ledger already marked
under-replicated is left to re-replication (only its age is judged).

Runs on Spark: embedded local[*] by default, --master URL (or spark-submit) for a cluster.
Exit status: 0 no violations, 1 violations, 2 usage/configuration/metadata/Spark error.
"""

EPILOG = """\
examples:
  bookie-scanner audit --exports hdfs://nn/bk-audit/exports --metadata zk://zk1:2181/ledgers
  bookie-scanner audit --exports /data/exports --metadata file:zk-dump.json --format json --output /data/violations
"""

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def register(subparsers) -> None:
    parser = subparsers.add_parser("audit", help="audit the cluster's durability contract (BP-34) on Spark",
                                   description=DESCRIPTION, epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exports", metavar="DIR", required=True,
                        help="the directory every bookie exported into (local path, hdfs://..., s3a://...)")
    add_metadata_option(parser)
    add_format_option(parser)
    parser.add_argument("--output", metavar="DIR", help="also write the violations as Parquet to DIR (replaced)")
    parser.add_argument("--master", metavar="URL", help="Spark master (default: local[*], embedded)")
    add_rack_options(parser.add_argument_group(
        "placement (a rack source enables the rack check, with the rule a repair's move keeps to)"))
    parser.add_argument("--max-under-replicated-age", metavar="DURATION", default="24h",
                        help="a mark older than this is a long_under_replicated violation: 90s, 30m, 6h, 2d "
                             "(default: 24h)")
    repair = parser.add_argument_group("repair (default: report only)")
    repair.add_argument("--mark", action="store_true",
                        help="mark ledgers with under-replicated entries as the Auditor does (zk:// metadata only)")
    repair.add_argument("--marks-per-second", metavar="N", type=float, default=50.0,
                        help="at most this many marks per second (default: 50; 0 = unlimited)")
    parser.set_defaults(func=run)


def parse_duration_ms(text: str) -> int:
    """Milliseconds of a duration like ``500ms``, ``90s``, ``30m``, ``6h``, ``2d`` (a bare number is seconds)."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise UsageError(f"--max-under-replicated-age {text!r}: expected a number with a unit ms, s, m, h or d")
    return int(float(match.group(1)) * _UNIT_MS[match.group(2) or "s"])


def run(args) -> int:
    from scanner.audit.job import AuditInputError, AuditOptions, run_audit
    from scanner.audit.spark_session import SparkUnavailable, running_spark
    from scanner.commands.bookie_args import metadata_store, metadata_uri
    from scanner.metadata.store import MetadataUnavailable
    from scanner.metadata.uri import dump_path
    from scanner.repair.placement.racks import DEFAULT_MIN_RACKS

    if args.marks_per_second < 0:
        raise UsageError(f"--marks-per-second must be 0 (unlimited) or more, got {args.marks_per_second:g}")
    placement = placement_settings(args)
    _check_local_exports(args.exports)  # before Spark starts: seconds, a JVM and a log file
    max_under_replicated_ms = parse_duration_ms(args.max_under_replicated_age)
    uri = metadata_uri(args)
    store = None if uri.startswith("file:") else metadata_store(args)  # a dump is read by Spark, below
    if store is None and not Path(dump_path(uri)).is_file():
        raise UsageError(f"{dump_path(uri)}: no such dump file")
    spark_log = None if args.verbose else spark_log_path()
    keep_log = False  # only a failure of Spark's, whose one line names it
    try:
        options = AuditOptions(racks=audit_racks(args, store), min_racks=placement.min_racks or DEFAULT_MIN_RACKS,
                               enforce_min_racks=bool(placement.enforce_min_racks),
                               max_under_replicated_ms=max_under_replicated_ms)
        marks = None
        if args.mark:
            from scanner.repair.after_scan import marks_for

            marks = marks_for(store)  # a usage error before the job, not after (a dump cannot be marked)
        with running_spark("bookie-scanner audit", args.master, log_path=spark_log) as spark:
            store = store or _dump_store(spark, uri)
            result = run_audit(spark, store, args.exports, options, now_ms=int(time.time() * 1000))
            try:
                if args.output:
                    _write_parquet(result.violations, args.output)
                repair = None
                if marks is not None:
                    from scanner.audit.marking import mark_under_replicated

                    repair = mark_under_replicated(marks, result.sorted_violations(), args.marks_per_second or None)
                _report(result, repair, args.format)
                status = 1 if any(result.counts.values()) else 0
            finally:
                result.close()
        return status
    except (SparkUnavailable, AuditInputError) as exc:
        see_log = _see_log(spark_log)
        keep_log = bool(see_log)
        raise UsageError(f"{exc}{see_log}") from None
    except MetadataUnavailable as exc:
        raise UsageError(f"metadata unavailable: {exc}") from None
    finally:
        if store is not None:
            store.close()
        if spark_log is not None and not keep_log:
            spark_log.unlink(missing_ok=True)  # nobody needs Spark's chatter of a run that went through


def _dump_store(spark, uri: str):
    """The dump a ``file:`` URI names, read by Spark (the driver keeps only what is not a ledger)."""
    from scanner.audit.dump_frame import DumpFrameStore
    from scanner.metadata.ledger_paths import LayoutError
    from scanner.metadata.snapshot import DumpFormatError
    from scanner.metadata.uri import dump_path

    try:
        return DumpFrameStore(spark, dump_path(uri))
    except (DumpFormatError, LayoutError) as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # Spark's parse errors arrive through py4j
        raise UsageError(f"cannot read {uri}: {(str(exc).strip().splitlines() or [type(exc).__name__])[0]}") from None


def spark_log_path() -> Path:
    """Where Spark's own logs go unless --verbose: a file of this run in the temp dir."""
    return Path(tempfile.gettempdir()) / f"bookie-scanner-audit-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"


def _see_log(spark_log: Path | None) -> str:
    """Where to read more, when Spark wrote something."""
    if spark_log is None or not spark_log.exists() or spark_log.stat().st_size == 0:
        return ""
    return f" (Spark's log: {spark_log})"


def _check_local_exports(exports: str) -> None:
    """A UsageError when ``--exports`` is a local path (or file://) that is not a directory."""
    if "://" in exports and not exports.startswith("file://"):
        return  # HDFS, S3, GCS: only Spark's Hadoop filesystems reach them
    if not Path(exports.removeprefix("file://")).is_dir():
        raise UsageError(f"{exports}: no such directory (expected the directory the bookies exported into)")


def _write_parquet(violations, output: str) -> None:
    try:
        violations.write.mode("overwrite").parquet(output)
    except Exception as exc:  # Hadoop filesystems surface as py4j errors: say where, in one line
        raise UsageError(f"cannot write {output}: {(str(exc).strip().splitlines() or [type(exc).__name__])[0]}") from None


def _report(result, repair: dict | None, output_format: str) -> None:
    if output_format == "json":
        document = {"summary": result.summary(), **({"repair": repair} if repair is not None else {})}
        _write_streamed(envelope("audit_report", document), "violations", map(_violation_json, result.sorted_violations()))
        return
    summary = result.summary()
    print(f"cluster audit: {summary['ledgers_checked']} ledgers checked against {summary['bookies']} exported "
          f"bookies ({', '.join(summary['exported_bookies'])}); {len(summary['registered_bookies'])} registered; "
          f"{summary['ledgers_judged_one_by_one']} judged one by one (the rest cleared in bulk)")
    not_judged = {status: n for status, n in summary["ledgers_not_judged"].items() if n}
    if not_judged:
        print("not judged: " + ", ".join(f"{n} {status}" for status, n in not_judged.items()))
    for problem in summary["problems"]:
        print(f"problem: {problem}")
    counts = {category: n for category, n in summary["violations"].items() if n}
    print("violations: " + (", ".join(f"{category} {n}" for category, n in counts.items()) or "none"))
    for violation in result.sorted_violations():
        entries = "" if violation.entries is None else " entries " + ", ".join(map(_group_text, violation.entries))
        print(f"  {violation.category.value:<23} ledger {violation.ledger_id}{entries}"
              f"{' bookies ' + ','.join(violation.bookies) if violation.bookies else ''}: {violation.detail}")
    if repair is not None:
        for bookie, section in repair.items():
            print(f"marks naming {bookie}: marked {section['marked']}, merged {section['merged']}, "
                  f"already marked {section['already_marked']}, disabled {section['disabled']}, "
                  f"failed {section['failed']}")


def _write_streamed(document: dict, key: str, items) -> None:
    """``document`` with ``key``: a list of ``items``, written as they come (the driver never holds the list)."""
    head = json.dumps(document, indent=2)
    sys.stdout.write(f'{head[:-2]},\n  "{key}": [')
    for number, item in enumerate(items):
        sys.stdout.write(("," if number else "") + "\n    " + json.dumps(item))
    sys.stdout.write("\n  ]\n}\n")


def _group_text(group) -> str:
    """``5``, ``5-6``, or ``5-6 every 4 to 119`` (the run repeated every period entries up to that entry)."""
    first, last = group.first_sequence_start, group.first_sequence_start + group.sequence_size - 1
    run = f"{first}" if first == last else f"{first}-{last}"
    return run if group.sequence_period == 0 else f"{run} every {group.sequence_period} to {group.last_entry_id}"


def _violation_json(violation) -> dict:
    groups = violation.entries
    return {"category": violation.category.value, "ledger_id": violation.ledger_id,
            "entries": None if groups is None else [
                {"first_sequence_start": g.first_sequence_start, "last_sequence_start": g.last_sequence_start,
                 "sequence_size": g.sequence_size, "sequence_period": g.sequence_period} for g in groups],
            "entry_count": None if groups is None else sum(g.entry_count for g in groups),
            "bookies": list(violation.bookies), "detail": violation.detail, "copies": violation.copies}
