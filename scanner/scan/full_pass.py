"""A full pass over one bookie (or one of its ledger dirs): the index read once in its order, every entry log
read once front to back.

1. The index (:mod:`scanner.scan.index_step`): for each ledger (metadata read in pipelined batches),
   conditions 1 and 2 from its entry list; its digest type and key go to a compact table, its locations to sorted
   runs.
2. The cluster (:mod:`scanner.scan.index_step`): ledgers the metadata places on this bookie that the index lacks
   (condition 1).
3. The walk (:mod:`scanner.scan.log_walks`): each entry log once, every digest verified, every location the index
   holds matched against the record the walk finds there (condition 3 and the index-to-record check as a join),
   every finished log's ledgers map checked against what the walk saw.
4. Confirmation (:mod:`scanner.scan.confirmation`): nothing leaves the pass on the word of a snapshot; what the
   index or the walk showed is read again from the bookie's files and the metadata as they are now.

Each step is a part of :class:`BookiePass`, which holds the pass's state and ends it (:meth:`BookiePass.finish`).
The steps are public so the agent can pace, checkpoint and resume between them. Memory holds one
batch of ledgers, one sorted run or one window of locations, the compact table and what is
damaged: no metadata object per ledger, nothing per entry.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Callable

from scanner.checks.findings import Finding
from scanner.checks.ledger_check import RecordFault
from scanner.metadata.store import MetadataNeverRead
from scanner.scan.confirmation import Confirmation
from scanner.scan.index_step import IndexStep, RecordingVerifier
from scanner.scan.ledger_table import LedgerTable
from scanner.scan.location_runs import LocationRuns
from scanner.scan.log_walks import LogWalks
from scanner.scan.orphans import OrphanTrace, orphan_findings
from scanner.scan.pacing import Pacer, Unpaced
from scanner.scan.record_walk_types import KnownLedgers
from scanner.scan.settling import SETTLE_SECONDS
from scanner.scan.targeted import verifier_of
from scanner.scan.totals import ScanTotals
from scanner.storage.bookie import BookieStorage, EntryLogFile, file_size
from scanner.storage.entry import DigestVerifier

log = logging.getLogger(__name__)


class BookiePass(IndexStep, LogWalks, Confirmation):
    """One full pass over what ``dir_index`` owns (None: the whole bookie).

    A ledger dir owns the ledgers ``L mod dirs == dir_index`` (as DbLedgerStorage places them; for
    `.idx` storage it is just a fair split) for conditions 1 and 2, and the entry logs in it.

    Without :meth:`read_index`, :meth:`walk` checks chosen logs alone (``scan --entry-log``, suspect logs): there
    is no index to join, so every record that fails is judged on the index as it is when confirmed.
    """

    def __init__(self, storage: BookieStorage, store, bookie_id: str, scratch: Path | None,
                 reopen: Callable[[], BookieStorage], pacer: Pacer | None = None, dir_index: int | None = None,
                 settle_seconds: float = SETTLE_SECONDS):
        self.storage = storage
        self.store = store
        self.bookie_id = bookie_id
        self.scratch = scratch
        self.reopen = reopen  # a fresh view of the bookie's index (a RocksDB view is a snapshot)
        self.pacer = pacer or Unpaced()
        self.dir_index = dir_index
        self.settle_seconds = settle_seconds
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
        self._unindexed: dict[int, RecordingVerifier] = {}  # placed on this bookie by the metadata, not in the index
        self._not_found: list[int] = []  # `.idx`: placed on this bookie, no index file where the bookie looks
        self._unlisted: dict[int, DigestVerifier | None] = {}  # ledgers only the logs named, read once
        self.metadata_unread: set[int] = set()  # of those, ledgers whose metadata was out of reach: not judged
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

    def _verifier_for(self, ledger_id: int):
        recording = self._unindexed.get(ledger_id)
        if recording is not None:
            return recording
        listed, verifier = self.table.lookup(ledger_id)
        if listed:
            return verifier
        if ledger_id in self._unlisted:
            return self._unlisted[ledger_id]
        if ledger_id in self._absent or ledger_id in self.undecodable or ledger_id in self.metadata_unread:
            return None
        try:
            read = self.store.ledger_batch([ledger_id])[0]  # a ledger the index does not list: deleted, mostly
        except MetadataNeverRead:
            # ZooKeeper is down and the agent never read this ledger: its records are not read by the bookie (no
            # index names them), so the walk goes on without them rather than stall the pass for the outage.
            if not self.metadata_unread:
                log.warning("the walk passes the records of ledger %d (not in the index, its metadata not read before "
                            "the outage) and of any other such ledger unverified; the next pass judges them",
                            ledger_id)
            self.metadata_unread.add(ledger_id)
            return None
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
        self._count_orphans_indexed()
        return findings + self.orphan_findings()

    def orphan_findings(self) -> list[Finding]:
        """Informational findings for the ledgers the metadata no longer has."""
        return orphan_findings(self.orphans)

    def _count_orphans_indexed(self) -> None:
        """On `.idx` storage, whose index the pass reads from the metadata's side, the entries the index still holds
        of each deleted ledger the walks met, from its index file (a few files: looked for by name)."""
        unread = [ledger_id for ledger_id, orphan in self.orphans.items() if orphan.indexed is None]
        if not unread or self.storage.layout.storage == "db":
            return
        with self.reopen() as fresh:
            for ledger_id, entry_ids, _ in fresh.ledger_indexes(sorted(unread)):
                if entry_ids is not None:
                    self.orphans[ledger_id].indexed = len(entry_ids)

    # -- plumbing -----------------------------------------------------------------------------

    def _undecodable(self, ledger_id: int, error: Exception) -> None:
        if ledger_id not in self.undecodable:
            log.warning("ledger %d not judged: %s", ledger_id, error)
            self.undecodable.add(ledger_id)
