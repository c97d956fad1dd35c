"""``bookie-scanner heal``: give a bookie back good copies of its damaged entries, read from its peers."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from scanner.commands import values
from scanner.commands.bookie_args import add_bookie_options, add_metadata_option, bookie_layout, metadata_store

DESCRIPTION = """\
Scan the bookie (or only --ledger), then for every lost, corrupt or missing entry it still owes,
read the copies its peers hold (BookKeeper's wire protocol, no JVM) and judge them:
  local_rot    a peer copy verifies: heal by a recovery add of that copy to this bookie, then read
               it back through the bookie and compare
  write_path   no copy verifies anywhere: the writer produced bad bytes; left alone
  divergent    two different copies verify: the replicas disagree; reported, left alone
  unresolved   no verifying copy could be read now; left alone
Only entries of closed ledgers, or of fragments before an open ledger's last, are healed. Nothing is
fenced or deleted. A DRY RUN by default: --no-dry-run writes.

Exit status: 0 every damaged entry healed (or healable, in a dry run), 1 anything else, 2 usage.
"""

EPILOG = """\
examples:
  bookie-scanner heal --bookie-conf /opt/bookkeeper/conf/bk_server.conf --ledger 1234
  bookie-scanner heal --bookie-conf bk_server.conf --ledger 1234 --no-dry-run --state-dir /var/lib/bookie-scanner
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "heal", help="heal damaged entries of a bookie from verified peer copies (dry run by default)",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bookie_options(parser)
    add_metadata_option(parser)
    parser.add_argument("--ledger", metavar="ID", type=values.ledger_id, action="append",
                        help="scan and heal only this ledger (repeatable; default: scan the whole bookie)")
    parser.add_argument("--dry-run", action=argparse.BooleanOptionalAction, default=True,
                        help="judge the peer copies but write nothing (default); --no-dry-run heals")
    parser.add_argument("--entries-per-second", metavar="N", type=float, default=10.0,
                        help="heal at most this many entries per second (default: 10; 0 = unlimited)")
    parser.add_argument("--max-entries", metavar="N", type=int, default=10_000,
                        help="heal at most this many entries in one run (default: 10000)")
    parser.add_argument("--timeout", metavar="SECONDS", type=float, default=10.0,
                        help="give a bookie this long to answer one request (default: 10)")
    parser.add_argument("--state-dir", metavar="DIR", type=Path,
                        help="record every heal attempt in DIR/heals.jsonl")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="report format (default: text)")
    parser.set_defaults(func=run)


def run(args) -> int:
    from scanner.scan.on_demand import scan_bookie
    from scanner.cli import UsageError
    from scanner.heal.after_scan import heal_damage
    from scanner.metadata.store import MetadataUnavailable
    from scanner.metadata.zookeeper import ZooKeeperStore
    from scanner.storage.bookie import open_bookie

    if args.entries_per_second < 0:
        raise UsageError(f"--entries-per-second must be 0 (unlimited) or more, got {args.entries_per_second:g}")
    if args.max_entries < 1:
        raise UsageError(f"--max-entries must be 1 or more, got {args.max_entries}")
    if not args.timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    if args.state_dir is not None:
        try:
            args.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot use --state-dir {args.state_dir}: {exc.strerror or exc}") from None
    layout = bookie_layout(args)
    store = metadata_store(args, layout)
    try:
        if not args.dry_run and not isinstance(store, ZooKeeperStore):
            raise UsageError("--no-dry-run needs the live metadata (zk://...): a dump may name a deleted "
                             "ledger or an old ensemble")
        with tempfile.TemporaryDirectory(prefix="bookie-scanner-") as work_dir, \
                open_bookie(layout, work_dir=work_dir) as storage:
            findings = scan_bookie(storage, store, layout.bookie_id, layout.storage, ledgers=args.ledger).findings
        report = heal_damage(store, layout.bookie_id, findings, dry_run=args.dry_run, state_dir=args.state_dir,
                             entries_per_second=args.entries_per_second or None, max_entries=args.max_entries,
                             timeout=args.timeout)
    except MetadataUnavailable as exc:
        raise UsageError(f"metadata became unavailable: {exc}") from None
    finally:
        store.close()
    if args.format == "json":
        json.dump(report.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(report.to_text())
    return 0 if report.settled else 1
