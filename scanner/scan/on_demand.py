"""A whole on-demand scan of one bookie (``scan``, ``export``, ``repair``, ``demo``): a full pass, or only the
ledgers (through their index) and entry logs asked for; several ledger dirs side by side in processes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scanner.report import ScanReport, storage_problems
from scanner.scan.full_pass import BookiePass
from scanner.scan.orphans import orphan_findings
from scanner.scan.pacing import Pacer
from scanner.scan.settling import SETTLE_SECONDS
from scanner.scan.targeted import LedgerScanner
from scanner.scan.totals import ScanTotals
from scanner.storage.bookie import BookieStorage, file_size, open_bookie


@dataclass(frozen=True)
class ParallelDirs:
    """How a full scan of a bookie with several ledger dirs runs them side by side."""

    metadata_uri: str
    jobs: int
    bytes_per_second: float | None = None  # for the whole scan: each dir's process gets its share


def scan_bookie(storage: BookieStorage, store, bookie_id: str, storage_kind: str,
                ledgers: list[int] | None = None, entry_logs: list[int] | None = None,
                pacer: Pacer | None = None, progress=None, scratch=None,
                parallel: ParallelDirs | None = None, settle_seconds: float = SETTLE_SECONDS) -> ScanReport:
    """A whole on-demand scan: a full pass, or only the ledgers (through their index) or entry logs asked for.

    With ``parallel`` and several ledger dirs, the full pass runs one process per dir (``parallel.jobs``
    at once), each opening the metadata at ``parallel.metadata_uri`` itself. ``settle_seconds``: how long after
    its metadata changed a ledger is judged.
    """
    if ledgers is None and entry_logs is None:
        dirs = len(storage.layout.ledger_dirs)
        if parallel is not None and parallel.jobs > 1 and dirs > 1:
            return _parallel_pass(storage.layout, bookie_id, storage_kind, parallel, scratch, settle_seconds)
        return _full_pass(storage, store, bookie_id, storage_kind, pacer, progress, scratch, settle_seconds)
    return _chosen(storage, store, bookie_id, storage_kind, ledgers or [], entry_logs or [], pacer, progress, scratch,
                   settle_seconds)


def _chosen(storage: BookieStorage, store, bookie_id: str, storage_kind: str, ledgers: list[int],
            entry_logs: list[int], pacer, progress, scratch, settle_seconds) -> ScanReport:
    """The ledgers asked for, their records verified through their index; the entry logs asked for, walked whole."""
    report = ScanReport(bookie_id, storage_kind)
    with LedgerScanner(storage, store, bookie_id, pacer) as scanner, \
            BookiePass(storage, store, bookie_id, scratch, lambda: open_bookie(storage.layout, scratch), pacer,
                       settle_seconds=settle_seconds) as logs:
        if progress and ledgers:
            progress.start("ledgers", len(ledgers), "ledgers")
        for ledger_id in ledgers:
            report.findings.extend(scanner.scan_ledger(ledger_id, verify_digests=True))
            if progress:
                progress.advance(1)
        log_files = [f for f in logs.log_files if f.entry_log_id in entry_logs]
        if progress and log_files:
            progress.start("entry logs", sum(file_size(f.path) for f in log_files), "B")
        for log_file in log_files:
            report.findings.extend(logs.walk(log_file, progress=progress))
        report.findings.extend(orphan_findings(scanner.orphans, logs.orphans))
        if progress:
            progress.finish()
        report.findings.extend(storage_problems(storage.unreadable_indexes, scanner.undecodable | logs.undecodable))
        scanner.totals.add(logs.totals)
        return _with_totals(report, scanner.totals)


def _full_pass(storage: BookieStorage, store, bookie_id: str, storage_kind: str, pacer, progress,
               scratch, settle_seconds) -> ScanReport:
    report = ScanReport(bookie_id, storage_kind)
    with BookiePass(storage, store, bookie_id, scratch, lambda: open_bookie(storage.layout, scratch),
                    pacer, settle_seconds=settle_seconds) as full:
        report.findings.extend(full.run(progress))
        report.findings.extend(storage_problems(storage.unreadable_indexes, full.undecodable))
        return _with_totals(report, full.totals)


def _parallel_pass(layout, bookie_id: str, storage_kind: str, parallel: ParallelDirs, scratch,
                   settle_seconds) -> ScanReport:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    dirs = len(layout.ledger_dirs)
    jobs = min(parallel.jobs, dirs)
    layout = dataclasses.replace(layout, conf=dict(layout.conf))  # picklable for the processes
    rate = None if parallel.bytes_per_second is None else parallel.bytes_per_second / jobs
    report, totals = ScanReport(bookie_id, storage_kind), ScanTotals()
    # Spawned, not forked: a fork would copy the parent's ZooKeeper and RocksDB threads half-alive.
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        runs = [pool.submit(_dir_pass, layout, bookie_id, parallel.metadata_uri, rate, scratch, settle_seconds, i)
                for i in range(dirs)]
        seen = set()
        for run in runs:
            findings, dir_totals = run.result()
            for finding in findings:  # a ledger's records in another dir's logs may be judged by both
                key = (finding.category, finding.ledger_id, finding.entries, finding.entry_log)
                if key not in seen:
                    seen.add(key)
                    report.findings.append(finding)
            totals.add(dir_totals)
    return _with_totals(report, totals)


def _dir_pass(layout, bookie_id: str, metadata_uri: str, rate, scratch, settle_seconds, dir_index: int):
    """One ledger dir's full pass, in a process of its own."""
    from scanner.metadata.uri import open_metadata
    from scanner.scan import allocator
    from throttle import Pacer as RatePacer

    allocator.give_back_freed_buffers()  # a spawned process starts with the C library's defaults
    with open_metadata(metadata_uri) as store, open_bookie(layout, scratch) as storage, \
            BookiePass(storage, store, bookie_id, scratch, lambda: open_bookie(layout, scratch),
                       RatePacer(bytes_per_second=rate), dir_index=dir_index, settle_seconds=settle_seconds) as full:
        own_index = str(layout.index_current_dirs[dir_index])
        findings = full.run() + storage_problems({d: why for d, why in storage.unreadable_indexes.items()
                                                  if d == own_index}, full.undecodable)
        return findings, full.totals


def _with_totals(report: ScanReport, totals: ScanTotals) -> ScanReport:
    report.ledgers_checked = totals.ledgers_checked
    report.entry_logs_scanned = totals.entry_logs_scanned
    report.entries_verified = totals.entries_verified
    report.bytes_scanned = totals.bytes_scanned
    return report
