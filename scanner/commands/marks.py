"""``bookie-scanner marks``: the cluster's under-replicated ledgers, like ``bookkeeper shell listunderreplicated``."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from scanner.commands.bookie_args import add_metadata_option
from scanner.commands.output import add_format_option, emit
from scanner.errors import UsageError

DESCRIPTION = """\
List every ledger marked under-replicated in ZooKeeper (read-only): the bookies whose copies the
mark names, when it was marked and how long ago, and which ReplicationWorker holds its lock.
Also says whether auto-recovery is disabled (underreplication/disable).

With --config (the agent's TOML config) it also lists the damaged ledgers that agent follows, with
whether their mark is there now: BookKeeper's ReplicationWorker reads without verifying digests, so it
can clear a mark with a readable corrupt copy still in place, and the agent files it again; between
the two this list shows no mark for a ledger the agent still repairs, and this says so.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser("marks", help="list under-replicated ledgers (read-only)", description=DESCRIPTION,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_metadata_option(parser)
    parser.add_argument("--bookie-conf", metavar="FILE", type=Path,
                        help="take the metadata service from this bk_server.conf when --metadata is not given")
    parser.add_argument("--config", metavar="FILE", type=Path,
                        help="an agent's TOML config: also list the damaged ledgers it follows (and take the metadata "
                             "service from it when neither --metadata nor --bookie-conf is given)")
    add_format_option(parser)
    parser.set_defaults(func=run)


def run(args) -> int:
    from scanner.metadata.store import MetadataUnavailable
    from scanner.repair.after_scan import marks_for

    agent = None if args.config is None else _agent_config(args.config)
    store = _open_store(args, agent)
    try:
        marks = marks_for(store)
        enabled = marks.replication_enabled()
        listed = marks.list_marks()
    except MetadataUnavailable as exc:
        raise UsageError(str(exc)) from None
    finally:
        store.close()
    document = {"replication_enabled": enabled, "count": len(listed), "ledgers": [m.to_json() for m in listed]}
    lines = _text(enabled, listed)
    if agent is not None:
        following = _agent_following(agent, {m.ledger_id for m in listed})
        document["agent_following"] = following
        lines += _following_text(following)
    emit(args, "marks", document, lines)
    return 0


def _agent_config(path: Path):
    from scanner.commands.run import load

    return load(path)


def _agent_following(config, marked: set[int]) -> list[dict]:
    """The damaged ledgers the agent of ``config`` follows (its saved follow-up state, read only)."""
    from scanner.repair.followup_state import STATE_FILE, TrackedMark
    from scanner.statefile import DamagedStateFile, read_json

    path = config.state_dir / STATE_FILE
    try:
        state = read_json(path) or {}
        records = [TrackedMark.from_json(obj) for obj in state.get("marks", [])]
    except (DamagedStateFile, OSError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"cannot read the agent's follow-up state {path}: {exc}") from None
    return [{"ledger_id": r.ledger_id, "bookie_id": r.bookie_id, "stage": r.stage.value,
             "marked_now": r.ledger_id in marked, "marks_cleared": r.marks_cleared}
            for r in sorted(records, key=lambda r: r.ledger_id)]


def _following_text(following: list[dict]) -> list[str]:
    lines = [f"the agent follows {len(following)} damaged ledger{'s' if len(following) != 1 else ''} of its bookie"]
    for row in following:
        line = f"ledger {row['ledger_id']}  {row['stage']}  {'marked' if row['marked_now'] else 'NOT marked now'}"
        if row["marks_cleared"]:
            line += (f"; a ReplicationWorker cleared its mark {row['marks_cleared']} time(s) with the damage still "
                     f"on {row['bookie_id']}, and the agent filed it again")
        lines.append(line)
    return lines


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


def _open_store(args, agent):
    from scanner.commands.bookie_args import uri_from_bookie_conf
    from scanner.metadata.store import MetadataUnavailable
    from scanner.metadata.uri import open_metadata

    uri = args.metadata
    if uri is None and args.bookie_conf is not None:
        uri = uri_from_bookie_conf(args.bookie_conf)
    elif uri is None and agent is not None:
        uri = agent.metadata_uri or uri_from_bookie_conf(agent.bookie_conf)
    if not uri:
        raise UsageError("no metadata service: pass --metadata zk://HOST:PORT/ledgers, --bookie-conf FILE or "
                         "--config FILE")
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
