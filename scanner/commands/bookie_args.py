"""Command-line options that say which bookie to read and which metadata to read it against."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from scanner.errors import UsageError


def add_bookie_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the bookie (read-only)")
    group.add_argument("--bookie-conf", metavar="FILE", type=Path,
                       help="the bookie's bk_server.conf: ledger/index dirs, storage class, bookie id and "
                            "metadata service are taken from it")
    group.add_argument("--bookie-conf-from-env", action="store_true",
                       help="in a Pulsar bookie's pod, with the bookie container's environment: the bookie's settings "
                            "are what Pulsar's image makes of it (PULSAR_PREFIX_<key>, and <key> of the conf), over "
                            "--bookie-conf (the image's conf/bookkeeper.conf) or else Pulsar's defaults")
    group.add_argument("--ledger-dirs", metavar="DIR[,DIR]",
                       help="ledger directories (override ledgerDirectories), in the bookie's configured order")
    group.add_argument("--index-dirs", metavar="DIR[,DIR]", help="index directories (override indexDirectories)")
    group.add_argument("--storage", choices=("interleaved", "sorted", "db"),
                       help="ledger storage (override ledgerStorageClass)")
    group.add_argument("--bookie-id", metavar="ID",
                       help="this bookie's id as ensembles name it (default: the cookie's bookieHost)")
    group.add_argument("--bookie-home", metavar="DIR", type=Path,
                       help="resolve relative ledger/index dirs against DIR, the bookie's working directory "
                            "(Pulsar: its install dir, e.g. /pulsar; default: the current directory)")


def add_metadata_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metadata", metavar="URI",
        help="ledger metadata: zk://HOST:PORT[,HOST:PORT]/ROOT, BookKeeper's zk+hierarchical://HOST:PORT;HOST:PORT/ROOT, "
             "Pulsar's metadata-store:zk:HOST:PORT[/CHROOT] (ledgers under CHROOT/ledgers), "
             "or file:PATH for a dump written by 'bookie-scanner metadata dump' "
             "(default: the conf's metadataServiceUri, or zkServers + zkLedgersRootPath)")


def _dirs(value: str | None) -> tuple[Path, ...] | None:
    return None if value is None else tuple(Path(d) for d in value.split(",") if d)


def bookie_layout(args):
    """The bookie's layout from --bookie-conf and the overrides; a UsageError says what to fix."""
    from scanner.storage.layout import LayoutError, discover_layout

    if args.bookie_conf is None and args.ledger_dirs is None and not args.bookie_conf_from_env:
        raise UsageError("say which bookie: --bookie-conf FILE (its bk_server.conf), --bookie-conf-from-env "
                         "(in a Pulsar bookie's pod) or --ledger-dirs DIR[,DIR]")
    try:
        return discover_layout(args.bookie_conf, ledger_dirs=_dirs(args.ledger_dirs), index_dirs=_dirs(args.index_dirs),
                               storage=args.storage, bookie_id=args.bookie_id, home=args.bookie_home,
                               environment=os.environ if args.bookie_conf_from_env else None)
    except LayoutError as exc:
        raise UsageError(str(exc)) from None


def metadata_uri(args, layout=None) -> str:
    """The metadata URI --metadata names, or the bookie's conf; a UsageError when there is none."""
    from scanner.metadata.uri import metadata_uri_from_conf

    uri = args.metadata or (metadata_uri_from_conf(layout.conf) if layout is not None else None)
    if not uri:
        raise UsageError("no metadata service: pass --metadata zk://HOST:PORT/ledgers or --metadata file:DUMP.json")
    return uri


def uri_from_bookie_conf(path) -> str:
    """The metadata service a bk_server.conf names (metadataServiceUri, or zkServers + zkLedgersRootPath)."""
    from scanner.metadata.uri import metadata_uri_from_conf
    from scanner.storage.layout import parse_properties

    try:
        conf = parse_properties(Path(path).read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    uri = metadata_uri_from_conf(conf)
    if not uri:
        raise UsageError(f"{path} names no metadata service (metadataServiceUri, or zkServers)")
    return uri


def metadata_store(args, layout=None):
    """The metadata store named by --metadata, or by the bookie's conf; a UsageError says what to fix."""
    from scanner.metadata.ledger_paths import LayoutError
    from scanner.metadata.snapshot import DumpFormatError
    from scanner.metadata.store import MetadataUnavailable
    from scanner.metadata.uri import open_metadata

    uri = metadata_uri(args, layout)
    try:
        return open_metadata(uri)
    except (MetadataUnavailable, DumpFormatError, LayoutError) as exc:
        raise UsageError(str(exc)) from None
