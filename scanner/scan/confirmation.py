"""Confirmation (BP-34's "read again before reporting"): nothing leaves a pass on the word of a snapshot.

What the index or the walk showed is read again from the bookie's files and the metadata as they are now (the
journal since the last mark, a fresh index, the record at the location it names, the ledger's metadata): a race with
a write, a flush, garbage collection or compaction is never a finding. An entry the index lacks but the journal holds
after the bookie's last mark is acknowledged and not yet flushed, not missing. A ledger whose metadata changed moments
ago (closed once an ack quorum had its last entries) is judged once the entries still on their way to this bookie
have had time to come.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Iterator

from scanner.checks.findings import Category, Finding
from scanner.checks.ledger_check import RecordFault, judge_ledger, judge_record_faults
from scanner.metadata.store import LedgerRead
from scanner.scan.index_step import METADATA_BATCH
from scanner.scan.settling import settles_at
from scanner.scan.targeted import LedgerScanner
from scanner.storage.bookie import BookieStorage
from scanner.storage.dbstorage import DbIndexError
from scanner.storage.entrylog import EntryLogError, MissingEntryLog
from scanner.storage.journal import pending_entries

log = logging.getLogger(__name__)


class Confirmation:
    """The pass's judgement of what its steps found, a part of :class:`scanner.scan.full_pass.BookiePass`."""

    def _confirm(self, ledgers: list[int], faults: dict[int, list[RecordFault]],
                 with_index: set[int] = frozenset(), settled: bool = False, again: bool = True) -> list[Finding]:
        """Judge ``ledgers`` again on the journal, a fresh index and the metadata as they are now.

        ``with_index``: ledgers whose conditions 1 and 2 are judged (on the index read now);
        ``faults``: records the walk found wrong, each re-read where the index points now.
        A ledger whose metadata changed less than ``settle_seconds`` ago is judged once that time has passed
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
        # Asked of the ledgers judged on the index and of those with records found wrong: the bookie may have
        # written an index page that points into its entry logger's buffer, not yet into the file; or it wrote the
        # entry again (a re-replication's add to a bookie holding a damaged copy) and its index on disk still
        # names the older record.
        faulty = {ledger_id for ledger_id in ledgers if faults.get(ledger_id)}
        pending = pending_entries(self.storage.layout, set(with_index) | faulty)
        with self.reopen() as fresh, LedgerScanner(fresh, self.store, self.bookie_id) as scanner:
            for start in range(0, len(ledgers), METADATA_BATCH):
                for read in self.store.ledger_batch(ledgers[start:start + METADATA_BATCH]):
                    settles = None if settled else settles_at(read, self.settle_seconds)
                    if settles is not None:
                        unsettled[read.ledger_id] = settles
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
                     "writer's ack quorum did not wait for has arrived", len(unsettled), self.settle_seconds,
                     min(unsettled), wait)
            self.pacer.pause(wait)
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
        """``faults`` less the records of entries the journal holds since the last mark: acknowledged, and the log's
        copy still to be flushed (the bookie serves them from its entry logger's buffer), or still to replace the
        record the index on disk names (an ``.idx`` bookie writes its index at its next checkpoint). Seen live: a
        ReplicationWorker copied a ledger back onto a bookie whose old copy of an entry was corrupt, and the pass
        judged that old record, marked the ledger, and the worker cleared the mark, again and again."""
        return tuple(f for f in faults if (ledger_id, f.entry_id) not in pending)

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


def _log_gone(storage: BookieStorage, ledger_id: int, entry_log_id: int) -> bool:
    try:
        storage.entry_log_path(ledger_id, entry_log_id)
    except MissingEntryLog:
        return True
    return False


def _entries(finding: Finding) -> Iterator[int]:
    for first, last in finding.entries or ():
        yield from range(first, last + 1)

