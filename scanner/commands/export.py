"""``bookie-scanner export``: one bookie's listing (BP-34's entry availability per ledger) as Parquet for the audit."""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from scanner.commands.bookie_args import add_bookie_options, add_metadata_option, bookie_layout, metadata_store
from scanner.commands.scan import add_speed_options, reading_rate
from scanner.errors import UsageError

DESCRIPTION = """\
Write what one bookie holds, for `bookie-scanner audit`: for every ledger in its index, the entries
it lists in BP-34's condensed form (the AvailabilityOfEntriesOfLedger bytes BookKeeper's
GetListOfEntriesOfLedger answers with, and the same sequence groups as columns), plus the entries a
scan found lost or corrupt, which the audit does not count as good copies. Read-only on the bookie.

The damaged entries come from a scan run now against the metadata (digests of every entry log), or
from a saved `bookie-scanner scan --format json` report of this bookie (--findings).
Output: Parquet under DIR/bookie_id=<id>/, written by pyarrow (no Spark, no JVM): a local path, s3://
(or s3a://), gs://, or hdfs:// (the one exception: libhdfs needs Hadoop's client and Java on the host);
re-exporting replaces this bookie's partition only, so every bookie can export into the same DIR.
"""

EPILOG = """\
examples:
  bookie-scanner export --bookie-conf /opt/bookkeeper/conf/bk_server.conf --output hdfs://nn/bk-audit/exports
  bookie-scanner scan --bookie-conf bk_server.conf --format json > scan.json
  bookie-scanner export --bookie-conf bk_server.conf --findings scan.json --output /data/exports
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "export", help="write one bookie's entry listing as Parquet for the cluster audit",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bookie_options(parser)
    add_metadata_option(parser)
    parser.add_argument("--output", metavar="DIR", required=True,
                        help="where exports live (local path, s3://..., hdfs://...); this bookie's partition is replaced")
    parser.add_argument("--findings", metavar="SCAN_JSON", type=Path,
                        help="take the damaged entries from this `scan --format json` report instead of scanning now")
    add_speed_options(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from scanner.audit.export import bookie_listings, damaged_runs, write_export
    from scanner.storage.bookie import open_bookie

    layout = bookie_layout(args)
    findings = _saved_findings(args.findings, layout.bookie_id) if args.findings else None
    rate = reading_rate(args) if findings is None else None
    with _output_errors(args.output):
        _check_writable(args.output)  # before a scan that may take days, not after
    with tempfile.TemporaryDirectory(prefix="bookie-scanner-") as work_dir, \
            open_bookie(layout, work_dir=work_dir) as storage:
        if findings is None:
            findings = _scan_now(args, layout, storage, rate)
        with _output_errors(args.output):
            summary = write_export(bookie_listings(storage, damaged_runs(findings)),
                                   layout.bookie_id, layout.storage, args.output)
    print(f"exported {summary.ledgers} ledgers of bookie {summary.bookie_id} to {summary.path}: "
          f"{summary.entries} entries listed, {summary.damaged} damaged"
          + (f", {summary.index_problems} unreadable indexes" if summary.index_problems else ""))
    return 0


@contextlib.contextmanager
def _output_errors(output: str) -> Iterator[None]:
    """pyarrow's filesystems failing (an unknown scheme, no access, no libhdfs) as one line naming the output."""
    import pyarrow as pa

    try:
        yield
    except (OSError, pa.ArrowException) as exc:
        raise UsageError(f"cannot write {output}: {_first_line(exc)}") from None


def _check_writable(output: str) -> None:
    """Create the exports directory if needed and a file in it (removed again); raises what the filesystem says."""
    from scanner.audit.export import exports_filesystem

    filesystem, root = exports_filesystem(output)
    probe = f"{root}/_export-probe-{uuid.uuid4().hex}"  # a `_` directory, as staging: readers skip it
    filesystem.create_dir(probe)
    try:
        with filesystem.open_output_stream(f"{probe}/probe") as stream:
            stream.write(b"")
    finally:
        filesystem.delete_dir(probe)


def _scan_now(args, layout, storage, rate: int | None):
    from scanner.metadata.store import MetadataUnavailable
    from scanner.progress import ProgressLine
    from scanner.scan.on_demand import scan_bookie
    from throttle import Pacer

    store = metadata_store(args, layout)
    try:
        return scan_bookie(storage, store, layout.bookie_id, layout.storage,
                           pacer=Pacer(bytes_per_second=rate), progress=ProgressLine()).findings
    except MetadataUnavailable as exc:
        raise UsageError(f"metadata became unavailable during the scan: {exc}") from None
    finally:
        store.close()


def _saved_findings(path: Path, bookie_id: str):
    from scanner.checks.findings import Finding

    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        if report.get("bookie_id") != bookie_id:
            raise UsageError(f"{path}: a scan report of bookie {report.get('bookie_id')!r}, not of {bookie_id!r}")
        return [Finding.from_json(finding) for finding in report["findings"]]
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path}: not a `bookie-scanner scan --format json` report ({exc})") from None


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
