"""Command-line options for racks and placement, shared by ``audit`` (what a violation is) and ``repair`` (where a
moved fragment goes), so both judge a write set by the same racks and the same rule."""

from __future__ import annotations

import argparse
from pathlib import Path

from scanner.errors import UsageError


def add_rack_options(group) -> None:
    """Where racks come from (one of three) and the rule a write set's racks must meet."""
    group.add_argument("--racks", metavar="FILE", type=Path,
                       help="bookie racks, one 'BOOKIE_ID RACK' per line (# comments)")
    group.add_argument("--rack-script", metavar="PATH", type=Path,
                       help="BookKeeper's networkTopologyScriptFileName: run with bookie IP addresses, prints "
                            "one rack per address")
    group.add_argument("--pulsar-racks", action="store_true",
                       help="racks from Pulsar's /bookies JSON beside the ledgers root (zk:// metadata)")
    group.add_argument("--min-racks", metavar="N", type=int, default=None,
                       help="racks each write set must span, capped at the write quorum (default: 2, "
                            "BookKeeper's minNumRacksPerWriteQuorum)")
    group.add_argument("--enforce-min-racks", action=argparse.BooleanOptionalAction, default=None,
                       help="BookKeeper's enforceMinNumRacksPerWriteQuorum: a write set with a bookie in the "
                            "default rack breaks the rule, and a move that cannot keep it moves nothing")


def add_placement_options(parser: argparse.ArgumentParser) -> None:
    """The placement policy of a move, over the keys of the bookie's bk_server.conf."""
    group = parser.add_argument_group(
        "placement (default: as the bookie's bk_server.conf says: ensemblePlacementPolicy, "
        "networkTopologyScriptFileName, minNumRacksPerWriteQuorum, enforceMinNumRacksPerWriteQuorum)")
    group.add_argument("--placement", choices=("default", "rackaware"),
                       help="default: any writable bookie outside the ensemble; rackaware: as BookKeeper's "
                            "RackawareEnsemblePlacementPolicy replaces a bookie")
    add_rack_options(group)


def placement_settings(args):
    """The PlacementSettings the options give (None where an option was not given)."""
    from scanner.repair.placement.settings import PlacementSettings

    if args.min_racks is not None and args.min_racks < 1:
        raise UsageError(f"--min-racks must be at least 1, got {args.min_racks}")
    return PlacementSettings(placement=getattr(args, "placement", None), racks_file=args.racks,
                             rack_script=args.rack_script, pulsar_racks=args.pulsar_racks or None,
                             min_racks=args.min_racks, enforce_min_racks=args.enforce_min_racks)


def placement_policy(args, conf, store, host_of=None):
    """The policy the options (over ``conf``, a bookie's bk_server.conf) ask for; a UsageError says what to fix.

    ``host_of``: the host of a bookie's address, as its registration gives it (default: the id's own host)."""
    from scanner.repair.placement.settings import PlacementSettingsError, build_policy
    from scanner.repair.placement.sources import legacy_host

    try:
        return build_policy(placement_settings(args), conf, store, host_of or legacy_host)
    except PlacementSettingsError as exc:
        raise UsageError(str(exc)) from None


def audit_racks(args, store) -> dict[str, str] | None:
    """The racks of the registered bookies the rack options name (None: no rack check); a UsageError on failure."""
    from scanner.repair.placement.policy import RACKS_FILE
    from scanner.repair.placement.racks import RackSourceError

    if args.racks is None and args.rack_script is None and not args.pulsar_racks:
        return None
    policy = placement_policy(args, {}, store)
    if store is None and policy.racks != RACKS_FILE:
        raise UsageError("--rack-script and --pulsar-racks need the live metadata (zk://...): they place the "
                         "registered bookies")
    try:
        if store is None:
            return dict(policy.topology(()).racks)
        registered = store.bookies()
        return dict(policy.topology(registered.writable | registered.readonly).racks)
    except RackSourceError as exc:
        raise UsageError(str(exc)) from None
