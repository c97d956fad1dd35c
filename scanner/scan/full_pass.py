"""A full pass over one bookie (or one of its ledger dirs): the index read once in its order, every entry log
read once front to back.

1. The index: for each ledger (metadata read in pipelined batches), conditions 1 and 2 from its
   entry list; its digest type and key go to a compact table, its locations to sorted runs.
2. The cluster: ledgers the metadata places on this bookie that the index lacks (condition 1).
3. The walk: each entry log once, every digest verified, every location the index holds matched
   against the record the walk finds there (condition 3 and the index-to-record check as a join),
   every finished log's ledgers map checked against what the walk saw.
4. Confirmation: nothing leaves the pass on the word of a snapshot. What the index or the walk
   showed is read again from the bookie's files and the metadata as they are now (the journal
   since the last mark, a fresh index, the record at the location it names, the ledger's
   metadata): a race with a write, a flush, garbage collection or compaction is never a finding.
   An entry the index lacks but the journal holds after the bookie's last mark is acknowledged and
   not yet flushed, not missing. A ledger whose metadata changed moments ago (closed once an ack quorum
   had its last entries) is judged once the entries still on their way to this bookie have had time to come.

The steps are public so the agent can pace, checkpoint and resume between them. Memory holds one
batch of ledgers, one sorted run or one window of locations, the compact table and what is
damaged: no metadata object per ledger, nothing per entry.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
import time
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Callable, Iterator

from scanner.checks.entry_log_check import judge_entry_log
from scanner.checks.findings import Category, Finding
from scanner.checks.ledger_check import LedgerEvidence, RecordFault, judge_ledger, judge_record_faults
from scanner.metadata.ledger import LedgerMetadata
from scanner.metadata.store import LedgerRead
from scanner.scan.completeness import holds_every_entry
from scanner.scan.lean_metadata import LeanLedger, lean_ledgers
from scanner.scan.ledger_table import LedgerTable
from scanner.scan.location_runs import LocationRuns
from scanner.scan.orphans import OrphanTrace, orphan_findings
from scanner.scan.pacing import Pacer, Unpaced
from scanner.scan.record_walk import walk_records
from scanner.scan.record_walk_types import KnownLedgers
from scanner.scan.targeted import LedgerScanner, verifier_of
from scanner.scan.totals import ScanTotals
from scanner.storage.bookie import BookieStorage, EntryLogFile, file_size
from scanner.storage.dbstorage import DbIndexError
from scanner.storage.entry import DIGEST_LENGTH, DigestType, DigestVerifier
from scanner.storage.entrylog import (LENGTH_PREFIX, PACE_INTERVAL, EntryLog, EntryLogError, MissingEntryLog,
                                     TruncatedRecord, ZeroedHeader)
from scanner.storage.indexfile import IndexFileError
from scanner.storage.journal import pending_entries
from scanner.storage.location import EntryLocation

log = logging.getLogger(__name__)

METADATA_BATCH = 500  # ledgers whose metadata is read in one pipelined round
# A ledger closed by its writer once an ack quorum had its last entries can still be on its way to the other
# bookies of its write sets: damage is judged only on metadata this old (a slow bookie lagged ~1 s on a
# loaded machine).
SETTLE_SECONDS = 15.0
BATCH_ENTRIES = 1 << 20  # index entries held at once while their ledgers' metadata is read
# How long a DirectEntryLogger log's ledgers map, announced by its header but not (yet) as the walk saw, is read
# again before it is reported: the map's own write comes right after the header's.
MAP_WRITE_WAIT = 5.0
_ENTRY_ID = struct.Struct(">8xq")  # a stored entry starts with its ledgerId, then its entryId
_DIGEST_TYPES = {0: None, **{digest_type.value: digest_type for digest_type in DigestType}}  # by lean number


class _Recording:
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


class Stopped(Exception):
    """A walk ended early at the caller's request (its ``checkpoint`` said so)."""


@dataclass
class _LogWalk:
    """One walk of one log: what it found that is not judged yet, and how far judging has got."""

    log_file: EntryLogFile
    entry_log: EntryLog
    walk: object  # a walk from scanner.scan.record_walk.walk_records
    whole: bool  # walked from its first record (so its ledgers map can be checked)
    faults: dict[int, list[RecordFault]] = field(default_factory=lambda: defaultdict(list))
    drained: int = 0  # index faults of the walk already among ``faults``
    judged: int = 0  # problems of the log already judged
    # cut records and a header of zeros: judged when the walk has ended, on the file read again
    held: list[EntryLogError] = field(default_factory=list)


class BookiePass:
    """One full pass over what ``dir_index`` owns (None: the whole bookie).

    A ledger dir owns the ledgers ``L mod dirs == dir_index`` (as DbLedgerStorage places them; for
    `.idx` storage it is just a fair split) for conditions 1 and 2, and the entry logs in it.

    Without :meth:`read_index`, :meth:`walk` checks chosen logs alone (``scan --entry-log``, suspect logs): there
    is no index to join, so every record that fails is judged on the index as it is when confirmed.
    """

    def __init__(self, storage: BookieStorage, store, bookie_id: str, scratch: Path | None,
                 reopen: Callable[[], BookieStorage], pacer: Pacer | None = None, dir_index: int | None = None):
        self.storage = storage
        self.store = store
        self.bookie_id = bookie_id
        self.scratch = scratch
        self.reopen = reopen  # a fresh view of the bookie's index (a RocksDB view is a snapshot)
        self.pacer = pacer or Unpaced()
        self.dir_index = dir_index
        self.dir_count = len(storage.layout.ledger_dirs)
        self.totals = ScanTotals()
        self.table = LedgerTable()
        self.runs: LocationRuns | None = None  # the index's locations, once it is read
        self.undecodable: set[int] = set()
        self.index_problem: str | None = None  # why the index stopped reading part-way, if it did
        self.log_files = self._own_logs()  # the logs of this pass, listed once, id order
        self._own_log_ids = {f.entry_log_id for f in self.log_files}
        self.vanished: set[int] = set()  # listed logs that were gone when their turn came
        self.changed: set[int] = set()  # logs truncated or replaced while they were walked
        self.orphans: dict[int, OrphanTrace] = defaultdict(OrphanTrace)
        self._absent: set[int] = set()  # ledgers met in the logs that the metadata does not have
        self._unindexed: dict[int, _Recording] = {}  # placed on this bookie by the metadata, not in the index
        self._unlisted: dict[int, DigestVerifier | None] = {}  # ledgers only the logs named, read once
        self._recheck: set[int] = set()  # ledgers with index findings, judged again on fresh reads
        self._reported: dict[int, set[int]] = defaultdict(set)  # entries already in a finding, per ledger
        self._proven_lengths: dict[tuple[int, int], int] = {}  # (log, pos) of entries cut short -> their length
        self._known: KnownLedgers | None = None  # the table as the walks look it up, once the index is read

    def close(self) -> None:
        if self.runs is not None:
            self.runs.close()

    def __enter__(self) -> "BookiePass":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, progress=None) -> list[Finding]:
        """The whole pass at once (the ``scan`` command)."""
        self.read_index()
        self.read_cluster()
        findings = self.judge_index()
        if progress:
            progress.start("entry logs", sum(file_size(f.path) for f in self.log_files), "B")
        for log_file in self.log_files:
            findings.extend(self.walk(log_file, progress=progress))
        findings.extend(self.finish())
        if progress:
            progress.finish()
        return findings

    def owns_ledger(self, ledger_id: int) -> bool:
        return self.dir_index is None or ledger_id % self.dir_count == self.dir_index

    def _own_logs(self) -> list[EntryLogFile]:
        return [f for f in self.storage.entry_logs() if self.dir_index is None or f.ledger_dir_index == self.dir_index]

    # -- 1. the index -------------------------------------------------------------------------

    def read_index(self) -> None:
        self.runs = LocationRuns(self.scratch)
        index = self.storage.indexed_ledgers(self.dir_index)
        lean_source = self._lean_source()
        try:
            while batch := _next_batch(index):
                ledger_ids = [ledger_id for ledger_id, _, _ in batch]
                self.pacer.take_entries(sum(len(entry_ids) for _, entry_ids, _ in batch if entry_ids is not None))
                if lean_source is None:
                    for (_, entry_ids, raw_locations), read in zip(batch, self.store.ledger_batch(ledger_ids)):
                        self._index_ledger(read, entry_ids, raw_locations)
                    continue
                data, read_of = lean_source(ledger_ids)
                leans = lean_ledgers(ledger_ids, data, self.bookie_id, [entry_ids for _, entry_ids, _ in batch])
                for i, ((ledger_id, entry_ids, raw_locations), lean) in enumerate(zip(batch, leans)):
                    if lean is None:
                        self._index_ledger(read_of(i), entry_ids, raw_locations)
                    else:
                        self._index_lean(ledger_id, lean, entry_ids, raw_locations, lambda i=i: read_of(i).meta)
        except DbIndexError as error:
            # The index stops reading part-way: every ledger it would have listed is judged on its own.
            log.warning("%s", error)
            self.index_problem = str(error)
        self.runs.finish()
        # What the walks may look up themselves: every ledger of the table but those whose own index did not read
        # (their records are noted by the recording verifier ``_verifier_for`` gives)
        self._known = KnownLedgers(*self.table.columns(), asked=array("Q", sorted(self._unindexed)))

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
                self._unindexed[ledger_id] = _Recording(verifier_of(read.meta))
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
        """Ledgers the metadata places on this bookie that the index does not have (condition 1)."""
        ids = (i for i in self.store.ledger_ids()
               if self.owns_ledger(i) and i not in self.table and i not in self.orphans and i not in self._recheck
               and i not in self.undecodable and i not in self._unindexed)
        while batch := list(islice(ids, METADATA_BATCH)):
            for read in self.store.ledger_batch(batch):
                if read.error is not None:
                    self._undecodable(read.ledger_id, read.error)
                elif read.meta is not None and judge_ledger(read.meta, self.bookie_id,
                                                            LedgerEvidence(read.ledger_id, None)):
                    self._unindexed[read.ledger_id] = _Recording(verifier_of(read.meta))
                    self.totals.ledgers_checked += 1

    def judge_index(self) -> list[Finding]:
        """Conditions 1 and 2 for the ledgers whose index the index step found short, confirmed now."""
        ledgers = sorted(self._recheck)
        self._recheck.clear()
        return self._confirm(ledgers, {}, with_index=set(ledgers))

    # -- 3. the walk --------------------------------------------------------------------------

    def walk(self, log_file: EntryLogFile, start: int | None = None,
             checkpoint: Callable[[int, list[Finding]], bool] | None = None, progress=None,
             pace_interval: int = PACE_INTERVAL) -> list[Finding]:
        """Walk one entry log from ``start`` (a record boundary; None: its first record) to its end.

        About every ``pace_interval`` bytes, ``checkpoint(offset, findings)`` gets the record boundary reached and the
        confirmed findings about everything before it; when it returns True the walk raises
        :class:`Stopped` there. Returns the findings after the last checkpoint.
        """
        try:
            entry_log = EntryLog(log_file.path, log_file.entry_log_id)
        except MissingEntryLog:
            self.vanished.add(log_file.entry_log_id)  # its indexed entries are confirmed by ``finish``
            return []
        except EntryLogError as error:
            return judge_entry_log(log_file.entry_log_id, [error], False)
        self._own_log_ids.add(log_file.entry_log_id)
        with entry_log:
            self.totals.entry_logs_scanned += 1
            first = start if start is not None else (entry_log.header.data_start if entry_log.header else 0)
            expected = () if self.runs is None else self.runs.windows(log_file.entry_log_id, first)
            state = _LogWalk(log_file, entry_log,
                             walk_records(entry_log, self._verifier_for, expected, start, self._known),
                             whole=start is None)
            reached = first

            def pace(n: int) -> None:
                # The checkpoint first: what lies before ``reached`` is judged already, so a restart need not walk
                # it again, however long the pacer then holds the walk (a record longer than the pace interval
                # is paid for whole, several seconds on a slow pass).
                nonlocal reached
                reached += n
                if progress:
                    progress.advance(n)
                if checkpoint is not None and checkpoint(reached, self._settle(state, final=False)):
                    raise Stopped
                self.pacer.take_bytes(n)

            self._walk_records(state, pace, pace_interval)
            if entry_log.changed_since_open():
                # Truncated or replaced under the walk (no bookie does that to a log it still indexes): what
                # the walk saw of it is no evidence. The next pass walks it again.
                log.warning("entry log %d changed under the walk (%d bytes when opened); not judged this pass",
                            log_file.entry_log_id, entry_log.size)
                self.changed.add(log_file.entry_log_id)
                return []
            self._note_ledgers_seen(state)
            found = self._settle(state, final=True)
        if progress and entry_log.size > reached:
            progress.advance(entry_log.size - reached)
        return found

    def _walk_records(self, state: _LogWalk, pace: Callable[[int], None], pace_interval: int) -> None:
        """Walk the log's records; those whose digest fails are faults when the index points at them (or, with no
        index read, when confirmation finds it does)."""
        walk, entry_log_id = state.walk, state.log_file.entry_log_id
        try:
            for failure in walk.failures(pace, pace_interval):
                if failure.indexed or self.runs is None:
                    state.faults[failure.ledger_id].append(
                        RecordFault(failure.entry_id, entry_log_id, failure.pos, False, failure.reason))
        finally:
            self.totals.entries_verified += walk.stats.entries_verified
            self.totals.bytes_scanned += walk.stats.bytes_scanned

    def _note_ledgers_seen(self, state: _LogWalk) -> None:
        """The logs that hold records of deleted ledgers (orphans) and of ledgers the index lacks."""
        entry_log_id = state.log_file.entry_log_id
        misread = {f.found_ledger_id for f in state.walk.index_faults if f.found_ledger_id is not None}
        seen = state.walk.stats.ledgers_seen  # (a log of a busy bookie holds a little of very many ledgers: only
        for ledger_id in self._absent.intersection(seen):  # the few of note are looked at one by one)
            if ledger_id not in misread and self.owns_ledger(ledger_id):
                self.orphans[ledger_id].logs.add(entry_log_id)
        for ledger_id in self._unindexed.keys() & seen:
            self._unindexed[ledger_id].logs.add(entry_log_id)

    def _settle(self, state: _LogWalk, final: bool) -> list[Finding]:
        """The confirmed findings about what the walk has passed since the last settling (all of it when ``final``)."""
        entry_log, entry_log_id = state.entry_log, state.log_file.entry_log_id
        index_faults = state.walk.index_faults
        for fault in index_faults[state.drained:]:
            state.faults[fault.ledger_id].append(RecordFault(fault.entry_id, entry_log_id, fault.pos, fault.lost,
                                                             fault.reason))
        state.drained = len(index_faults)
        if final:
            self._add_cut_short(state)
        # The index expects a record right where the log's data stops: the data was cut there.
        cut = entry_log.valid_end is not None and any(
            f.offset == entry_log.valid_end + LENGTH_PREFIX for faults in state.faults.values() for f in faults)
        found = self._confirm(sorted(state.faults), state.faults) if state.faults else []
        state.faults.clear()
        lost_here = [f for f in found if f.category is Category.LOST_ENTRY and f.entry_log == entry_log_id]
        problems = self._file_problems(state, final, cut_where_index_expects_more=bool(lost_here) and cut)
        if problems:
            active = not lost_here and self.storage.is_active_log(state.log_file, entry_log.header_has_map)
            found += judge_entry_log(entry_log_id, problems, active,
                                     lambda: bool(lost_here) or self._indexed_into(state.log_file))
        return found

    def _add_cut_short(self, state: _LogWalk) -> None:
        """When the walk lost its framing right after a record, and the bookie's own files make that record longer
        than its length prefix says (its header's ledger length less the previous entry's; else where the index's
        next record in the log starts), the prefix was cut: the bookie serves the entry short, whatever its digest
        type. That entry is a fault (confirmed as the others are)."""
        entry_log, record = state.entry_log, state.walk.last_record
        end = entry_log.valid_end
        if (record is None or end is None or end >= entry_log.records_end or record.pos + record.length != end
                or not any(p.offset == end for p in entry_log.problems)):
            return
        verifier = self._verifier_for(record.ledger_id)
        if verifier is None or getattr(verifier, "digest_type", None) is None:
            return
        location = EntryLocation(state.log_file.entry_log_id, record.pos)
        with self.reopen() as fresh, LedgerScanner(fresh, self.store, self.bookie_id) as scanner:
            length = scanner.length_from_headers(record.ledger_id, record.entry_id, location,
                                                 DIGEST_LENGTH[verifier.digest_type])
            if length is None:
                length = self._length_to_next_record(scanner, location, end)
        if length is None or length <= record.length:
            return
        self._proven_lengths[(location.entry_log_id, location.pos)] = length
        state.faults[record.ledger_id].append(RecordFault(
            record.entry_id, location.entry_log_id, location.pos, False,
            f"its length prefix says {record.length} bytes; the bookie's own files make the entry {length} bytes "
            "long: it is served cut short"))

    def _length_to_next_record(self, scanner: LedgerScanner, location: EntryLocation, end: int) -> int | None:
        """The length of the entry at ``location`` if it runs up to the next record the index holds in the log,
        which is there and is that entry; None when there is none (or no index was read)."""
        if self.runs is None:
            return None
        window = next(iter(self.runs.windows(location.entry_log_id, end + 1)), None)
        if window is None or not len(window.pos):
            return None
        following = EntryLocation(location.entry_log_id, window.pos[0])
        if scanner.check_record(window.ledger_ids[0], window.entry_ids[0], following, None) is not None:
            return None
        return following.pos - LENGTH_PREFIX - location.pos

    def _file_problems(self, state: _LogWalk, final: bool, cut_where_index_expects_more: bool) -> list[EntryLogError]:
        """The log's file-level damage found since the last settling; a cut record only once the walk has ended
        (the torn tail of the log being written, or damage)."""
        entry_log = state.entry_log
        before_map = len(entry_log.problems)
        map_problems = []
        if final and state.whole and entry_log.valid_end is not None:
            map_problems = self._ledgers_map_problems(state)
            map_problems[:0] = entry_log.problems[before_map:]  # what reading the map found
            if map_problems and self._map_written_since(state):
                map_problems = []
        problems = entry_log.problems[state.judged:before_map]
        state.judged = len(entry_log.problems)
        state.held.extend(p for p in problems if isinstance(p, (TruncatedRecord, ZeroedHeader)))
        problems = [p for p in problems if not isinstance(p, (TruncatedRecord, ZeroedHeader))]
        if not final:
            return problems
        # Judged on a fresh look at the file: the writer may have completed a cut record as the log rotated, or
        # written the header of a log it had just created.
        problems += [p for p in state.held if _still_there(entry_log, p)] + map_problems
        if cut_where_index_expects_more and not problems:
            problems.append(EntryLogError(
                entry_log.path, entry_log.entry_log_id, entry_log.valid_end,
                f"the log's records end at offset {entry_log.valid_end}, where the index expects more: "
                "its data was cut there"))
        return problems

    def _indexed_into(self, log_file: EntryLogFile) -> bool:
        """Whether the bookie's index, read now, locates an entry in ``log_file``: an entry of the ledgers the pass's
        index located there (none: False), or, with no index read (chosen logs), of any ledger. A ledger whose index
        does not read is left out: its own check reports that."""
        entry_log_id = log_file.entry_log_id
        candidates = None
        if self.runs is not None:
            candidates = sorted({ledger_id for window in self.runs.windows(entry_log_id)
                                 for ledger_id in window.ledger_ids})
        if candidates != []:
            with self.reopen() as fresh:
                located = _logs_of_every_ledger(fresh) if candidates is None else _logs_of(fresh, candidates)
                if any(entry_log_id in log_ids and _same_file(fresh, ledger_id, log_file)
                       for ledger_id, log_ids in located):
                    return True
        log.info("entry log %d reads as zeros and the index does not point into it: created, not written yet",
                 entry_log_id)
        return False

    def _map_written_since(self, state: _LogWalk) -> bool:
        """Whether the ledgers map of a DirectEntryLogger log, which did not read or did not agree with the walk, does
        within ``MAP_WRITE_WAIT`` seconds, read again. That logger writes the header, with the map's offset, before
        the map: ``LogMetadata.write`` queues the header block's write, then flushes the buffer holding the map."""
        if not state.entry_log.header.direct:
            return False  # DefaultEntryLogger flushes the map before it writes its offset into the header
        deadline = time.monotonic() + MAP_WRITE_WAIT
        while True:
            try:
                with EntryLog(state.entry_log.path, state.entry_log.entry_log_id) as again:
                    if again.ledgers_map() == state.walk.stats.ledger_bytes:
                        log.info("entry log %d: its ledgers map, read again, is written now and agrees with its "
                                 "records", state.entry_log.entry_log_id)
                        return True
            except EntryLogError:
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(MAP_WRITE_WAIT / 20)

    def _ledgers_map_problems(self, state: _LogWalk) -> list[EntryLogError]:
        """The map BookKeeper's garbage collector trusts, against what the walk of the whole log saw (what does not
        read goes to the log's problems)."""
        entry_log = state.entry_log
        listed = entry_log.ledgers_map()
        if listed is None:
            return []
        seen = state.walk.stats.ledger_bytes
        if listed == seen:
            return []
        wrong = sorted({ledger_id for ledger_id, _ in set(listed.items()) ^ set(seen.items())})
        if not wrong:
            return []
        details = [f"ledger {ledger_id}: map {listed.get(ledger_id, 'absent')}, records {seen.get(ledger_id, 'absent')}"
                   for ledger_id in wrong[:5]]
        more = f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""
        return [EntryLogError(entry_log.path, entry_log.entry_log_id, entry_log.header.ledgers_map_offset,
                              "the ledgers map disagrees with the records (bytes per ledger): "
                              + "; ".join(details) + more)]

    def _verifier_for(self, ledger_id: int):
        recording = self._unindexed.get(ledger_id)
        if recording is not None:
            return recording
        listed, verifier = self.table.lookup(ledger_id)
        if listed:
            return verifier
        if ledger_id in self._unlisted:
            return self._unlisted[ledger_id]
        if ledger_id in self._absent or ledger_id in self.undecodable:
            return None
        read = self.store.ledger_batch([ledger_id])[0]  # a ledger the index does not list: deleted, mostly
        verifier = None
        if read.error is not None:
            self._undecodable(ledger_id, read.error)
        elif read.meta is None:
            self._absent.add(ledger_id)
        else:
            verifier = self._unlisted[ledger_id] = verifier_of(read.meta)
        return verifier

    # -- 4. the end of the pass ---------------------------------------------------------------

    def finish(self, vanished: set[int] = frozenset()) -> list[Finding]:
        """What only the whole pass can tell: indexed entries in logs not walked (``vanished`` before their turn,
        or created since the listing), ledgers the index lacks (with the entry logs that still hold their
        records), orphans."""
        faults: dict[int, list[RecordFault]] = defaultdict(list)
        walked = {f.entry_log_id for f in self.log_files} - set(vanished) - self.vanished
        for entry_log_id in self.runs.entry_log_ids() if self.runs is not None else ():
            if entry_log_id in walked:
                continue
            for window in self.runs.windows(entry_log_id):
                for pos, ledger_id, entry_id in zip(window.pos, window.ledger_ids, window.entry_ids):
                    faults[ledger_id].append(RecordFault(
                        entry_id, entry_log_id, pos, True, f"entry log {entry_log_id} was not there to walk"))
        findings = self._confirm(sorted(set(faults) | set(self._unindexed)), faults, with_index=set(self._unindexed))
        return findings + self.orphan_findings()

    def orphan_findings(self) -> list[Finding]:
        """Informational findings for the ledgers the metadata no longer has."""
        return orphan_findings(self.orphans)

    # -- confirmation -------------------------------------------------------------------------

    def _confirm(self, ledgers: list[int], faults: dict[int, list[RecordFault]],
                 with_index: set[int] = frozenset(), settled: bool = False, again: bool = True) -> list[Finding]:
        """Judge ``ledgers`` again on the journal, a fresh index and the metadata as they are now.

        ``with_index``: ledgers whose conditions 1 and 2 are judged (on the index read now);
        ``faults``: records the walk found wrong, each re-read where the index points now.
        A ledger whose metadata changed less than ``SETTLE_SECONDS`` ago is judged once that time has passed
        (unless ``settled``): closed by an ack quorum, it may not have reached this bookie in full yet.
        A ledger found with records lost in an entry log that is gone now is judged once more on an index opened
        after (``again``): compaction may have moved the records and removed the log after the fresh index was
        opened (a RocksDB view is a snapshot), so that index pointed into a log that went meanwhile.
        """
        if not ledgers:
            return []
        reported_before = {ledger_id: set(self._reported[ledger_id]) for ledger_id in ledgers
                           if ledger_id in self._reported}
        findings: list[Finding] = []
        journaled: dict[int, int] = {}  # ledger -> its records this judgement counted as on their way (journal)
        unsettled: dict[int, float] = {}  # ledger -> when its metadata settles (time.time())
        # The journal first, the index after: an entry flushed in between is then found in the index.
        # Asked of the ledgers judged on the index and of those with records gone: the bookie may have
        # written an index page that points into its entry logger's buffer, not yet into the file.
        lost = {ledger_id for ledger_id in ledgers if any(fault.lost for fault in faults.get(ledger_id, ()))}
        pending = pending_entries(self.storage.layout, set(with_index) | lost)
        with self.reopen() as fresh, LedgerScanner(fresh, self.store, self.bookie_id) as scanner:
            for start in range(0, len(ledgers), METADATA_BATCH):
                for read in self.store.ledger_batch(ledgers[start:start + METADATA_BATCH]):
                    settles_at = None if settled else _settles_at(read)
                    if settles_at is not None:
                        unsettled[read.ledger_id] = settles_at
                        continue
                    counted = self.totals.journaled
                    findings.extend(self._confirm_ledger(scanner, read, faults.get(read.ledger_id, ()),
                                                         read.ledger_id in with_index, pending))
                    journaled[read.ledger_id] = self.totals.journaled - counted
            in_gone_logs = {f.ledger_id for f in findings if again and f.category is Category.LOST_ENTRY
                            and f.entry_log is not None and _log_gone(fresh, f.ledger_id, f.entry_log)}
        if in_gone_logs:
            findings = [f for f in findings if f.ledger_id not in in_gone_logs]
            for ledger_id in in_gone_logs:  # what this judgement reported and counted of them is judged anew
                self.totals.journaled -= journaled[ledger_id]
                self._reported.pop(ledger_id, None)
                if ledger_id in reported_before:
                    self._reported[ledger_id] = reported_before[ledger_id]
            findings.extend(self._confirm(sorted(in_gone_logs), faults, with_index & in_gone_logs, settled=True,
                                          again=False))
        if unsettled:
            wait = max(0.0, max(unsettled.values()) - time.time())
            log.info("%d ledger(s) changed in the last %gs (first: %s): judged again in %.1fs, once what their "
                     "writer's ack quorum did not wait for has arrived", len(unsettled), SETTLE_SECONDS,
                     min(unsettled), wait)
            time.sleep(wait)
            findings.extend(self._confirm(sorted(unsettled), faults, with_index & unsettled.keys(), settled=True,
                                          again=again))
        return findings

    def _confirm_ledger(self, scanner: LedgerScanner, read: LedgerRead, faults, with_index: bool,
                        pending: set[tuple[int, int]]) -> list[Finding]:
        ledger_id = read.ledger_id
        if read.error is not None:
            self._undecodable(ledger_id, read.error)
            return []
        if read.meta is None:
            if ledger_id in self.orphans:
                self.orphans[ledger_id].unreadable += sum(1 for f in faults if f.lost)
            return []  # deleted: its leftovers are garbage collection's
        findings = []
        if with_index:
            evidence = scanner.ledger_evidence(ledger_id, None)
            journaled = [e for ledger, e in pending if ledger == ledger_id]
            if journaled:
                self.totals.journaled += len(journaled)
                indexed = sorted(set(evidence.indexed or ()) | set(journaled))
                evidence = dataclasses.replace(evidence, indexed=indexed, index_problem=None,
                                               faults=self._unbuffered(ledger_id, evidence.faults, pending))
            recording = self._unindexed.get(ledger_id)
            if recording is not None and evidence.indexed is None:
                evidence = dataclasses.replace(evidence, logged_entries=sorted(recording.entries),
                                               logged_in=tuple(sorted(recording.logs)))
            findings.extend(judge_ledger(read.meta, self.bookie_id, evidence))
        still = self._still_faulty(scanner, ledger_id, faults)
        confirmed = self._unbuffered(ledger_id, still, pending)
        self.totals.journaled += len(still) - len(confirmed)
        reported = self._reported[ledger_id]
        for finding in findings:
            if finding.category in (Category.LOST_ENTRY, Category.CORRUPT_ENTRY):
                reported.update(_entries(finding))
        confirmed = tuple(f for f in confirmed if f.entry_id not in reported)
        if confirmed:
            record_findings = judge_record_faults(read.meta, self.bookie_id, ledger_id, confirmed)
            for finding in record_findings:
                reported.update(_entries(finding))
            findings.extend(record_findings)
        if not reported:
            del self._reported[ledger_id]
        return findings

    @staticmethod
    def _unbuffered(ledger_id: int, faults, pending: set[tuple[int, int]]) -> tuple[RecordFault, ...]:
        """``faults`` less the records gone whose entries the journal holds since the last mark: acknowledged,
        and the log's copy still to be flushed (the bookie serves them from its entry logger's buffer)."""
        return tuple(f for f in faults if not (f.lost and (ledger_id, f.entry_id) in pending))

    def _still_faulty(self, scanner: LedgerScanner, ledger_id: int, faults) -> tuple[RecordFault, ...]:
        """The walk's faults of the ledger that the index, read now, still points at and that still fail."""
        if not faults:
            return ()
        wanted = {f.entry_id for f in faults}
        try:
            current = {e: loc for e, loc in scanner.storage.locations(ledger_id) if e in wanted}
        except (EntryLogError, DbIndexError, OSError, ValueError):
            return ()  # the index itself is the problem now: the ledger's own check reports that
        verifier = self._verifier_for(ledger_id)
        confirmed = []
        for fault in faults:
            location = current.get(fault.entry_id)
            if location is None:
                continue  # no longer indexed: the ledger check says whether it is missing
            again = scanner.check_record(ledger_id, fault.entry_id, location, verifier,
                                         self._proven_lengths.get((location.entry_log_id, location.pos)))
            if again is None:
                continue
            moved = (location.entry_log_id, location.pos) != (fault.entry_log, fault.offset)
            # The same record failing its digest again keeps the walk's words; else the record read now speaks.
            confirmed.append(again if moved or fault.lost or again.lost else fault)
        return tuple(confirmed)

    # -- plumbing -----------------------------------------------------------------------------

    def _undecodable(self, ledger_id: int, error: Exception) -> None:
        if ledger_id not in self.undecodable:
            log.warning("ledger %d not judged: %s", ledger_id, error)
            self.undecodable.add(ledger_id)


def _still_there(entry_log: EntryLog, problem: EntryLogError) -> bool:
    """Whether a problem held until the walk's end is there in the file read again now."""
    if isinstance(problem, ZeroedHeader):
        return entry_log.header_zeroed()
    return entry_log.still_cut(problem)


def _logs_of(storage: BookieStorage, ledger_ids: list[int]) -> Iterator[tuple[int, set[int]]]:
    """(ledger id, the entry logs its index locates entries in) of each of ``ledger_ids`` whose index reads."""
    for ledger_id in ledger_ids:
        try:
            yield ledger_id, {location.entry_log_id for _, location in storage.locations(ledger_id)}
        except (IndexFileError, DbIndexError, OSError, ValueError):
            continue


def _logs_of_every_ledger(storage: BookieStorage) -> Iterator[tuple[int, set[int]]]:
    """(ledger id, the entry logs its index locates entries in) of every ledger of the index, as far as it reads."""
    try:
        for ledger_id, entry_ids, raw_locations in storage.indexed_ledgers():
            if entry_ids is not None:
                yield ledger_id, {raw >> 32 for raw in raw_locations}
    except DbIndexError as error:
        log.warning("%s", error)


def _same_file(storage: BookieStorage, ledger_id: int, log_file: EntryLogFile) -> bool:
    """Whether the ledger's locations into entry log ``log_file.entry_log_id`` name that file (DbLedgerStorage's
    ledger dirs each number their logs)."""
    try:
        return storage.entry_log_path(ledger_id, log_file.entry_log_id) == log_file.path
    except MissingEntryLog:
        return False


def _log_gone(storage: BookieStorage, ledger_id: int, entry_log_id: int) -> bool:
    try:
        storage.entry_log_path(ledger_id, entry_log_id)
    except MissingEntryLog:
        return True
    return False


def _entries(finding: Finding) -> Iterator[int]:
    for first, last in finding.entries or ():
        yield from range(first, last + 1)


def _next_batch(index: Iterator) -> list:
    """Up to METADATA_BATCH ledgers (and about BATCH_ENTRIES entries) from the index."""
    batch, entries = [], 0
    for item in index:
        batch.append(item)
        entries += 0 if item[1] is None else len(item[1])
        if len(batch) >= METADATA_BATCH or entries >= BATCH_ENTRIES:
            break
    return batch


def _settles_at(read: LedgerRead) -> float | None:
    """When (``time.time()``) a ledger whose metadata changed less than ``SETTLE_SECONDS`` ago settles; None for
    metadata older than that, or whose change time the store does not know (a dump)."""
    if read.meta is None or read.modified_ms is None:
        return None
    settles_at = read.modified_ms / 1000 + SETTLE_SECONDS
    # ZooKeeper's clock, not ours: a change stamped in our future waits no longer than the whole settling time
    return min(settles_at, time.time() + SETTLE_SECONDS) if settles_at > time.time() else None
