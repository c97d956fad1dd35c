"""Real faults put into a stopped live bookie's files: each kind the scanner reports, on sealed data of closed ledgers.

Only records flushed before the journal's last mark are damaged: at restart the bookie replays its
journal from that mark, writing each replayed entry anew and pointing its index at the new copy,
which would heal the damage by itself. Only rotated ("sealed") entry logs are touched: the bookie
still appends to its newest. Every fault goes to ledgers of its own (so the outcome of each can be
told apart, and no ledger loses all its copies), and the ledgers a fault damages are returned with
the kind.

Kinds, and what the scanner calls them:
  payload     one payload byte of an entry flipped (not DUMMY)           corrupt_entry
  header      the entry id in a record's header changed                 corrupt_entry
  index_slot  one entry's index slot (.idx) or key (RocksDB) removed      missing_entry
  idx_file    a ledger's whole .idx file deleted (.idx storage only)      missing_ledger
  truncated   a rotated entry log cut in its last record                 lost_entry (+ damaged_entry_log)
  zero_page   a 4 KiB page in the middle of a rotated log zeroed (not     lost/corrupt entries (+ damaged_entry_log)
              its header's)
"""

from __future__ import annotations

import os
import struct
import tempfile
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path

from rocksdict import Options, Rdict

from faults.inject import overwrite, set_location, xor_byte
from scanner.storage.bookie import open_bookie
from scanner.storage.entrylog import EntryLog
from scanner.storage.journal import pending_entries
from scanner.storage.layout import discover_layout

PAGE = 4096
_LOCATION_KEY = struct.Struct(">qq")
KINDS = ("payload", "header", "index_slot", "idx_file", "truncated", "zero_page")


class NothingToDamage(AssertionError):
    """The bookie holds too little flushed data of closed ledgers for a fault of some kind (nothing was written)."""


@dataclass
class Injected:
    """What was damaged on one bookie: per kind, the ledgers it damaged (and, where one entry, which)."""

    bookie_id: str
    storage: str
    ledgers: dict[str, set[int]] = field(default_factory=dict)
    entries: dict[str, tuple[int, int]] = field(default_factory=dict)  # kind -> (ledger, entry), single-entry kinds
    # entry log holding a damaged record the bookie can still compact past (a corrupt payload or header) ->
    # (bytes of records there by ledger, the ledgers whose records are damaged). A zeroed page or a cut log is not one:
    # BookKeeper's compaction fails on it every time (a zeroed page reads as a negative ledger id), and keeps it.
    logs: dict[int, tuple[dict[int, int], set[int]]] = field(default_factory=dict)
    # ledgers with records past the zeroed page of its log, on InterleavedLedgerStorage: there BookKeeper 4.16.7's
    # compaction does take that log, stops silently at the page and removes the log, the records past it lost
    behind_zeroed_page: set[int] = field(default_factory=set)
    whole_logs: dict[str, int] = field(default_factory=dict)  # kind -> the entry log cut or zeroed
    at: float = 0.0  # when the bookie was up again with the damage (time.time()), set by the caller
    # (single-entry kinds prefer a log whose other ledgers hold a fifth of its bytes: deleting them gets it
    # compacted)

    @property
    def damaged(self) -> set[int]:
        return set().union(*self.ledgers.values()) if self.ledgers else set()


@dataclass
class _Record:
    log_id: int
    pos: int  # of the record's header (its 4-byte length is just before)
    ledger_id: int
    entry_id: int


def inject_all(bookie, store, kinds=KINDS, avoid: set[int] | None = None) -> Injected:
    """With the bookie stopped: one fault of each of ``kinds`` that its storage has, on distinct ledgers.

    Ledgers in ``avoid`` (damaged on another bookie already: their other copies must stay good) are not
    touched; the ones damaged here are added to it.
    """
    layout = discover_layout(bookie.conf)
    storage_kind = layout.storage
    result = Injected(bookie.bookie_id, storage_kind)
    with tempfile.TemporaryDirectory() as scratch, open_bookie(layout, work_dir=Path(scratch)) as storage:
        sealed = {f.entry_log_id: f.path for f in storage.entry_logs() if _sealed(f)}
        indexed = list(storage.indexed_ledgers())
        replayed = pending_entries(layout, [ledger_id for ledger_id, _, _ in indexed])
        records: list[_Record] = []
        metas = {}
        located: dict[int, list[tuple[int, int]]] = {}  # log -> (pos, ledger) of every record the index has there
        for ledger_id, entry_ids, locations in indexed:
            for raw in locations:
                located.setdefault(raw >> 32, []).append((raw & 0xFFFFFFFF, ledger_id))
            meta = store.ledger(ledger_id)
            if meta is None or not meta.is_closed or any((ledger_id, e) in replayed for e in entry_ids):
                continue
            metas[ledger_id] = meta
            records += [_Record(raw >> 32, raw & 0xFFFFFFFF, ledger_id, e) for e, raw in zip(entry_ids, locations)]
        index_dir = layout.index_current_dirs[0]
        bytes_in_log = _bytes_by_ledger(located, {f.entry_log_id: f.path for f in storage.entry_logs()})
    by_log: dict[int, list[_Record]] = {}
    for r in records:
        by_log.setdefault(r.log_id, []).append(r)
    in_unsealed = {r.ledger_id for r in records if r.log_id not in sealed}
    used: set[int] = set() if avoid is None else avoid
    # Each whole-log fault in a log of its own: a log cut (no ledgers map) that also holds a zeroed page stops
    # an interleaved bookie's garbage collection at its next start (its scan of the log for the map dies on the
    # zeros, and the collector never runs again): seen once, and not what is under test here.
    whole_log_faults: set[int] = set()

    @cache
    def walked(log_id: int) -> list[tuple[int, int, int]]:
        return _walk(sealed[log_id], log_id)

    @cache
    def deleted(ledger_id: int) -> bool:
        return store.ledger(ledger_id) is None

    def only_damageable_or_deleted(log_id: int) -> bool:
        # Every ledger with records in the log is a flushed closed one, or deleted (records of a deleted ledger
        # stay until the bookie's garbage collection, its index entries too: damage to them is no one's).
        return all(deleted(ledger_id) for ledger_id in {ledger for _, _, ledger in walked(log_id)} - metas.keys())

    def take_log(kind: str) -> tuple[int, list[_Record], int, list[_Record]]:
        # A sealed log whose ledgers no other fault has touched, what it holds in order, where to cut or
        # zero it, and the records that damages.
        for log_id in sorted(sealed, key=lambda i: -len(by_log.get(i, ()))):
            held = sorted(by_log.get(log_id, ()), key=lambda r: r.pos)
            if len(held) < 8 or log_id in whole_log_faults or not only_damageable_or_deleted(log_id):
                continue
            if kind == "truncated":
                cut = held[-1].pos - 4 + 10  # inside the last record's header: it and the ledgers map are gone
                at, hit = cut, [r for r in held if r.pos + 16 > cut]
            else:
                page = _page_to_zero(held, walked(log_id), metas)
                if page is None:
                    continue
                at, hit = page
            if not {r.ledger_id for r in hit} & used:
                whole_log_faults.add(log_id)
                return log_id, held, at, hit
        raise NothingToDamage(f"{bookie.name}: no sealed log left to damage ({kind}) among untouched ledgers "
                             f"({len(sealed)} sealed logs, {len(metas)} flushed closed ledgers, {len(used)} touched)")

    def compactable(r: _Record) -> bool:
        # Other ledgers hold a fifth of the log's bytes: deleting them makes the bookie compact the log (it judges
        # a log by the bytes of live records in it; records here run from 100 bytes to 64 KiB).
        in_log = bytes_in_log.get(r.log_id, {})
        total = sum(in_log.values())
        return total > 0 and 5 * (total - in_log.get(r.ledger_id, 0)) >= total

    def take_entry(digest_needed: bool, for_compaction: bool) -> _Record:
        # A damaged copy in a log the bookie will compact once its other ledgers go: the case where a copy
        # added beside it would not last. A copy meant for that test is never in a log cut or zeroed whole:
        # BookKeeper's compaction of such a log can fail every time (seen: the zeros read as a negative
        # ledger id), and the log would never go.
        for r in sorted(records, key=lambda r: (not compactable(r), r.ledger_id, r.entry_id)):
            meta = metas[r.ledger_id]
            if r.ledger_id in used or r.ledger_id in in_unsealed or r.log_id not in sealed or r.entry_id < 2:
                continue
            if for_compaction and r.log_id in whole_log_faults:
                continue
            if digest_needed and meta.digest_type.name == "DUMMY":
                continue
            return r
        raise NothingToDamage(f"{bookie.name}: no flushed entry of an untouched closed ledger left "
                             f"({len(metas)} flushed closed ledgers, {len(used)} touched)")

    # Every fault is chosen before any is written: one that finds nothing to damage leaves the bookie untouched.
    writes = []
    # The faults on whole logs first: they need a log whose damaged records are all of untouched ledgers.
    for kind in sorted(kinds, key=lambda k: k not in ("truncated", "zero_page")):
        if kind == "idx_file" and storage_kind == "db":
            continue
        if kind in ("truncated", "zero_page"):
            log_id, held, at, hit = take_log(kind)
            if kind == "truncated":
                writes.append(partial(os.truncate, sealed[log_id], at))
            else:
                writes.append(partial(overwrite, sealed[log_id], at, bytes(PAGE)))
                if storage_kind != "db":
                    result.behind_zeroed_page = {r.ledger_id for r in held if r.pos >= at}
            result.ledgers[kind] = {r.ledger_id for r in hit}
            result.whole_logs[kind] = log_id
            used |= result.ledgers[kind]
            continue
        compacted_after = kind in ("payload", "header")  # the test compacts the log of such a copy at its end
        r = take_entry(digest_needed=kind == "payload", for_compaction=compacted_after)
        used.add(r.ledger_id)
        result.ledgers[kind] = {r.ledger_id}
        result.entries[kind] = (r.ledger_id, r.entry_id)
        path = sealed[r.log_id]
        if compacted_after:
            result.logs[r.log_id] = (dict(bytes_in_log[r.log_id]), {r.ledger_id})
        if kind == "payload":
            writes.append(partial(xor_byte, path, r.pos + 32 + 20 + 10, 0xA5))  # past the header and longest digest
        elif kind == "header":
            writes.append(partial(xor_byte, path, r.pos + 15, 0x01))  # the entry id's low byte: names its neighbour
        elif kind == "index_slot":
            writes.append(partial(_remove_location, storage_kind, index_dir, r.ledger_id, r.entry_id))
        elif kind == "idx_file":
            writes.append(partial(Path.unlink, next(index_dir.rglob(f"{r.ledger_id:x}.idx"))))
            result.entries.pop(kind)
    for write in writes:
        write()
    return result


def _page_to_zero(held: list[_Record], walked: list[tuple[int, int, int]],
                  metas: dict) -> tuple[int, list[_Record]] | None:
    """A page near the middle of a log that damages only records with digests (a DUMMY ledger's zeroed payload
    is invisible to every reader), and the indexed records of ``held`` it damages. ``walked``: where every record
    of the log begins and ends (its length's 4 bytes to its last byte), and its ledger, indexed or not (a deleted
    ledger's, an earlier copy of an entry).

    Never the first page: it holds the log's header, and a log whose header is zeroed loses every record at
    the bookie's next garbage collection (it finds no ledgers map, its scan of the log finds no ledger, and it
    deletes the log "as it has no active ledgers"), the records of ledgers no fault touched with it. Seen here
    (the agent found and moved every such ledger); a fault of its own, not this one.
    """
    indexed = {r.pos - 4: r for r in held}
    pages = []
    for lo, _, _ in walked:
        start = lo // PAGE * PAGE
        if start == 0 or lo not in indexed:
            continue
        hit = [indexed[lo2] for lo2, hi2, _ in walked if lo2 < start + PAGE and hi2 > start and lo2 in indexed]
        if all(metas[r.ledger_id].digest_type.name != "DUMMY" for r in hit):
            pages.append((len({r.ledger_id for r in hit}), abs(start - walked[len(walked) // 2][0]), start, hit))
    # The page damaging fewest ledgers, nearest the middle of the log.
    return min(pages, key=lambda p: p[:2])[2:] if pages else None


def _walk(path: Path, log_id: int) -> list[tuple[int, int, int]]:
    """(start, end, ledger) of every record of an entry log, in order: from its length's 4 bytes to its last byte."""
    with EntryLog(path, log_id) as entry_log:
        return [(r.pos - 4, r.pos + len(r.entry), r.ledger_id) for r in entry_log.records()]


def _bytes_by_ledger(located: dict[int, list[tuple[int, int]]], paths: dict[int, Path]) -> dict[int, dict[int, int]]:
    """log -> ledger -> the bytes its records take there (each record's length and the 4 bytes before it), for the
    records the index has in each log (``located``: log -> (pos, ledger))."""
    taken: dict[int, dict[int, int]] = {}
    for log_id, records in located.items():
        by_ledger = taken.setdefault(log_id, {})
        if log_id not in paths:
            continue
        with open(paths[log_id], "rb") as log:
            for pos, ledger_id in records:
                length = struct.unpack(">i", os.pread(log.fileno(), 4, pos - 4).rjust(4, b"\0"))[0]
                by_ledger[ledger_id] = by_ledger.get(ledger_id, 0) + 4 + max(length, 0)
    return taken


def _sealed(log_file) -> bool:
    with EntryLog(log_file.path, log_file.entry_log_id) as entry_log:
        return entry_log.header is not None and entry_log.header.ledgers_map_offset > 0


def _remove_location(storage_kind: str, index_dir: Path, ledger_id: int, entry_id: int) -> None:
    if storage_kind != "db":
        set_location(index_dir.parent, storage_kind, ledger_id, entry_id, None)
        return
    # Deleted in RocksDB's write-ahead log only (no flush): the bookie's own RocksDB, older than the
    # binding's, replays the log at start and writes its own tables.
    db = Rdict(str(index_dir / "locations"), options=Options(raw_mode=True))
    try:
        del db[_LOCATION_KEY.pack(ledger_id, entry_id)]
    finally:
        db.close()
