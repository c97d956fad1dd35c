"""Generates a bookie of production shape and its cluster's metadata dump, for the scale benchmark.

``generate(Shape(...), directory)`` writes, under ``directory`` (the benchmark's own scratch space,
never a real bookie):

  bookie/ledgers/current/      entry logs, and the index: ``.idx`` files (InterleavedLedgerStorage)
                               or the ``ledgers`` and ``locations`` RocksDBs (DbLedgerStorage); cookie
  bookie/journal/current/      an empty journal dir with its cookie
  bk_server.conf               the bookie's configuration
  zk-dump.json                 the ZooKeeper tree under /ledgers, one znode per line

Every ledger is CLOSED, ensemble 3 / write quorum 2 with this bookie in every ensemble, CRC32C
digests except a few CRC32, MAC and DUMMY ledgers. Entries interleave in the logs as concurrent
writers leave them: in the "groups" order a group of ledgers at a time, so a ledger spans
neighbouring logs; in the "round-robin" order every ledger at once (entry 0 of each, then entry 1
of each, ...), so a ledger of n entries has one in each of n logs far apart, and every log holds
a little of very many ledgers. The last log was current at shutdown: it has no ledgers map. The
bookie is clean: a correct scan finds nothing.
"""

from __future__ import annotations

import itertools
import os
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from scanner.metadata.ledger import LedgerMetadata, LedgerState, serialize_ledger_metadata
from scanner.metadata.ledger_paths import LedgerManager, layout_bytes, ledger_path
from scanner.metadata.snapshot import write_dump_nodes
from scanner.metadata.store import ZNode
from scanner.sample.bookie_writer import (
    LOG_HEADER_SIZE,
    entry_log_header,
    ledgers_map,
    write_cookie,
    write_index_slots,
    write_properties,
)
from scanner.storage.dbstorage import LEDGER_KEY, LEDGERS_DB, LOCATION_KEY, LOCATION_VALUE, LOCATIONS_DB
from scanner.storage.entry import DigestType, build_entry, master_key
from scanner.storage.location import EntryLocation
from scanner.storage.proto.db_ledger_storage_pb2 import LedgerData

BOOKIE = "10.30.0.1:3181"
OTHER_BOOKIES = ("10.30.0.2:3181", "10.30.0.3:3181")
ROOT = "/ledgers"
ENSEMBLE, WRITE_QUORUM = 3, 2
PASSWORD = b"bench-scale"
CTIME = 1_700_000_000_000
STORAGE_CLASSES = {
    "interleaved": "org.apache.bookkeeper.bookie.InterleavedLedgerStorage",
    "db": "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
}
# one ledger in a hundred of each of these; the rest CRC32C
RARE_DIGESTS = {1: DigestType.CRC32, 2: DigestType.HMAC, 3: DigestType.DUMMY}
WRITE_BUFFER = 8 << 20
DB_BATCH = 200_000
COMPLETE_MARK = "generated"
LEDGER_CURRENT = Path("bookie", "ledgers", "current")
ORDERS = ("groups", "round-robin")


@dataclass(frozen=True)
class Shape:
    storage: str  # "interleaved" or "db"
    ledgers: int
    entry_logs: int
    entry_size: int  # payload bytes
    entries_per_ledger: int  # entries of each ledger stored on this bookie
    order: str = "groups"  # one of ORDERS: how the ledgers' entries interleave in the logs

    @property
    def name(self) -> str:
        name = f"{self.storage}-L{self.ledgers}-N{self.entry_logs}-S{self.entry_size}-E{self.entries_per_ledger}"
        return name if self.order == "groups" else f"{name}-{self.order}"

    @property
    def entries(self) -> int:
        return self.ledgers * self.entries_per_ledger


@dataclass(frozen=True)
class GeneratedBookie:
    directory: Path
    bookie_conf: Path
    dump: Path
    entry_logs: tuple[Path, ...]

    def index_files(self) -> Iterator[str]:
        """The .idx files, or the RocksDB files, one at a time (a million of them at the largest shape)."""
        current = self.directory / LEDGER_CURRENT
        for top, _, files in os.walk(current):
            if top != str(current):
                yield from (os.path.join(top, name) for name in files)


def generated(directory: Path) -> GeneratedBookie:
    """What ``generate`` wrote into ``directory``."""
    logs = tuple(sorted((directory / LEDGER_CURRENT).glob("*.log"), key=lambda p: int(p.stem, 16)))
    return GeneratedBookie(directory, directory / "bk_server.conf", directory / "zk-dump.json", logs)


def is_generated(directory: Path) -> bool:
    return (directory / COMPLETE_MARK).is_file()


def generate(shape: Shape, directory: Path) -> GeneratedBookie:
    """Write the bookie, its conf and the dump into ``directory`` (created; must not hold a bookie yet)."""
    current = directory / LEDGER_CURRENT
    ledger_dir = current.parent
    journal = directory / "bookie" / "journal"
    current.mkdir(parents=True)
    (journal / "current").mkdir(parents=True)
    for cookie_dir in (current, journal / "current"):
        write_cookie(cookie_dir, BOOKIE, str(journal), [str(ledger_dir)])
    if shape.order not in ORDERS:
        raise ValueError(f"order {shape.order!r}: one of {', '.join(ORDERS)}")
    index = _DbIndex(current) if shape.storage == "db" else _IdxIndex(current, shape)
    try:
        _write_entry_logs(shape, current, index)
    finally:
        index.close()
    write_properties(directory / "bk_server.conf", {
        "bookiePort": BOOKIE.rsplit(":", 1)[1],
        "advertisedAddress": BOOKIE.rsplit(":", 1)[0],
        "journalDirectories": str(journal),
        "ledgerDirectories": str(ledger_dir),
        "ledgerStorageClass": STORAGE_CLASSES[shape.storage],
        "metadataServiceUri": f"zk+hierarchical://127.0.0.1:2181{ROOT}",
    })
    write_metadata_dump(shape.ledgers, shape.entries_per_ledger, shape.entry_size, directory / "zk-dump.json")
    (directory / COMPLETE_MARK).write_text(f"{shape}\n")
    return generated(directory)


def ledger_ids(ledgers: int) -> range:
    return range(1, ledgers + 1)


def digest_type(ledger_id: int) -> DigestType:
    return RARE_DIGESTS.get(ledger_id % 100, DigestType.CRC32C)


def bookie_index(ledger_id: int) -> int:
    # index 0 or 1: both hold entry 0 with write quorum 2 of 3, so even a one-entry ledger is here
    return ledger_id % 2


def held_entries(ledger_id: int, count: int) -> list[int]:
    """The first ``count`` entry ids whose write set holds this bookie."""
    index = bookie_index(ledger_id)
    held = (e for e in itertools.count() if (index - e) % ENSEMBLE < WRITE_QUORUM)
    return list(itertools.islice(held, count))


def _record_order(shape: Shape) -> Iterator[tuple[int, int, int]]:
    """(ledger id, entry id, which of the ledger's entries here it is) in write order: groups of concurrent
    ledgers, each group spanning about two logs, or all the ledgers at once (round-robin)."""
    ids = ledger_ids(shape.ledgers)
    group = len(ids) if shape.order == "round-robin" else max(1, -(-2 * shape.ledgers // shape.entry_logs))
    held = [held_entries(index, shape.entries_per_ledger) for index in range(WRITE_QUORUM)]
    for start in range(0, len(ids), group):
        members = ids[start : start + group]
        for n in range(shape.entries_per_ledger):
            for ledger_id in members:
                yield ledger_id, held[bookie_index(ledger_id)][n], n


class _IdxIndex:
    """Writes each ledger's ``.idx`` file once its last entry is placed; the locations wait in one flat column
    (a ledger's last entry comes only at the end of a round-robin bookie: a dict per ledger would not fit)."""

    def __init__(self, current: Path, shape: Shape):
        self.current = current
        self.key = master_key(PASSWORD)
        self.per_ledger = shape.entries_per_ledger
        self.held = [held_entries(index, self.per_ledger) for index in range(WRITE_QUORUM)]
        self.locations = array("Q", bytes(8 * shape.entries))

    def add(self, ledger_id: int, entry_id: int, location: int, nth: int) -> None:
        at = (ledger_id - 1) * self.per_ledger
        self.locations[at + nth] = location
        if nth == self.per_ledger - 1:
            write_index_slots(self.current, ledger_id, self.key,
                              dict(zip(self.held[bookie_index(ledger_id)], self.locations[at : at + self.per_ledger])))

    def close(self) -> None:
        """Nothing is held open: each ``.idx`` file is written whole when its ledger's last entry is placed."""


class _DbIndex:
    """Fills DbLedgerStorage's ``ledgers`` and ``locations`` RocksDBs in big write batches."""

    def __init__(self, current: Path):
        options = Options(raw_mode=True)
        self.ledgers = Rdict(str(current / LEDGERS_DB), options=options)
        self.locations = Rdict(str(current / LOCATIONS_DB), options=options)
        self.ledger_value = LedgerData(exists=True, fenced=False, masterKey=master_key(PASSWORD)).SerializeToString()
        self.ledger_batch = WriteBatch(raw_mode=True)
        self.location_batch = WriteBatch(raw_mode=True)
        self.pending = 0

    def add(self, ledger_id: int, entry_id: int, location: int, nth: int) -> None:
        self.location_batch.put(LOCATION_KEY.pack(ledger_id, entry_id), LOCATION_VALUE.pack(location))
        if entry_id == 0:
            self.ledger_batch.put(LEDGER_KEY.pack(ledger_id), self.ledger_value)
        self.pending += 1
        if self.pending >= DB_BATCH:
            self._flush()

    def _flush(self) -> None:
        self.ledgers.write(self.ledger_batch)
        self.locations.write(self.location_batch)
        self.ledger_batch = WriteBatch(raw_mode=True)
        self.location_batch = WriteBatch(raw_mode=True)
        self.pending = 0

    def close(self) -> None:
        self._flush()
        for db in (self.ledgers, self.locations):
            db.flush()
            db.close()


def _write_entry_logs(shape: Shape, current: Path, index) -> None:
    per_log = -(-shape.entries // shape.entry_logs)
    payload = os.urandom(shape.entry_size)
    order = _record_order(shape)
    for log_id in range(shape.entry_logs):
        path = current / f"{log_id:x}.log"
        ledger_bytes: dict[int, int] = {}
        with open(path, "wb") as out:
            out.write(entry_log_header())
            position, pieces, buffered = LOG_HEADER_SIZE, [], 0
            for ledger_id, entry_id, nth in itertools.islice(order, per_log):
                entry = build_entry(ledger_id, entry_id, entry_id - 1, (entry_id + 1) * shape.entry_size,
                                    payload, digest_type(ledger_id), PASSWORD)
                pieces.append(struct.pack(">i", len(entry)))
                pieces.append(entry)
                index.add(ledger_id, entry_id, EntryLocation(log_id, position + 4).encode(), nth)
                position += 4 + len(entry)
                buffered += 4 + len(entry)
                ledger_bytes[ledger_id] = ledger_bytes.get(ledger_id, 0) + 4 + len(entry)
                if buffered >= WRITE_BUFFER:
                    out.write(b"".join(pieces))
                    pieces, buffered = [], 0
            out.write(b"".join(pieces))
            if log_id < shape.entry_logs - 1 and ledger_bytes:  # the last log was current at shutdown
                out.write(ledgers_map(ledger_bytes))
                out.seek(0)
                out.write(entry_log_header(position, len(ledger_bytes)))


def write_metadata_dump(ledgers: int, entries_per_ledger: int, entry_size: int, path: Path) -> int:
    """The ZooKeeper tree of the cluster (hierarchical manager), in the dump format; returns the znode count."""
    with open(path, "w", buffering=WRITE_BUFFER) as out:
        return write_dump_nodes(cluster_nodes(ledgers, entries_per_ledger, entry_size), out)


def cluster_nodes(ledgers: int, entries_per_ledger: int, entry_size: int) -> Iterator[ZNode]:
    zxid = itertools.count(1)

    def node(path: str, data: bytes | None = b"", ephemeral: bool = False) -> ZNode:
        return ZNode(path, data, ephemeral, next(zxid), 0, CTIME)

    yield node(ROOT)
    yield node(f"{ROOT}/LAYOUT", layout_bytes(LedgerManager.HIERARCHICAL))
    yield node(f"{ROOT}/available")
    for bookie in (BOOKIE, *OTHER_BOOKIES):
        yield node(f"{ROOT}/available/{bookie}", ephemeral=True)
    yield node(f"{ROOT}/available/readonly")
    serialized: dict[tuple[int, DigestType, int], bytes] = {}  # the bytes hold no ledger id: few variants
    parents: set[str] = set()
    for ledger_id in ledger_ids(ledgers):
        path = ledger_path(LedgerManager.HIERARCHICAL, ROOT, ledger_id)
        for parent in _new_parents(path, parents):
            yield node(parent)
        last = held_entries(ledger_id, entries_per_ledger)[-1]
        variant = (bookie_index(ledger_id), digest_type(ledger_id), last)
        if variant not in serialized:
            serialized[variant] = serialize_ledger_metadata(_metadata(ledger_id, last, entry_size))
        yield node(path, serialized[variant])


def _new_parents(path: str, known: set[str]) -> list[str]:
    parents = []
    parent = path.rsplit("/", 1)[0]
    while parent != ROOT and parent not in known:
        known.add(parent)
        parents.append(parent)
        parent = parent.rsplit("/", 1)[0]
    return parents[::-1]


def _metadata(ledger_id: int, last_entry_id: int, entry_size: int) -> LedgerMetadata:
    ensemble = list(OTHER_BOOKIES)
    ensemble.insert(bookie_index(ledger_id), BOOKIE)
    return LedgerMetadata(
        ledger_id=ledger_id,
        format_version=3,
        ensemble_size=ENSEMBLE,
        write_quorum=WRITE_QUORUM,
        ack_quorum=WRITE_QUORUM,
        state=LedgerState.CLOSED,
        last_entry_id=last_entry_id,
        length=(last_entry_id + 1) * entry_size,
        segments=((0, tuple(ensemble)),),
        digest_type=digest_type(ledger_id),
        password=PASSWORD,
        ctime=CTIME,
        custom_metadata=(("application", b"bench-scale"),),
        ctoken=0,
    )
