"""One bookie checked against the cluster's metadata: the I/O half of BP-24's scan.

Two steps, as BP-24 lays them out: ``scan_ledger`` (conditions 1 and 2, and whether every record
the index points to is still there) and ``scan_entry_log`` (condition 3: every record's digest).
The judgement itself is in ``scanner.checks``; this module reads, paces and collects.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

from scanner.checks.entry_log_check import judge_entry_log
from scanner.checks.findings import Category, Finding
from scanner.checks.ledger_check import (LedgerEvidence, RecordFault, judge_ledger, judge_record_faults,
                                         orphan_finding)
from scanner.metadata.ledger import LedgerMetadata, MetadataFormatError
from scanner.storage.bookie import BookieStorage, EntryLogFile, file_size
from scanner.storage.dbstorage import DbIndexError
from scanner.storage.entry import DigestVerifier
from scanner.storage.indexfile import IndexFileError
from scanner.storage.entrylog import EntryLog, EntryLogError, MissingEntryLog, WrongEntry
from scanner.report import ScanReport, storage_problems

log = logging.getLogger(__name__)

# How often a ledger's metadata may change under one judgement before we report what we have.
MAX_REJUDGEMENTS = 3
OPEN_LOG_CACHE = 32


class Pacer(Protocol):
    def take_bytes(self, n: int) -> object: ...
    def take_entries(self, n: int) -> object: ...


class Unpaced:
    def take_bytes(self, n: int) -> None:
        return None

    def take_entries(self, n: int) -> None:
        return None


class _WalkStopped(Exception):
    """Raised from the pace callback to end an entry-log walk at a record boundary."""


@dataclass
class ScanTotals:
    ledgers_checked: int = 0
    entry_logs_scanned: int = 0
    entries_verified: int = 0
    bytes_scanned: int = 0


@dataclass
class OrphanTrace:
    """What a scan saw of a ledger the metadata no longer has."""

    indexed: int | None = None
    unreadable: int = 0
    logs: set[int] = field(default_factory=set)


def orphan_findings(orphans: dict[int, OrphanTrace]) -> list[Finding]:
    """One informational finding per ledger the metadata no longer has, in ledger order."""
    findings = []
    for ledger_id in sorted(orphans):
        orphan = orphans[ledger_id]
        finding = orphan_finding(ledger_id, orphan.indexed, orphan.unreadable, orphan.logs)
        if finding is not None:
            findings.append(finding)
    return findings


class BookieScanner:
    """Scans one bookie's storage against a metadata store; reusable step by step by the agent."""

    def __init__(self, storage: BookieStorage, store, bookie_id: str, pacer: Pacer | None = None,
                 progress: Callable[[str, int], None] | None = None):
        self.storage = storage
        self.store = store
        self.bookie_id = bookie_id
        self.pacer = pacer or Unpaced()
        self.progress = progress or (lambda what, n: None)
        self.totals = ScanTotals()
        self._metadata: dict[int, LedgerMetadata | None] = {}
        self._verifiers: dict[int, DigestVerifier | None] = {}
        self._logs: OrderedDict[str, EntryLog] = OrderedDict()
        self._orphans: dict[int, OrphanTrace] = defaultdict(OrphanTrace)
        self.undecodable: set[int] = set()  # ledgers whose metadata does not decode

    def close(self) -> None:
        for entry_log in self._logs.values():
            entry_log.close()
        self._logs.clear()

    def __enter__(self) -> "BookieScanner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- which ledgers ------------------------------------------------------------------------

    def ledgers_to_check(self) -> Iterable[int]:
        """Every ledger the local index knows, then every ledger the metadata places on this bookie."""
        local = set(self.storage.ledger_ids())
        yield from sorted(local)
        for ledger_id in self.store.ledger_ids():
            if ledger_id in local:
                continue
            meta = self._read(ledger_id)  # not cached: the cluster may hold millions of ledgers
            if meta is not None and any(self.bookie_id in bookies for _, bookies in meta.segments):
                yield ledger_id

    # -- step 1: a ledger ---------------------------------------------------------------------

    def scan_ledger(self, ledger_id: int, verify_digests: bool = False) -> list[Finding]:
        """Conditions 1 and 2 plus the index-to-record check for one ledger.

        Only record headers are read unless ``verify_digests``: then every indexed record's digest is
        checked too (condition 3 for this ledger alone: suspects, follow-ups, ``scan --ledger``).
        """
        self.totals.ledgers_checked += 1
        meta = self._fetch(ledger_id)
        verifier = self.verifier_for(ledger_id) if verify_digests else None
        evidence = self.ledger_evidence(ledger_id, verifier)
        findings = judge_ledger(meta, self.bookie_id, evidence)
        if any(f.category is Category.MISSING_LEDGER for f in findings):
            evidence = self._with_logged_records(evidence)
            findings = judge_ledger(meta, self.bookie_id, evidence)
        for _ in range(MAX_REJUDGEMENTS):
            if all(f.category.informational for f in findings):
                break
            # BP-34's rule: the metadata may have moved on while we read; judge again on the fresh copy.
            fresh = self._fetch(ledger_id)
            if fresh == meta:
                break
            meta = fresh
            findings = judge_ledger(meta, self.bookie_id, evidence)
        if ledger_id in self.undecodable:
            return []
        if meta is None:
            orphan = self._orphans[ledger_id]
            orphan.indexed = None if evidence.indexed is None else len(evidence.indexed)
            orphan.unreadable = sum(1 for f in evidence.faults if f.lost)
            return []
        return findings

    def ledger_evidence(self, ledger_id: int, verifier: DigestVerifier | None) -> LedgerEvidence:
        """What the index shows of the ledger now, each record it points to read back (and verified with ``verifier``)."""
        indexed: list[int] = []
        faults: list[RecordFault] = []
        try:
            if self.storage.ledger_index(ledger_id) is None:
                return LedgerEvidence(ledger_id, None)
            for entry_id, location in self.storage.locations(ledger_id):
                indexed.append(entry_id)
                self.pacer.take_entries(1)
                fault = self.check_record(ledger_id, entry_id, location, verifier)
                if fault is not None:
                    faults.append(fault)
        except FileNotFoundError:
            return LedgerEvidence(ledger_id, None)  # deleted under us; the metadata re-read tells
        except (IndexFileError, DbIndexError) as exc:
            return LedgerEvidence(ledger_id, None, tuple(faults), index_problem=str(exc))
        return LedgerEvidence(ledger_id, indexed, tuple(faults))

    def check_record(self, ledger_id: int, entry_id: int, location,
                      verifier: DigestVerifier | None) -> RecordFault | None:
        try:
            entry_log = self._open_log(self.storage.entry_log_path(ledger_id, location.entry_log_id),
                                       location.entry_log_id)
            entry = entry_log.read_entry(location.pos, ledger_id, entry_id)
        except WrongEntry as exc:
            return RecordFault(entry_id, location.entry_log_id, location.pos, False, str(exc))
        except EntryLogError as exc:
            return RecordFault(entry_id, location.entry_log_id, location.pos, True, str(exc))
        if verifier is not None:
            self.pacer.take_bytes(len(entry))
            self.totals.entries_verified += 1
            self.totals.bytes_scanned += len(entry)
            if not verifier.verify(entry):
                return RecordFault(entry_id, location.entry_log_id, location.pos, False,
                                   f"{verifier.digest_type.name} digest mismatch ({len(entry)} bytes)")
        return None

    def _with_logged_records(self, evidence: LedgerEvidence) -> LedgerEvidence:
        """For a ledger without index: which of its records still sit in the entry logs."""
        entries: set[int] = set()
        logs: set[int] = set()
        for log_file in self.storage.entry_logs():
            try:
                entry_log = self._open_log(log_file.path, log_file.entry_log_id)
            except MissingEntryLog:
                continue
            ledgers_map = entry_log.ledgers_map()
            if ledgers_map is not None and evidence.ledger_id not in ledgers_map:
                continue  # a finished log says what it holds; only map-less logs need a walk
            for record in entry_log.records(pace=self.pacer.take_bytes):
                if record.ledger_id == evidence.ledger_id:
                    entries.add(record.entry_id)
                    logs.add(log_file.entry_log_id)
        return dataclasses.replace(evidence, logged_entries=sorted(entries), logged_in=tuple(sorted(logs)))

    # -- step 2: an entry log -----------------------------------------------------------------

    def scan_entry_log(self, log_file: EntryLogFile, start: int | None = None,
                       checkpoint: Callable[[int, list[Finding]], bool] | None = None) -> list[Finding]:
        """Condition 3 for every record of one entry log (from the record boundary ``start``), plus file-level damage.

        With ``checkpoint``, about every MiB walked it is called at a record boundary with the file
        offset reached and the findings about everything before it, which are not returned again;
        when it returns True the walk stops there, to be resumed later with ``start`` = that offset.
        """
        try:
            entry_log = self._open_log(log_file.path, log_file.entry_log_id)
        except MissingEntryLog:
            return []  # garbage collection removed it after we listed it: nothing to judge
        self.totals.entry_logs_scanned += 1
        faults: dict[int, list[RecordFault]] = defaultdict(list)
        judged_problems = 0

        def judge_so_far() -> list[Finding]:
            nonlocal judged_problems
            problems = entry_log.problems[judged_problems:]
            judged_problems = len(entry_log.problems)
            findings = (judge_entry_log(log_file.entry_log_id, problems, self.storage.is_active_log(log_file, entry_log.header_has_map))
                        if problems else [])
            for ledger_id, ledger_faults in faults.items():
                findings.extend(self._judge_faults(ledger_id, ledger_faults))
            faults.clear()
            return findings

        pace = self.pacer.take_bytes
        if checkpoint is not None:
            reached = start if start is not None else (entry_log.header.data_start if entry_log.header else 0)

            def pace_and_checkpoint(n: int) -> None:
                nonlocal reached
                self.pacer.take_bytes(n)
                reached += n
                if checkpoint(reached, judge_so_far()):
                    raise _WalkStopped

            pace = pace_and_checkpoint

        try:
            for failure in entry_log.verify_records(self.verifier_for, start=start, pace=pace):
                if self._is_live_copy(failure.ledger_id, failure.entry_id, log_file, failure.pos):
                    faults[failure.ledger_id].append(
                        RecordFault(failure.entry_id, log_file.entry_log_id, failure.pos, False, failure.reason))
            stopped = False
        except _WalkStopped:
            stopped = True
        stats = entry_log.stats
        self.totals.entries_verified += stats.entries_verified
        self.totals.bytes_scanned += stats.bytes_scanned
        for ledger_id in stats.ledgers_seen:
            if self._fetch_cached(ledger_id) is None and ledger_id not in self.undecodable:
                self._orphans[ledger_id].logs.add(log_file.entry_log_id)
        return [] if stopped else judge_so_far()

    def _judge_faults(self, ledger_id: int, faults: list[RecordFault]) -> list[Finding]:
        meta = self._fetch_cached(ledger_id)
        findings = judge_record_faults(meta, self.bookie_id, ledger_id, tuple(faults))
        fresh = self._fetch(ledger_id) if findings else meta
        if fresh != meta:
            findings = judge_record_faults(fresh, self.bookie_id, ledger_id, tuple(faults))
        return findings

    def _is_live_copy(self, ledger_id: int, entry_id: int, log_file: EntryLogFile, pos: int) -> bool:
        # Compaction leaves stale copies behind; only the copy the index points to is served.
        location = next((loc for e, loc in self.storage.locations(ledger_id) if e == entry_id), None)
        return location is not None and location.entry_log_id == log_file.entry_log_id and location.pos == pos

    def orphan_findings(self) -> list[Finding]:
        """Informational findings for data of ledgers the metadata no longer has (after both steps)."""
        return orphan_findings(self._orphans)

    # -- plumbing -----------------------------------------------------------------------------

    def _read(self, ledger_id: int) -> LedgerMetadata | None:
        try:
            return self.store.ledger(ledger_id)
        except MetadataFormatError as exc:
            # Not ours to judge without metadata we can read; never call it deleted.
            if ledger_id not in self.undecodable:
                log.warning("ledger %d not judged: %s", ledger_id, exc)
                self.undecodable.add(ledger_id)
            return None

    def _fetch(self, ledger_id: int) -> LedgerMetadata | None:
        """The ledger's metadata read now, remembered for the digest checks of the entry-log step."""
        meta = self._read(ledger_id)
        self._metadata[ledger_id] = meta
        self._verifiers.pop(ledger_id, None)
        return meta

    def _fetch_cached(self, ledger_id: int) -> LedgerMetadata | None:
        if ledger_id in self._metadata:
            return self._metadata[ledger_id]
        return self._fetch(ledger_id)

    def verifier_for(self, ledger_id: int) -> DigestVerifier | None:
        if ledger_id not in self._verifiers:
            meta = self._fetch_cached(ledger_id)
            if meta is None or meta.digest_type is None:
                self._verifiers[ledger_id] = None
            else:
                self._verifiers[ledger_id] = DigestVerifier(meta.digest_type, meta.password or b"")
        return self._verifiers[ledger_id]

    def _open_log(self, path, entry_log_id: int) -> EntryLog:
        key = str(path)
        entry_log = self._logs.get(key)
        if entry_log is None:
            entry_log = EntryLog(path, entry_log_id)
            self._logs[key] = entry_log
            if len(self._logs) > OPEN_LOG_CACHE:
                self._logs.popitem(last=False)[1].close()
        else:
            self._logs.move_to_end(key)
        return entry_log



def scan_bookie(storage: BookieStorage, store, bookie_id: str, storage_kind: str,
                ledgers: list[int] | None = None, entry_logs: list[int] | None = None,
                pacer: Pacer | None = None, progress=None, scratch=None,
                parallel: "ParallelDirs | None" = None) -> ScanReport:
    """A whole on-demand scan: a full pass, or only the ledgers (through their index) or entry logs asked for.

    With ``parallel`` and several ledger dirs, the full pass runs one process per dir (``parallel.jobs``
    at once), each opening the metadata at ``parallel.metadata_uri`` itself.
    """
    if ledgers is None and entry_logs is None:
        dirs = len(storage.layout.ledger_dirs)
        if parallel is not None and parallel.jobs > 1 and dirs > 1:
            return _parallel_pass(storage.layout, bookie_id, storage_kind, parallel, scratch)
        return _full_pass(storage, store, bookie_id, storage_kind, pacer, progress, scratch)
    report = ScanReport(bookie_id, storage_kind)
    with BookieScanner(storage, store, bookie_id, pacer) as scanner:
        if ledgers is not None:
            if progress:
                progress.start("ledgers", len(ledgers), "ledgers")
            for ledger_id in ledgers:
                # Narrowed to ledgers: their records are verified through the index, not by whole logs.
                report.findings.extend(scanner.scan_ledger(ledger_id, verify_digests=True))
                if progress:
                    progress.advance(1)
        log_files = [] if entry_logs is None else [f for f in storage.entry_logs() if f.entry_log_id in entry_logs]
        sizes = {f: file_size(f.path) for f in log_files}
        if progress:
            progress.start("entry logs", sum(sizes.values()), "B")
        for log_file in log_files:
            report.findings.extend(scanner.scan_entry_log(log_file))
            if progress:
                progress.advance(sizes[log_file])
        report.findings.extend(scanner.orphan_findings())
        if progress:
            progress.finish()
        report.findings.extend(storage_problems(storage.unreadable_indexes, scanner.undecodable))
        return _with_totals(report, scanner.totals)


def _full_pass(storage: BookieStorage, store, bookie_id: str, storage_kind: str, pacer, progress,
               scratch) -> ScanReport:
    from scanner.bookie_pass import BookiePass
    from scanner.storage.bookie import open_bookie

    report = ScanReport(bookie_id, storage_kind)
    with BookiePass(storage, store, bookie_id, scratch, lambda: open_bookie(storage.layout, scratch),
                    pacer) as full:
        report.findings.extend(full.run(progress))
        report.findings.extend(storage_problems(storage.unreadable_indexes, full.undecodable))
        return _with_totals(report, full.totals)


@dataclass(frozen=True)
class ParallelDirs:
    """How a full scan of a bookie with several ledger dirs runs them side by side."""

    metadata_uri: str
    jobs: int
    bytes_per_second: float | None = None  # for the whole scan: each dir's process gets its share


def _parallel_pass(layout, bookie_id: str, storage_kind: str, parallel: ParallelDirs, scratch) -> ScanReport:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    dirs = len(layout.ledger_dirs)
    jobs = min(parallel.jobs, dirs)
    layout = dataclasses.replace(layout, conf=dict(layout.conf))  # picklable for the processes
    rate = None if parallel.bytes_per_second is None else parallel.bytes_per_second / jobs
    report, totals = ScanReport(bookie_id, storage_kind), ScanTotals()
    # Spawned, not forked: a fork would copy the parent's ZooKeeper and RocksDB threads half-alive.
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        runs = [pool.submit(_dir_pass, layout, bookie_id, parallel.metadata_uri, rate, scratch, i) for i in range(dirs)]
        seen = set()
        for run in runs:
            findings, dir_totals = run.result()
            for finding in findings:  # a ledger's records in another dir's logs may be judged by both
                key = (finding.category, finding.ledger_id, finding.entries, finding.entry_log)
                if key not in seen:
                    seen.add(key)
                    report.findings.append(finding)
            for name in ("ledgers_checked", "entry_logs_scanned", "entries_verified", "bytes_scanned"):
                setattr(totals, name, getattr(totals, name) + getattr(dir_totals, name))
    return _with_totals(report, totals)


def _dir_pass(layout, bookie_id: str, metadata_uri: str, rate, scratch, dir_index: int):
    """One ledger dir's full pass, in a process of its own."""
    from scanner import allocator
    from scanner.bookie_pass import BookiePass
    from scanner.metadata.uri import open_metadata
    from scanner.storage.bookie import open_bookie
    from throttle import Pacer as RatePacer

    allocator.give_back_freed_buffers()  # a spawned process starts with the C library's defaults
    with open_metadata(metadata_uri) as store, open_bookie(layout, scratch) as storage, \
            BookiePass(storage, store, bookie_id, scratch, lambda: open_bookie(layout, scratch),
                       RatePacer(bytes_per_second=rate), dir_index=dir_index) as full:
        own_index = str(layout.index_current_dirs[dir_index])
        findings = full.run() + storage_problems({d: why for d, why in storage.unreadable_indexes.items()
                                                  if d == own_index}, full.undecodable)
        return findings, ScanTotals(full.totals.ledgers_checked, full.totals.entry_logs_scanned,
                                    full.totals.entries_verified, full.totals.bytes_scanned)


def _with_totals(report: ScanReport, totals: ScanTotals) -> ScanReport:
    report.ledgers_checked = totals.ledgers_checked
    report.entry_logs_scanned = totals.entry_logs_scanned
    report.entries_verified = totals.entries_verified
    report.bytes_scanned = totals.bytes_scanned
    return report
