"""``bookie-scanner marks``: the cluster's under-replicated ledgers, like ``bookkeeper shell listunderreplicated``."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from scanner.cli import UsageError
from scanner.commands.bookie_args import add_metadata_option
from scanner.commands.output import add_format_option, emit

DESCRIPTION = """\
List every ledger marked under-replicated in ZooKeeper (read-only): the bookies whose copies the
mark names, when it was marked and how long ago, and which ReplicationWorker holds its lock.
Also says whether auto-recovery is disabled (underreplication/disable).
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser("marks", help="list under-replicated ledgers (read-only)", description=DESCRIPTION,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_metadata_option(parser)
    parser.add_argument("--bookie-conf", metavar="FILE", type=Path,
                        help="take the metadata service from this bk_server.conf when --metadata is not given")
    add_format_option(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from scanner.metadata.store import MetadataUnavailable
    from scanner.repair.after_scan import marks_for

    store = _open_store(args)
    try:
        marks = marks_for(store)
        enabled = marks.replication_enabled()
        listed = marks.list_marks()
    except MetadataUnavailable as exc:
        raise UsageError(str(exc)) from None
    finally:
        store.close()
    document = {"replication_enabled": enabled, "count": len(listed), "ledgers": [m.to_json() for m in listed]}
    emit(args, "marks", document, _text(enabled, listed))
    return 0


def _text(enabled: bool, listed) -> list[str]:
    lines = []
    if not enabled:
        lines.append("auto-recovery is DISABLED (underreplication/disable exists): workers are not re-replicating")
    for mark in listed:
        if mark.problem is not None:
            lines.append(f"ledger {mark.ledger_id}  UNREADABLE MARK: {mark.problem}")
            continue
        when = "-" if mark.ctime is None else (
            datetime.datetime.fromtimestamp(mark.ctime / 1000, datetime.timezone.utc).isoformat(timespec="seconds")
            + f" ({_age(mark.age_ms)} ago)")
        lines.append(f"ledger {mark.ledger_id}  replicas {','.join(mark.replicas) or '-'}  marked {when}  "
                     f"lock {mark.lock_holder if mark.lock_holder is not None else '-'}")
    lines.append(f"{len(listed)} under-replicated ledger{'s' if len(listed) != 1 else ''}")
    return lines


def _open_store(args):
    from scanner.metadata.store import MetadataUnavailable
    from scanner.metadata.uri import metadata_uri_from_conf, open_metadata
    from scanner.storage.layout import parse_properties

    uri = args.metadata
    if uri is None and args.bookie_conf is not None:
        try:
            conf = parse_properties(args.bookie_conf.read_text(encoding="utf-8", errors="replace"))
        except OSError as exc:
            raise UsageError(f"cannot read {args.bookie_conf}: {exc.strerror or exc}") from None
        uri = metadata_uri_from_conf(conf)
    if not uri:
        raise UsageError("no metadata service: pass --metadata zk://HOST:PORT/ledgers or --bookie-conf FILE")
    try:
        return open_metadata(uri)
    except MetadataUnavailable as exc:
        raise UsageError(str(exc)) from None


def _age(ms: int) -> str:
    seconds = ms // 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
