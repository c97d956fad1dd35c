"""``bookie-scanner scan``: check one bookie against the cluster's metadata, once, and report."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from scanner.commands import values
from scanner.commands.bookie_args import (add_bookie_options, add_metadata_option, bookie_layout, metadata_store,
                                          metadata_uri)
from scanner.commands.output import add_format_option
from scanner.scan.settling import SETTLE_SECONDS

DESCRIPTION = """\
Scan one bookie once, read-only, and report what BP-24 calls the three conditions:
  missing_ledger   the metadata places entries of a ledger here, the index has no such ledger
  missing_entry    the index has the ledger but not entries the write sets assign to this bookie
  corrupt_entry    the record is there but its digest fails or its header disagrees with the index
plus lost_entry (the index says the entry is here, its record is gone or cut: the most severe),
damaged_entry_log (file-level damage) and orphan_ledger (informational: data of deleted ledgers).

On a live bookie it gives way: it reads at most 50 MB/s (--rate) in the idle I/O scheduling class
at a lower CPU priority (nice 10), as the agent does. On a copy of a bookie's disks, --full-speed
reads as fast as the disks allow.

Exit status: 0 nothing but informational findings, 1 findings, 2 usage/configuration/metadata error,
70 unexpected error (a bug), 141 the output's reader went away (broken pipe).
"""

EPILOG = """\
examples:
  bookie-scanner scan --bookie-conf /opt/bookkeeper/conf/bk_server.conf
  bookie-scanner scan --bookie-conf bk_server.conf --metadata file:zk-dump.json --format json
  bookie-scanner scan --bookie-conf bk_server.conf --ledger 1234 --rate 20MB/s
  bookie-scanner scan --ledger-dirs /mnt/copy/ledgers --metadata file:zk-dump.json --full-speed
"""

DEFAULT_RATE = 50_000_000  # the agent's default per ledger dir
GUEST_NICENESS = 10  # as the systemd unit runs the agent


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "scan", help="scan one bookie now and report findings", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bookie_options(parser)
    add_metadata_option(parser)
    narrow = parser.add_argument_group("narrowing")
    narrow.add_argument("--ledger", metavar="ID", type=values.ledger_id, action="append",
                        help="check only this ledger (repeatable); its entry logs are verified too")
    narrow.add_argument("--entry-log", metavar="ID", type=values.entry_log_id, action="append",
                        help="verify only this entry log: 26, 0x1a or 1a.log (repeatable)")
    add_speed_options(parser)
    parser.add_argument("--jobs", metavar="N", type=int, default=os.cpu_count() or 1,
                        help="ledger dirs scanned at once, each in a process of its own (default: the number of "
                             "CPUs; a bookie with one ledger dir is scanned by one process)")
    parser.add_argument("--settle-seconds", metavar="S", type=float, default=SETTLE_SECONDS,
                        help="a ledger whose metadata changed (a close, an ensemble change) less than S seconds ago "
                             "is judged once they have passed: its last entries may still be on their way to this "
                             f"bookie after its writer's ack quorum had them (default: {SETTLE_SECONDS:g}; 0: at once)")
    add_format_option(parser)
    repair = parser.add_argument_group("repair (default: report only)")
    repair.add_argument("--mark", action="store_true",
                        help="mark damaged ledgers under-replicated in ZooKeeper, as BookKeeper's Auditor does, "
                             "so auto-recovery re-replicates them (needs zk:// metadata)")
    repair.add_argument("--marks-per-second", metavar="N", type=float, default=50.0,
                        help="at most this many marks per second (default: 50; 0 = unlimited)")
    repair.add_argument("--state-dir", metavar="DIR", type=Path,
                        help="the scanner's state dir: filed marks are recorded there for follow-up")
    parser.set_defaults(func=run)


def run(args) -> int:
    from scanner.envelope import write_document
    from scanner.errors import UsageError
    from scanner.metadata.store import MetadataUnavailable
    from scanner.progress import ProgressLine
    from scanner.scan.on_demand import ParallelDirs, scan_bookie
    from scanner.storage.bookie import open_bookie
    from scanner.storage.dbstorage import DbIndexError
    from throttle import Pacer

    if args.jobs < 1:
        raise UsageError(f"--jobs must be 1 or more, got {args.jobs}")
    if not 0 <= args.settle_seconds <= 3600:
        raise UsageError(f"--settle-seconds must be 0 to 3600, got {args.settle_seconds:g}")
    rate = reading_rate(args)
    if args.marks_per_second < 0:
        raise UsageError(f"--marks-per-second must be 0 (unlimited) or more, got {args.marks_per_second:g}")
    layout = bookie_layout(args)
    store = metadata_store(args, layout)
    try:
        if args.mark:
            from scanner.repair.after_scan import marks_for

            marks_for(store, layout.conf)  # a usage error before a long scan, not after
        with tempfile.TemporaryDirectory(prefix="bookie-scanner-") as work_dir, \
                open_bookie(layout, work_dir=work_dir) as storage:
            check_narrowing(storage, store, args.ledger, args.entry_log)
            parallel = ParallelDirs(metadata_uri(args, layout), args.jobs, rate)
            report = scan_bookie(storage, store, layout.bookie_id, layout.storage, ledgers=args.ledger,
                                 entry_logs=args.entry_log, pacer=Pacer(bytes_per_second=rate),
                                 progress=ProgressLine(), scratch=Path(work_dir), parallel=parallel,
                                 settle_seconds=args.settle_seconds)
            report.not_owed = not_owed(storage, store, layout.bookie_id, args.ledger or [])
        report.name_ledgers(store)
        repair = None
        if args.mark:
            from scanner.repair.after_scan import mark_damage

            repair = mark_damage(store, layout.bookie_id, report.findings, conf=layout.conf,
                                 state_dir=args.state_dir, marks_per_second=args.marks_per_second or None)
    except MetadataUnavailable as exc:
        raise UsageError(f"metadata became unavailable during the scan: {exc}") from None
    except DbIndexError as exc:  # what is left once damage became findings: ledger dirs given out of order
        raise UsageError(f"cannot read the bookie's DbLedgerStorage index: {exc}") from None
    finally:
        store.close()
    if args.format == "json":
        document = report.to_json()
        if repair is not None:
            document["repair"] = repair
        write_document(document)
    else:
        sys.stdout.write(report.to_text())
        if repair is not None:
            from scanner.repair.after_scan import repair_text

            sys.stdout.write(repair_text(repair))
    return report.exit_status


def add_speed_options(parser: argparse.ArgumentParser) -> None:
    """``--rate`` (with a safe default for a live bookie) or ``--full-speed`` (for a copy)."""
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument("--rate", metavar="BYTES_PER_SEC", type=values.rate, default=DEFAULT_RATE,
                       help="read at most this much per second, the whole scan: 50M, 50MB/s, 48MiB, 50000000 "
                            "(default: 50MB/s, in the idle I/O class, at nice 10)")
    speed.add_argument("--full-speed", action="store_true",
                       help="read as fast as the disks allow, at normal I/O and CPU priority: for a copy of a "
                            "bookie's disks, not a live bookie")


def reading_rate(args) -> int | None:
    """The rate the speed options give (None: unlimited); unless --full-speed, this process gives way first."""
    if args.full_speed:
        return None
    give_way()
    return args.rate


def give_way() -> None:
    """A guest on a live bookie's host: the idle I/O class and nice 10, for this process and those it starts.

    Set before any thread or process starts (they inherit both); a host that refuses says so on stderr.
    """
    from throttle import use_idle_io_class

    refused = use_idle_io_class()
    if refused is not None:
        print(f"bookie-scanner: reading at normal I/O priority ({refused})", file=sys.stderr)
    if os.getpriority(os.PRIO_PROCESS, 0) < GUEST_NICENESS:
        os.setpriority(os.PRIO_PROCESS, 0, GUEST_NICENESS)


def not_owed(storage, store, bookie_id: str, ledgers: list[int]) -> list[int]:
    """Of ``ledgers``, the ones this bookie's index has though no ensemble of their metadata names the bookie."""
    return [ledger_id for ledger_id in ledgers
            if (meta := store.ledger(ledger_id)) is not None
            and all(fragment.bookie_index(bookie_id) is None for fragment in meta.fragments())
            and _indexed(storage, ledger_id)]


def _indexed(storage, ledger_id: int) -> bool:
    """Whether the bookie's index has the ledger (an index that cannot be read is the scan's finding, not this)."""
    from scanner.storage.dbstorage import DbIndexError
    from scanner.storage.indexfile import IndexFileError

    try:
        return storage.ledger_index(ledger_id) is not None
    except (DbIndexError, IndexFileError, OSError):
        return False


def check_narrowing(storage, store, ledgers: list[int] | None, entry_logs: list[int] | None) -> None:
    """A UsageError for a ``--ledger`` or ``--entry-log`` that names nothing: "no findings" would mislead."""
    from scanner.errors import UsageError
    from scanner.metadata.ledger import MetadataFormatError
    from scanner.storage.dbstorage import DbIndexError
    from scanner.storage.indexfile import IndexFileError

    for ledger_id in ledgers or ():
        try:
            if storage.ledger_index(ledger_id) is not None or store.ledger(ledger_id) is not None:
                continue
        except (DbIndexError, IndexFileError, MetadataFormatError):
            continue  # there, but damaged: the scan reports it
        raise UsageError(f"ledger {ledger_id} is neither in this bookie's index nor in the metadata")
    present = {log.entry_log_id for log in storage.entry_logs()}
    for entry_log in entry_logs or ():
        if entry_log not in present:
            dirs = ", ".join(str(d) for d in storage.layout.ledger_current_dirs)
            raise UsageError(f"entry log {entry_log} ({entry_log:x}.log) is in none of the ledger dirs ({dirs})")
