"""The first steps of a full pass (:mod:`scanner.scan.full_pass`): the index read once in its order, and the cluster.

1. The index: for each ledger (metadata read in pipelined batches), conditions 1 and 2 from its
   entry list; its digest type and key go to a compact table, its locations to sorted runs. DbLedgerStorage's
   index is read in its own order; a `.idx` bookie's from the metadata's side: the index file of each ledger the
   metadata places on this bookie, opened where the bookie looks for it (nothing listed).
2. The cluster: ledgers the metadata places on this bookie that the index lacks (condition 1).

What the index step found short is judged once confirmed (:mod:`scanner.scan.confirmation`).
"""

from __future__ import annotations

import logging
import struct
from array import array
from itertools import chain, compress, islice, repeat
from typing import Callable, Iterator

from scanner.checks.findings import Finding
from scanner.checks.ledger_check import LedgerEvidence, judge_ledger
from scanner.metadata.ledger import LedgerMetadata
from scanner.metadata.store import LedgerRead
from scanner.scan.completeness import holds_every_entry
from scanner.scan.lean_metadata import LeanLedger, Placement, is_placed, lean_ledgers, placed_ledgers
from scanner.scan.location_runs import LocationRuns
from scanner.scan.record_walk_types import KnownLedgers
from scanner.scan.targeted import verifier_of
from scanner.storage.dbstorage import DbIndexError
from scanner.storage.entry import DigestType, DigestVerifier

log = logging.getLogger(__name__)

METADATA_BATCH = 500  # ledgers whose metadata is read in one pipelined round
BATCH_ENTRIES = 1 << 20  # index entries held at once while their ledgers' metadata is read
CLUSTER_CHUNK = 1_000  # the store's ledger ids set against the index step's at once (their sets stay small: see
# json_list.READ_CHUNK)
_ENTRY_ID = struct.Struct(">8xq")  # a stored entry starts with its ledgerId, then its entryId
_DIGEST_TYPES = {0: None, **{digest_type.value: digest_type for digest_type in DigestType}}  # by lean number


class RecordingVerifier:
    """A digest verifier that also notes which entries of its ledger the walk met (for an unindexed ledger)."""

    __slots__ = ("_verifier", "entries", "logs", "digest_type", "min_length")

    def __init__(self, verifier: DigestVerifier | None):
        self._verifier = verifier
        self.entries: set[int] = set()
        self.logs: set[int] = set()
        self.digest_type = verifier.digest_type if verifier else None
        self.min_length = verifier.min_length if verifier else 0

    def verify(self, entry: memoryview) -> bool:
        self.entries.add(_ENTRY_ID.unpack_from(entry)[0])
        return self._verifier is None or self._verifier.verify(entry)


class IndexStep:
    """The pass's steps 1 and 2, a part of :class:`scanner.scan.full_pass.BookiePass` (whose state they fill)."""

    # -- 1. the index -------------------------------------------------------------------------

    def read_index(self) -> None:
        self.runs = LocationRuns(self.scratch)
        lean_source = self._lean_source()
        try:
            if self.storage.layout.storage == "db":
                self._read_listed_index(lean_source)
            else:
                self._read_placed_index(lean_source)
        except DbIndexError as error:
            # The index stops reading part-way: every ledger it would have listed is judged on its own.
            log.warning("%s", error)
            self.index_problem = str(error)
        self.runs.finish()
        # What the walks may look up themselves: every ledger of the table but those whose own index did not read
        # (their records are noted by the recording verifier ``_verifier_for`` gives)
        self._known = KnownLedgers(*self.table.columns(), asked=array("Q", sorted(self._unindexed)))

    def _read_listed_index(self, lean_source) -> None:
        """DbLedgerStorage: every ledger its index lists, in its order, with its metadata."""
        index = self.storage.indexed_ledgers(self.dir_index)
        while batch := _next_batch(index):
            ledger_ids = [ledger_id for ledger_id, _, _ in batch]
            self._index_batch(batch, *(lean_source or self._whole_source)(ledger_ids))

    def _read_placed_index(self, lean_source) -> None:
        """`.idx` storage: the index files of the ledgers the metadata places on this bookie (an ensemble has it), each
        opened where the bookie looks for it; nothing is listed. A ledger placed here whose file is not there is left
        to the cluster step (condition 1). An index file of a ledger the metadata does not have (deleted) is not read:
        the bookie's garbage collection removes it, and its records in the entry logs are reported from the walk."""
        asked: dict[int, tuple] = {}  # ledger placed here, asked of the index, not met yet -> (znode bytes, its
        # placement, the whole metadata's reader and its place there), in the metadata's order

        def placed_here() -> Iterator[list[int]]:
            for ledger_ids in _chunks(self.store.ledger_ids(), METADATA_BATCH):
                data, read_of = (lean_source or self._whole_source)(ledger_ids)
                placed = placed_ledgers(ledger_ids, data, self.bookie_id)
                for i in [i for i, is_placed_here in enumerate(placed) if is_placed_here is None]:
                    placed[i] = self._placed_whole(read_of(i))
                chosen = list(compress(range(len(ledger_ids)), placed))
                ids = [ledger_ids[i] for i in chosen]
                asked.update(zip(ids, zip([data[i] for i in chosen], [placed[i] for i in chosen], repeat(read_of),
                                          chosen)))
                yield ids

        indexes = self.storage.ledger_indexes(chain.from_iterable(placed_here()))
        while batch := _next_batch(indexes):  # (the index gives what it has of the ledgers asked, in their order)
            met = [asked.pop(ledger_id, None) for ledger_id, _, _ in batch]
            if None in met:  # a ledger the store named twice (in both of the hierarchical trees), met already
                kept = [i for i, asked_for in enumerate(met) if asked_for is not None]
                batch, met = [batch[i] for i in kept], [met[i] for i in kept]
            self._index_batch(batch, [data for data, _, _, _ in met], lambda j: met[j][2](met[j][3]),
                              [placement for _, placement, _, _ in met])
        for ledger_id in asked:
            self._not_in_index(ledger_id)

    def _not_in_index(self, ledger_id: int) -> None:
        if self.owns_ledger(ledger_id):
            self._not_found.append(ledger_id)

    def _placed_whole(self, read: LedgerRead) -> bool:
        """Whether the ledger, decoded whole, is placed on this bookie (an undecodable one this pass owns noted)."""
        if read.error is not None:
            if self.owns_ledger(read.ledger_id):
                self._undecodable(read.ledger_id, read.error)
            return False
        return read.meta is not None and is_placed(read.meta, self.bookie_id)

    def _whole_source(self, ledger_ids: list[int]) -> tuple[list, Callable[[int], LedgerRead]]:
        """A store that offers no undecoded znodes: each ledger read whole (no bytes for the lean decode)."""
        reads = self.store.ledger_batch(ledger_ids)
        return [None] * len(ledger_ids), reads.__getitem__

    def _index_batch(self, batch: list, data: list, read_of: Callable[[int], LedgerRead],
                     placements: list[Placement] | None = None) -> None:
        """A batch of what the index holds (ledger id, entry ids, locations), with each one's znode bytes (None: none
        offered), its whole metadata on demand (the i-th's) and, on `.idx` storage, its placement (whose kept decode
        the lean answer comes from)."""
        ledger_ids = [ledger_id for ledger_id, _, _ in batch]
        entry_lists = [entry_ids for _, entry_ids, _ in batch]
        self.pacer.take_entries(sum(map(len, filter(None, entry_lists))))  # (None: an index that did not read)
        self._index_leans(batch, lean_ledgers(ledger_ids, data, self.bookie_id, entry_lists, placements), read_of)

    def _lean_source(self) -> Callable[[list[int]], tuple[list, Callable[[int], LedgerRead]]] | None:
        """Where the store offers the undecoded znodes: for a batch of ledger ids, (each one's znode bytes, None for
        none; the whole metadata of the i-th, read on demand). A dump store gives the bytes alone and reads a
        ledger again when it is needed whole (few are); a store reached over the network gives its znodes once."""
        store = self.store
        if getattr(store, "ledger_data", None) is not None:
            return lambda ledger_ids: (store.ledger_data(ledger_ids),
                                       lambda i: store.ledger_batch([ledger_ids[i]])[0])
        if getattr(store, "ledger_nodes", None) is None:
            return None

        def from_nodes(ledger_ids: list[int]):
            nodes = store.ledger_nodes(ledger_ids)
            return ([None if node is None else node.data for _, node in nodes],
                    lambda i: store.ledger_read(ledger_ids[i], *nodes[i]))
        return from_nodes

    def _index_ledger(self, read: LedgerRead, entry_ids, raw_locations) -> None:
        ledger_id = read.ledger_id
        owned = self.owns_ledger(ledger_id)
        if owned:
            self.totals.ledgers_checked += 1
        if read.error is not None:
            if owned:
                self._undecodable(ledger_id, read.error)
            return
        if entry_ids is None:  # the ledger's own index does not read: judged at the end, with its logged records
            if owned and read.meta is not None:
                self._unindexed[ledger_id] = RecordingVerifier(verifier_of(read.meta))
                self.table.add(ledger_id, read.meta.digest_type, read.meta.password)
            return
        if read.meta is None:
            if owned:
                self.orphans[ledger_id].indexed = len(entry_ids)
            self._add_locations(ledger_id, entry_ids, raw_locations)
        else:
            complete = not owned or holds_every_entry(read.meta, self.bookie_id, entry_ids)
            self._index_known(ledger_id, read.meta.digest_type, read.meta.password, complete, lambda: read.meta,
                              entry_ids, raw_locations)

    def _index_leans(self, batch: list, leans: list[LeanLedger | None], read_of: Callable[[int], LedgerRead]) -> None:
        """A batch's ledgers, each as :meth:`_index_ledger` or :meth:`_index_lean` takes it, in order: the ledgers
        whose lean decode needs nothing more (complete, or not this pass's to judge) a run of them at a time, in one
        step each for their table rows, their locations and their count."""
        if self.dir_index is not None and self.storage.layout.storage != "db" and self.dir_count > 1:
            plain = [False] * len(batch)  # each ledger's locations go through _into_own_logs
        elif self.dir_index is None:  # every ledger this pass's own
            plain = [lean is not None and lean[2] for lean in leans]
        else:
            plain = [lean is not None and (lean[2] or not self.owns_ledger(ledger_id))
                     for (ledger_id, _, _), lean in zip(batch, leans)]
        first = 0
        for i in (i for i, is_plain in enumerate(plain) if not is_plain):
            self._index_plain(batch[first:i], leans[first:i])
            first = i + 1
            ledger_id, entry_ids, raw_locations = batch[i]
            if leans[i] is None:
                self._index_ledger(read_of(i), entry_ids, raw_locations)
            else:
                self._index_lean(ledger_id, leans[i], entry_ids, raw_locations, lambda i=i: read_of(i).meta)
        self._index_plain(batch[first:], leans[first:])

    def _index_plain(self, ledgers: list, leans: list[LeanLedger]) -> None:
        """Ledgers whose lean decode needs nothing more, as :meth:`_index_lean` takes each in turn."""
        if not ledgers:
            return
        ledger_ids = [ledger_id for ledger_id, _, _ in ledgers]
        self.totals.ledgers_checked += (len(ledger_ids) if self.dir_index is None
                                        else sum(map(self.owns_ledger, ledger_ids)))
        self.table.add_ledgers(ledger_ids, [(_DIGEST_TYPES[digest_type], password or b"")
                                            for digest_type, password, _ in leans])
        self.runs.add_ledgers(ledger_ids, [entry_ids for _, entry_ids, _ in ledgers],
                              [raw_locations for _, _, raw_locations in ledgers])

    def _index_lean(self, ledger_id: int, lean: LeanLedger, entry_ids, raw_locations,
                    meta: Callable[[], LedgerMetadata]) -> None:
        """A ledger the index lists and the metadata has, from what :mod:`scanner.scan.lean_metadata` took of it."""
        digest_type, password, complete = lean
        if self.owns_ledger(ledger_id):
            self.totals.ledgers_checked += 1
        self._index_known(ledger_id, _DIGEST_TYPES[digest_type], password, complete, meta, entry_ids, raw_locations)

    def _index_known(self, ledger_id: int, digest_type: DigestType | None, password: bytes | None, complete: bool,
                     meta: Callable[[], LedgerMetadata], entry_ids, raw_locations) -> None:
        """``complete``: whether the index holds every entry owed (for a ledger this pass owns); ``meta`` gives the
        whole metadata, for a ledger that is not."""
        self.table.add(ledger_id, digest_type, password)
        if self.owns_ledger(ledger_id) and not complete:
            metadata = meta()
            evidence = LedgerEvidence(ledger_id, entry_ids)
            if any(not f.category.informational for f in judge_ledger(metadata, self.bookie_id, evidence)):
                self._recheck.add(ledger_id)
        self._add_locations(ledger_id, entry_ids, raw_locations)

    def _add_locations(self, ledger_id: int, entry_ids, raw_locations) -> None:
        if self.dir_index is not None and self.storage.layout.storage != "db" and self.dir_count > 1:
            entry_ids, raw_locations = self._into_own_logs(entry_ids, raw_locations)
        self.runs.add(ledger_id, entry_ids, raw_locations)

    def _into_own_logs(self, entry_ids, raw_locations):
        # `.idx` storage spreads one id space of logs over all ledger dirs: keep the locations into ours.
        keep = [i for i, raw in enumerate(raw_locations) if raw >> 32 in self._own_log_ids]
        if len(keep) == len(raw_locations):
            return entry_ids, raw_locations
        return array("Q", (entry_ids[i] for i in keep)), array("Q", (raw_locations[i] for i in keep))

    # -- 2. the cluster -----------------------------------------------------------------------

    def read_cluster(self) -> None:
        """Ledgers the metadata places on this bookie that the index does not have (condition 1): on `.idx` storage,
        those the index step looked for and did not find; on DbLedgerStorage, every ledger of the metadata its index
        did not list."""
        if self.storage.layout.storage == "db":
            ids = (i for chunk in _chunks(self.store.ledger_ids(), CLUSTER_CHUNK) for i in self._lacking(chunk))
        else:
            ids = iter(self._not_found)
        while batch := list(islice(ids, METADATA_BATCH)):
            for read in self.store.ledger_batch(batch):
                if read.error is not None:
                    self._undecodable(read.ledger_id, read.error)
                elif read.meta is not None and judge_ledger(read.meta, self.bookie_id,
                                                            LedgerEvidence(read.ledger_id, None)):
                    self._unindexed[read.ledger_id] = RecordingVerifier(verifier_of(read.meta))
                    self.totals.ledgers_checked += 1

    def _lacking(self, ledger_ids: list[int]) -> list[int]:
        """Those of ``ledger_ids`` this pass owns that the index step did not meet, in their order (set against what
        it met in C-speed steps)."""
        lacking = self.table.lacking(ledger_ids).difference(self.orphans, self._recheck, self.undecodable,
                                                           self._unindexed)
        return [i for i in ledger_ids if i in lacking and self.owns_ledger(i)]

    def judge_index(self) -> list[Finding]:
        """Conditions 1 and 2 for the ledgers whose index the index step found short, confirmed now."""
        ledgers = sorted(self._recheck)
        self._recheck.clear()
        return self._confirm(ledgers, {}, with_index=set(ledgers))


def _chunks(items: Iterator[int], size: int) -> Iterator[list[int]]:
    while chunk := list(islice(items, size)):
        yield chunk


def _next_batch(index: Iterator) -> list:
    """Up to METADATA_BATCH ledgers (and about BATCH_ENTRIES entries) from the index."""
    batch, entries = [], 0
    for item in index:
        batch.append(item)
        entries += 0 if item[1] is None else len(item[1])
        if len(batch) >= METADATA_BATCH or entries >= BATCH_ENTRIES:
            break
    return batch
