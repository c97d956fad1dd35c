"""``bookie-scanner inspect``: look inside one thing — an entry log, an index file, a ledger's locations, its metadata."""

from __future__ import annotations

import argparse
from pathlib import Path

from scanner.commands import values
from scanner.commands.bookie_args import add_bookie_options, add_metadata_option, bookie_layout, metadata_store
from scanner.commands.output import add_format_option, add_show_secrets_option, emit
from scanner.errors import UsageError

DESCRIPTION = """\
Look inside one thing, read-only. Like 'bookkeeper shell readlog', but every record's digest is
checked against its ledger's digest type and password (from --metadata, or --digest/--password).
"""

EPILOG = """\
examples:
  bookie-scanner inspect entry-log /data/bk/ledgers/current/1a.log --metadata file:zk-dump.json
  bookie-scanner inspect index /data/bk/ledgers/current/0/5/5.idx
  bookie-scanner inspect locations --bookie-conf bk_server.conf --ledger 5
  bookie-scanner inspect ledger --metadata zk://zk1:2181/ledgers --ledger 5
"""

DIGESTS = ("CRC32", "CRC32C", "MAC", "DUMMY")


def register(subparsers) -> None:
    parser = subparsers.add_parser("inspect", help="look inside an entry log, an index file, a ledger",
                                   description=DESCRIPTION, epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    things = parser.add_subparsers(dest="thing", metavar="THING", required=True)

    log = things.add_parser(
        "entry-log", help="every record of an entry log with its digest verdict",
        description="Every record of one entry log (header, ledgers map, each record's ledger, entry, offset "
                    "and size) with its digest verdict: against the ledger's metadata (--metadata) or one "
                    "digest type for all (--digest). Exit status 1 when a record or the file is damaged.")
    log.add_argument("path", type=Path, help="an entry log file (<hex id>.log)")
    log.add_argument("--entry-log-id", type=values.entry_log_id, metavar="ID",
                     help="its id: 26, 0x1a or 1a.log (default: from the file name)")
    add_metadata_option(log)
    log.add_argument("--digest", choices=DIGESTS, help="verify every record with this digest type instead")
    log.add_argument("--password", default="", help="ledger password for --digest MAC (UTF-8)")
    add_format_option(log)
    log.set_defaults(func=_entry_log)

    index = things.add_parser(
        "index", help="an .idx file of Interleaved/Sorted storage: header and slots",
        description="The header (version, fenced, explicit LAC; the master key with --show-secrets) and every "
                    "filled slot (entry -> entry log and offset) of one .idx file. Exit status 1 when the file is "
                    "damaged.")
    index.add_argument("path", type=Path, help="an index file (<ledger id in hex>.idx)")
    add_format_option(index)
    add_show_secrets_option(index)
    index.set_defaults(func=_index)

    locations = things.add_parser(
        "locations", help="a ledger's index state and entry locations on a bookie (any storage, RocksDB included)",
        description="What the bookie's index holds for one ledger: its state (fenced; the master key with "
                    "--show-secrets) and where "
                    "each entry is (entry log, offset). Exit status 1 when the index lacks the ledger or "
                    "cannot be read.")
    add_bookie_options(locations)
    locations.add_argument("--ledger", type=values.ledger_id, required=True, metavar="ID", help="the ledger id")
    add_format_option(locations)
    add_show_secrets_option(locations)
    locations.set_defaults(func=_locations)

    ledger = things.add_parser(
        "ledger", help="a ledger's metadata (same as 'metadata show')",
        description="A ledger's decoded metadata: state, ensembles, quorums, digest type, custom metadata.")
    add_metadata_option(ledger)
    ledger.add_argument("--ledger", type=values.ledger_id, required=True, metavar="ID", help="the ledger id")
    add_format_option(ledger)
    add_show_secrets_option(ledger)
    ledger.set_defaults(func=_ledger)


def _entry_log(args) -> int:
    from scanner.storage.entry import DigestType, DigestVerifier
    from scanner.storage.entrylog import EntryLog, EntryLogError

    if not args.path.is_file():
        raise UsageError(f"{args.path}: no such file")
    log_id = args.entry_log_id
    if log_id is None:
        try:
            log_id = int(args.path.name.split(".")[0], 16)
        except ValueError:
            raise UsageError(f"{args.path}: not named <hex id>.log; pass --entry-log-id") from None
    if args.digest:
        fixed = DigestVerifier(DigestType.HMAC if args.digest == "MAC" else DigestType[args.digest],
                               args.password.encode())
        verifier_for = lambda ledger_id: fixed  # noqa: E731
    elif args.metadata:
        verifier_for = _metadata_verifiers(metadata_store(args))
    else:
        verifier_for = lambda ledger_id: None  # noqa: E731
    records = []
    try:
        entry_log = EntryLog(args.path, log_id)
    except EntryLogError as exc:
        raise UsageError(str(exc)) from None
    with entry_log:
        for record in entry_log.records():
            verifier = verifier_for(record.ledger_id)
            verdict = "unchecked" if verifier is None else ("ok" if verifier.verify(record.entry) else "DIGEST MISMATCH")
            records.append({"ledger_id": record.ledger_id, "entry_id": record.entry_id, "offset": record.pos,
                            "size": len(record.entry), "digest": verdict})
        header = entry_log.header
        ledgers_map = entry_log.ledgers_map()
        problems = [str(p) for p in entry_log.problems]
    obj = {"path": str(args.path), "entry_log_id": log_id,
           "header": None if header is None else {"version": header.version,
                                                  "ledgers_map_offset": header.ledgers_map_offset,
                                                  "ledgers_count": header.ledgers_count, "direct": header.direct},
           "records": records, "ledgers_map": ledgers_map and {str(k): v for k, v in sorted(ledgers_map.items())},
           "problems": problems}
    lines = [f"{args.path} (entry log {log_id})"]
    if header is None:
        lines.append("  no header yet (a preallocated or unflushed log)")
    else:
        lines.append(f"  header v{header.version}{' DirectEntryLogger' if header.direct else ''}, ledgers map at "
                     f"{header.ledgers_map_offset or 'none'}, {header.ledgers_count} ledgers")
    lines.append(f"  {'ledger':>12} {'entry':>8} {'offset':>10} {'size':>8}  digest")
    lines += [f"  {r['ledger_id']:>12} {r['entry_id']:>8} {r['offset']:>10} {r['size']:>8}  {r['digest']}" for r in records]
    if ledgers_map:
        lines.append("  ledgers map: " + ", ".join(f"{k}: {v} B" for k, v in sorted(ledgers_map.items())))
    lines += [f"  PROBLEM: {p}" for p in problems]
    emit(args, "inspect_entry_log", obj, lines)
    bad = problems or any(r["digest"] == "DIGEST MISMATCH" for r in records)
    return 1 if bad else 0


def _metadata_verifiers(store):
    from scanner.storage.entry import DigestVerifier

    cache: dict[int, object] = {}

    def verifier_for(ledger_id: int):
        if ledger_id not in cache:
            meta = store.ledger(ledger_id)
            cache[ledger_id] = (None if meta is None or meta.digest_type is None
                                else DigestVerifier(meta.digest_type, meta.password or b""))
        return cache[ledger_id]

    return verifier_for


def _state(state, show_secrets: bool) -> dict:
    return {"master_key": state.master_key.hex() if show_secrets else None, "fenced": state.fenced,
            "explicit_lac": None if state.explicit_lac is None else state.explicit_lac.hex(), "limbo": state.limbo}


def _key_text(master_key_hex: str | None) -> str:
    return "master key hidden (--show-secrets)" if master_key_hex is None else f"master key {master_key_hex}"


def _index(args) -> int:
    from scanner.storage.indexfile import IndexFile, IndexFileError

    try:
        with IndexFile(args.path) as index:
            slots = [{"entry_id": e, "entry_log": loc.entry_log_id, "offset": loc.pos} for e, loc in index.locations()]
            obj = {"path": str(args.path), "version": index.version, **_state(index.state, args.show_secrets), "entries": slots}
    except OSError as exc:
        raise UsageError(f"{args.path}: {exc.strerror or exc}") from None
    except IndexFileError as exc:
        emit(args, "inspect_index", {"path": str(args.path), "problem": str(exc)}, [f"PROBLEM: {exc}"])
        return 1
    lines = [f"{args.path}: header v{obj['version']}, fenced {obj['fenced']}, {_key_text(obj['master_key'])}, "
             f"explicit LAC {obj['explicit_lac'] or 'none'}",
             f"  {'entry':>8} {'entry log':>10} {'offset':>10}"]
    lines += [f"  {s['entry_id']:>8} {s['entry_log']:>10} {s['offset']:>10}" for s in slots]
    emit(args, "inspect_index", obj, lines)
    return 0


def _locations(args) -> int:
    import tempfile

    from scanner.storage.bookie import open_bookie
    from scanner.storage.dbstorage import DbIndexError
    from scanner.storage.indexfile import IndexFileError

    layout = bookie_layout(args)
    obj = {"bookie_id": layout.bookie_id, "storage": layout.storage, "ledger_id": args.ledger}
    head = f"ledger {args.ledger} on {layout.bookie_id} ({layout.storage}): "
    with tempfile.TemporaryDirectory(prefix="bookie-scanner-") as work_dir, open_bookie(layout, work_dir=work_dir) as storage:
        try:
            state = storage.ledger_index(args.ledger)
            slots = [{"entry_id": e, "entry_log": loc.entry_log_id, "offset": loc.pos}
                     for e, loc in storage.locations(args.ledger)]
        except (DbIndexError, IndexFileError) as exc:
            emit(args, "inspect_locations", {**obj, "index": None, "entries": [], "problem": str(exc)},
                 [head + f"the index cannot be read: {exc}"])
            return 1
    obj.update({"index": None if state is None else _state(state, args.show_secrets), "entries": slots, "problem": None})
    lines = [head + ("not in the index" if state is None
                     else f"fenced {state.fenced}, {_key_text(obj['index']['master_key'])}")]
    lines += [f"  entry {s['entry_id']:>8} -> entry log {s['entry_log']} offset {s['offset']}" for s in slots]
    emit(args, "inspect_locations", obj, lines)
    return 0 if state is not None else 1


def _ledger(args) -> int:
    from scanner.commands.metadata import show_ledger

    return show_ledger(args)
