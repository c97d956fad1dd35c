"""``bookie-scanner metadata``: dump the cluster's metadata to a file, or show one ledger's."""

from __future__ import annotations

import datetime
import os
import sys

from pathlib import Path

from scanner.commands import values
from scanner.commands.bookie_args import add_metadata_option, metadata_store, uri_from_bookie_conf
from scanner.commands.output import add_format_option, add_show_secrets_option, emit
from scanner.errors import UsageError

EXIT_NOT_FOUND = 1


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "metadata",
        help="dump ledger metadata to a file, or show one ledger's",
        description="Read the cluster's ledger metadata (read-only).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    dump = actions.add_parser(
        "dump",
        help="write the tree under the ledgers root as a dump file (usable as --metadata file:PATH)",
        description="Write every znode under the ledgers root as a JSON dump "
        '([{"path", "data_b64", "ephemeral", "mzxid", "version", "ctime"}]).',
    )
    add_metadata_option(dump)
    _add_bookie_conf_option(dump)
    dump.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    dump.set_defaults(func=_dump)

    show = actions.add_parser(
        "show",
        help="a ledger's decoded metadata",
        description="State, ensembles, quorums, digest type and custom metadata of one ledger. "
        "Its password and master key are write credentials and are not shown unless --show-secrets.",
    )
    add_metadata_option(show)
    _add_bookie_conf_option(show)
    show.add_argument("--ledger", metavar="ID", type=values.ledger_id, required=True, help="the ledger id (decimal)")
    add_format_option(show)
    add_show_secrets_option(show)
    show.set_defaults(func=show_ledger)


def _dump(args) -> int:
    from scanner.metadata.snapshot import write_dump
    from scanner.metadata.store import MetadataUnavailable

    store = _store(args)
    try:
        if args.output is None:
            count = write_dump(store, sys.stdout)
        else:
            try:
                # The dump holds every ledger's password (the data of its znode): private to its writer.
                with os.fdopen(os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w",
                               encoding="utf-8") as out:
                    count = write_dump(store, out)
            except OSError as exc:
                raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    except MetadataUnavailable as exc:
        raise UsageError(f"metadata became unavailable during the dump: {exc}") from None
    finally:
        store.close()
    print(f"{count} znodes under {store.root}", file=sys.stderr)
    return 0


def show_ledger(args) -> int:
    """Print one ledger's metadata (args: metadata, ledger, format, show_secrets); used by `inspect ledger` too."""
    from scanner.metadata.ledger import MetadataFormatError
    from scanner.metadata.store import MetadataUnavailable

    store = _store(args)
    try:
        meta = store.ledger(args.ledger)
    except (MetadataUnavailable, MetadataFormatError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        store.close()
    if meta is None:
        print(f"ledger {args.ledger}: no such ledger under {store.root} (deleted, or never created)", file=sys.stderr)
        return EXIT_NOT_FOUND
    described = describe_ledger(meta, show_secrets=args.show_secrets)
    emit(args, "ledger_metadata", described, _as_text(described))
    return 0


def _add_bookie_conf_option(parser) -> None:
    parser.add_argument("--bookie-conf", metavar="FILE", type=Path,
                        help="take the metadata service from this bk_server.conf when --metadata is not given")


def _store(args):
    conf = getattr(args, "bookie_conf", None)
    if not args.metadata and conf is None:
        raise UsageError("say where the metadata is: --metadata zk://HOST:PORT/ledgers, --metadata file:DUMP.json "
                         "or --bookie-conf FILE (its metadataServiceUri)")
    if not args.metadata:
        args.metadata = uri_from_bookie_conf(conf)
    return metadata_store(args)


def describe_ledger(meta, show_secrets: bool = False) -> dict:
    """A JSON-ready description of a ledger's metadata; its password and master key only with ``show_secrets``."""
    from scanner.storage.entry import master_key

    described = {
        "ledger_id": meta.ledger_id,
        "metadata_format_version": meta.format_version,
        "state": meta.state.name,
        "last_entry_id": meta.last_entry_id,
        "length": meta.length,
        "ensemble_size": meta.ensemble_size,
        "write_quorum": meta.write_quorum,
        "ack_quorum": meta.ack_quorum,
        "digest_type": None if meta.digest_type is None else meta.digest_type.name,
        "master_key_hex": None if meta.password is None or not show_secrets else master_key(meta.password).hex(),
        "ctime": meta.ctime,
        "ctoken": meta.ctoken,
        "ensembles": [{"first_entry_id": first, "bookies": list(bookies)} for first, bookies in meta.segments],
        "custom_metadata": {key: _readable(value) for key, value in meta.custom_metadata},
    }
    if show_secrets:
        described["password"] = None if meta.password is None else _readable(meta.password)
    return described


def _timestamp(ms: int) -> str:
    try:
        when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    except (OverflowError, ValueError, OSError):
        return str(ms)  # not a plausible time; show the raw number
    return f"{when.isoformat(timespec='milliseconds')} ({ms})"


def _readable(value: bytes) -> str:
    return value.decode("utf-8", errors="backslashreplace")


def _as_text(d: dict) -> list[str]:
    lines = [
        f"ledger {d['ledger_id']} (metadata format V{d['metadata_format_version']})",
        f"state: {d['state']}" + (f", last entry {d['last_entry_id']}, length {d['length']}" if d["state"] == "CLOSED" else ""),
        f"ensemble size {d['ensemble_size']}, write quorum {d['write_quorum']}, ack quorum {d['ack_quorum']}",
        f"digest: {d['digest_type'] or 'none stored (no password)'}",
    ]
    if d["master_key_hex"] is not None:
        lines.append(f"master key: {d['master_key_hex']}")
    elif d["digest_type"] is not None:
        lines.append("password and master key: hidden (--show-secrets shows them)")
    if "password" in d:
        lines.append(f"password: {d['password']}")
    if d["ctime"] is not None:
        lines.append(f"created: {_timestamp(d['ctime'])}")
    if d["ctoken"] is not None:
        lines.append(f"ctoken: {d['ctoken']}")
    lines.append("ensembles:")
    lines += [f"  from entry {e['first_entry_id']}: {' '.join(e['bookies'])}" for e in d["ensembles"]]
    if d["custom_metadata"]:
        lines.append("custom metadata:")
        lines += [f"  {key} = {value}" for key, value in d["custom_metadata"].items()]
    return lines
