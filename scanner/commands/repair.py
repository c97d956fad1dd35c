"""``bookie-scanner repair``: move a bookie's damaged fragments to other bookies, as BookKeeper's replicator does."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from scanner.commands import values
from scanner.commands.bookie_args import add_bookie_options, add_metadata_option, bookie_layout, metadata_store
from scanner.commands.output import add_format_option
from scanner.commands.placement_args import add_placement_options, placement_settings

DESCRIPTION = """\
Scan the bookie (or only --ledger), then for every ledger with lost, corrupt or missing entries
that this bookie must still hold, move the fragments holding them out of this bookie, the way
BookKeeper's own LedgerFragmentReplicator (and `bookkeeper shell recover`) does:
  - take the ledger's under-replication lock, so no ReplicationWorker works on it meanwhile;
  - copy this bookie's share of each damaged fragment to a writable bookie outside its ensemble, chosen
    as the cluster's placement policy would (racks, Pulsar's isolation groups: see placement below),
    every copy read from a peer, its digest verified against the ledger metadata, added with the
    recovery flag, read back and compared;
  - put the new bookie in this bookie's place in that fragment's ensemble (compare-and-set on the
    ledger's metadata, in one ZooKeeper multi with a check that the ledger's lock is still ours), and
    take back what this bookie asked of the ledger's under-replication mark (never another's request).
Bookies are reached through their registration (a custom bookieId works); a target is never one
that failed an earlier try first, nor one that already holds the ledger outside its ensembles.
Clients are never sent to the damaged copy again; nothing is written to this bookie or deleted
(its garbage collector drops the old copy once no ensemble names it). A copy added beside a damaged
one would not last: the bookie's read-ahead and compaction bring the damaged record back.
Only closed ledgers are moved; damage in an open ledger's last fragment waits until it is closed.
Moves that cannot be made are reported: no_target (no bookie the placement allows), no_good_copy
(no copy verifies anywhere: the writer's bytes, or replicas that disagree), busy (another repairer
holds the lock), refused (this scanner cannot do it: a bookie advertises TLS or authentication, the
cluster's clients must authenticate, zkEnableSecurity without a SASL session, or metadata format 1),
failed (a bookie did not answer: try again).

A DRY RUN by default: it checks that a verified copy of each damaged entry and a new bookie are
there. --no-dry-run moves, and needs the live metadata (zk://...).

Exit status: 0 every damaged ledger moved (or movable, in a dry run) or nothing to do, 1 anything
else, 2 usage.
"""

EPILOG = """\
examples:
  bookie-scanner repair --bookie-conf /opt/bookkeeper/conf/bk_server.conf --ledger 1234
  bookie-scanner repair --bookie-conf bk_server.conf --no-dry-run --state-dir /var/lib/bookie-scanner
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "repair", help="move a bookie's damaged fragments to other bookies (dry run by default)",
        description=DESCRIPTION, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bookie_options(parser)
    add_metadata_option(parser)
    parser.add_argument("--ledger", metavar="ID", type=values.ledger_id, action="append",
                        help="scan and repair only this ledger (repeatable; default: scan the whole bookie)")
    parser.add_argument("--dry-run", action=argparse.BooleanOptionalAction, default=True,
                        help="check what would be moved, write nothing (default); --no-dry-run moves")
    parser.add_argument("--copy-rate", metavar="BYTES_PER_SEC", type=values.rate, default=20_000_000,
                        help="copy at most this many bytes per second (default: 20000000; 0 = unlimited)")
    parser.add_argument("--timeout", metavar="SECONDS", type=float, default=10.0,
                        help="give a bookie this long to answer one request (default: 10)")
    parser.add_argument("--state-dir", metavar="DIR", type=Path,
                        help="record every attempt in DIR/repairs.jsonl")
    add_placement_options(parser)
    add_format_option(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from scanner.bookie_protocol.transport import TransportRefused
    from scanner.checks.findings import merge_ranges
    from scanner.commands.scan import check_narrowing
    from scanner.envelope import envelope, write_document
    from scanner.errors import UsageError
    from scanner.metadata.store import MetadataUnavailable
    from scanner.metadata.zookeeper import ZooKeeperStore
    from scanner.repair.placement.settings import PlacementSettingsError
    from scanner.repair.planner import damage_by_ledger
    from scanner.repair.repair_journal import RepairJournal
    from scanner.repair.move_outcome import Outcome
    from scanner.repair.rereplicate import Rereplicator
    from scanner.scan.on_demand import scan_bookie
    from scanner.storage.bookie import open_bookie

    if not args.timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    journal = None
    if args.state_dir is not None:
        try:
            args.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot use --state-dir {args.state_dir}: {exc.strerror or exc}") from None
        journal = RepairJournal(args.state_dir)
    layout = bookie_layout(args)
    store = metadata_store(args, layout)
    try:
        if not isinstance(store, ZooKeeperStore):
            raise UsageError("repair needs the live metadata (zk://...): a dump may name a deleted ledger or an "
                             "old ensemble, and moving a fragment changes the ledger's metadata")
        with tempfile.TemporaryDirectory(prefix="bookie-scanner-") as work_dir, \
                open_bookie(layout, work_dir=work_dir) as storage:
            check_narrowing(storage, store, args.ledger, None)
            findings = scan_bookie(storage, store, layout.bookie_id, layout.storage, ledgers=args.ledger).findings
        try:
            mover = Rereplicator(store, layout.bookie_id, bytes_per_second=args.copy_rate, timeout=args.timeout,
                                 conf=layout.conf, placement=placement_settings(args))
        except TransportRefused as exc:
            raise UsageError(exc.reason) from None
        except PlacementSettingsError as exc:
            raise UsageError(str(exc)) from None
        attempts = []  # (attempt, the damaged entries it was about)
        for ledger_id, damage in sorted(damage_by_ledger(findings).items()):
            entries = merge_ranges([r for f in damage for r in f.entries])
            attempt = mover.rereplicate(ledger_id, entries, dry_run=args.dry_run)
            if journal is not None and not args.dry_run:
                journal.append(attempt_record(attempt, entries))
            attempts.append((attempt, entries))
    except MetadataUnavailable as exc:
        raise UsageError(f"metadata became unavailable: {exc}") from None
    finally:
        store.close()
    done = {Outcome.WOULD_MOVE if args.dry_run else Outcome.MOVED, Outcome.NOT_NEEDED}
    if args.format == "json":
        write_document(envelope("repair_report", {"bookie_id": layout.bookie_id, "dry_run": args.dry_run,
                                                  "attempts": [attempt_record(a, e) for a, e in attempts]}))
    else:
        sys.stdout.write(_text(layout.bookie_id, args.dry_run, attempts))
    return 0 if all(a.outcome in done for a, _ in attempts) else 1


def attempt_record(attempt, damaged) -> dict:
    """An attempt as the journal and the report keep it, with the damaged entries it was about."""
    return {**attempt.to_json(), "damaged_entries": [list(r) for r in damaged]}


def _text(bookie_id: str, dry_run: bool, attempts) -> str:
    from scanner.checks.findings import count_in_ranges

    mode = "dry run: nothing written" if dry_run else "moving damaged fragments"
    lines = [f"repair of bookie {bookie_id} ({mode})"]
    for a, damaged in attempts:
        shown = ", ".join(str(x) if x == y else f"{x}-{y}" for x, y in damaged[:8])
        more = "" if len(damaged) <= 8 else f", ... ({count_in_ranges(damaged)} in all)"
        lines.append(f"  ledger {a.ledger_id} (damaged entries {shown}{more}): {a.outcome.value}: {a.detail}")
    if not attempts:
        lines.append("  nothing to repair: no lost, corrupt or missing entries")
    return "\n".join(lines) + "\n"
