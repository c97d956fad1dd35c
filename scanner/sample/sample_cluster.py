"""The embedded default: a small cluster's metadata dump plus one bookie's files, with injected faults.

``build_sample(root)`` writes, under ``root``:
  bookie/ledgers/current/...   an InterleavedLedgerStorage bookie (entry logs, .idx files, cookie)
  bk_server.conf               that bookie's configuration
  zk-dump.json                 the cluster's ZooKeeper tree under /ledgers
and returns what was injected, so tests can hold the scanner to it.
"""

from __future__ import annotations

import base64
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from scanner.metadata.ledger import LedgerMetadata, LedgerState, serialize_ledger_metadata
from scanner.metadata.ledger_paths import LedgerManager, layout_bytes, ledger_path
from scanner.sample.bookie_writer import EntryLogWriter, index_file_path, write_cookie, write_index_file, write_properties
from scanner.storage.entry import DigestType, build_entry, master_key
from scanner.storage.location import EntryLocation

SAMPLE_BOOKIE = "10.20.0.11:3181"
OTHER_BOOKIES = ("10.20.0.12:3181", "10.20.0.13:3181", "10.20.0.14:3181")
ROOT = "/ledgers"


@dataclass(frozen=True, slots=True)
class SampleLedger:
    ledger_id: int
    digest_type: DigestType
    ensemble_size: int
    write_quorum: int
    entries: int
    state: LedgerState = LedgerState.CLOSED
    password: bytes = b"sample-secret"
    # (first entry id, bookies) for every ensemble; the sample bookie is index 0 of the first one.
    segments: tuple[tuple[int, tuple[str, ...]], ...] = ()
    deleted: bool = False


@dataclass
class SampleCluster:
    root: Path
    bookie_conf: Path
    ledger_dir: Path
    dump: Path
    bookie_id: str = SAMPLE_BOOKIE
    # What was injected: category -> {ledger id: entry ids or None}
    faults: dict[str, dict[int, list[int] | None]] = field(default_factory=dict)


def _ensemble(size: int, first: str = SAMPLE_BOOKIE) -> tuple[str, ...]:
    others = [b for b in (SAMPLE_BOOKIE, *OTHER_BOOKIES) if b != first]
    return (first, *others[: size - 1])


def sample_ledgers() -> list[SampleLedger]:
    e3 = _ensemble(3)
    replaced = (OTHER_BOOKIES[2], *e3[1:])  # the sample bookie left the ensemble at entry 20
    return [
        SampleLedger(1, DigestType.CRC32C, 3, 2, 40, segments=((0, e3),)),
        SampleLedger(2, DigestType.CRC32, 3, 3, 30, segments=((0, e3),)),
        SampleLedger(3, DigestType.HMAC, 2, 2, 25, password=b"pulsar", segments=((0, _ensemble(2)),)),
        SampleLedger(4, DigestType.DUMMY, 3, 2, 36, segments=((0, e3), (20, replaced))),
        SampleLedger(5, DigestType.CRC32C, 3, 2, 50, segments=((0, e3),)),
        SampleLedger(6, DigestType.CRC32, 3, 3, 60, segments=((0, e3),)),
        SampleLedger(7, DigestType.CRC32C, 3, 2, 15, state=LedgerState.OPEN, segments=((0, e3),)),
        SampleLedger(9, DigestType.CRC32, 3, 2, 20, segments=((0, e3),), deleted=True),
        SampleLedger(123456789, DigestType.CRC32C, 3, 3, 12, segments=((0, e3),)),
    ]


def _metadata(ledger: SampleLedger) -> LedgerMetadata:
    closed = ledger.state is LedgerState.CLOSED
    return LedgerMetadata(
        ledger_id=ledger.ledger_id,
        format_version=3,
        ensemble_size=ledger.ensemble_size,
        write_quorum=ledger.write_quorum,
        ack_quorum=min(2, ledger.write_quorum),
        state=ledger.state,
        last_entry_id=ledger.entries - 1 if closed else -1,
        length=ledger.entries * 100 if closed else 0,
        segments=ledger.segments,
        digest_type=ledger.digest_type,
        password=ledger.password,
        ctime=1_700_000_000_000 + ledger.ledger_id,
        custom_metadata=(("application", b"bookie-scanner-demo"),),
        ctoken=0,
    )


def _entries_on_sample_bookie(meta: LedgerMetadata, count: int) -> list[int]:
    held = []
    fragments = meta.fragments()
    for entry_id in range(count):
        for fragment in fragments:
            end = fragment.last_entry_id if fragment.last_entry_id is not None else count - 1
            if fragment.first_entry_id <= entry_id <= end:
                index = fragment.bookie_index(SAMPLE_BOOKIE)
                if index is not None and fragment.holds(index, entry_id):
                    held.append(entry_id)
    return held


def build_sample(root: Path, seed: int = 24) -> SampleCluster:
    """Write the sample cluster under ``root`` (which must not exist yet or be empty)."""
    rng = random.Random(seed)
    root = Path(root)
    ledger_dir = root / "bookie" / "ledgers"
    current = ledger_dir / "current"
    current.mkdir(parents=True)
    journal = root / "bookie" / "journal"
    (journal / "current").mkdir(parents=True)
    write_cookie(current, SAMPLE_BOOKIE, str(journal), [str(ledger_dir)])
    write_cookie(journal / "current", SAMPLE_BOOKIE, str(journal), [str(ledger_dir)])

    ledgers = sample_ledgers()
    metas = {l.ledger_id: _metadata(l) for l in ledgers}
    logs = [EntryLogWriter(current, i) for i in range(3)]
    # Ledger 6 lives in log 1, which is cut short below; everything else is spread over logs 0 and 2.
    home = {6: 1}
    locations: dict[int, dict[int, EntryLocation]] = {}
    sizes: dict[tuple[int, int], int] = {}
    for ledger in ledgers:
        meta = metas[ledger.ledger_id]
        length = 0
        for entry_id in _entries_on_sample_bookie(meta, ledger.entries):
            payload = rng.randbytes(rng.randint(10, 400))
            length += len(payload)
            data = build_entry(ledger.ledger_id, entry_id, entry_id - 1, length, payload,
                               ledger.digest_type, ledger.password)
            writer = logs[home.get(ledger.ledger_id, 0 if entry_id % 2 == 0 else 2)]
            location = writer.append(ledger.ledger_id, data)
            locations.setdefault(ledger.ledger_id, {})[entry_id] = location
            sizes[(ledger.ledger_id, entry_id)] = len(data)
    for i, writer in enumerate(logs):
        writer.close(with_ledgers_map=(i < 2))  # log 2 was current at shutdown: no ledgers map

    faults: dict[str, dict[int, list[int] | None]] = {}
    for ledger in ledgers:
        slots = dict(locations.get(ledger.ledger_id, {}))
        if ledger.ledger_id == 5:
            for entry_id in (10, 11, 12):  # never stored: condition 2
                slots.pop(entry_id, None)
            faults.setdefault("missing_entry", {})[5] = [e for e in (10, 11, 12) if e in locations[5]]
        write_index_file(current, ledger.ledger_id, master_key(ledger.password), slots,
                         fenced=ledger.state is LedgerState.CLOSED)
    # Condition 1: the index of ledger 3 is lost, its records still sit in the entry logs.
    os.remove(index_file_path(current, 3))
    faults["missing_ledger"] = {3: sorted(locations[3])}
    # Condition 3: one payload byte of ledger 2, entry 7 flipped.
    flipped = locations[2][7]
    with open(current / f"{flipped.entry_log_id:x}.log", "r+b") as f:
        f.seek(flipped.pos + 32 + 8 + 5)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x5A]))
    faults["corrupt_entry"] = {2: [7]}
    # A disk error cut log 1 in the middle of ledger 6's entry 41: later records are lost.
    cut_at = locations[6][41].pos + 20
    os.truncate(current / "1.log", cut_at)
    faults["lost_entry"] = {6: [e for e, loc in sorted(locations[6].items()) if loc.pos + sizes[(6, e)] > cut_at]}
    faults["damaged_entry_log"] = {1: None}
    faults["orphan_ledger"] = {9: None}

    conf = write_properties(root / "bk_server.conf", {
        "bookiePort": SAMPLE_BOOKIE.rsplit(":", 1)[1],
        "advertisedAddress": SAMPLE_BOOKIE.rsplit(":", 1)[0],
        "journalDirectories": str(journal),
        "ledgerDirectories": str(ledger_dir),
        "ledgerStorageClass": "org.apache.bookkeeper.bookie.InterleavedLedgerStorage",
        "metadataServiceUri": "zk+hierarchical://127.0.0.1:2181/ledgers",
    })
    dump = root / "zk-dump.json"
    dump.write_text(json.dumps(_dump_nodes(ledgers, metas), indent=0))
    return SampleCluster(root, conf, ledger_dir, dump, faults=faults)


def _dump_nodes(ledgers: list[SampleLedger], metas: dict[int, LedgerMetadata]) -> list[dict]:
    nodes: dict[str, bytes] = {ROOT: b"", f"{ROOT}/LAYOUT": layout_bytes(LedgerManager.HIERARCHICAL),
                               f"{ROOT}/available": b"", f"{ROOT}/available/readonly": b""}
    for bookie in (SAMPLE_BOOKIE, *OTHER_BOOKIES):
        nodes[f"{ROOT}/available/{bookie}"] = b""
    for ledger in ledgers:
        if ledger.deleted:
            continue
        path = ledger_path(LedgerManager.HIERARCHICAL, ROOT, ledger.ledger_id)
        parent = path.rsplit("/", 1)[0]
        while parent != ROOT and parent not in nodes:
            nodes[parent] = b""
            parent = parent.rsplit("/", 1)[0]
        nodes[path] = serialize_ledger_metadata(metas[ledger.ledger_id])
    return [
        {"path": path, "data_b64": base64.b64encode(data).decode(), "ephemeral": "/available/" in path and not path.endswith("readonly"),
         "mzxid": i + 1, "version": 0}
        for i, (path, data) in enumerate(sorted(nodes.items()))
    ]
