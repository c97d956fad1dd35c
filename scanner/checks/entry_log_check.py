"""File-level damage of one entry log, as findings."""

from __future__ import annotations

from typing import Callable, Iterable

from scanner.checks.findings import Category, Finding
from scanner.storage.entrylog import EntryLogError, TruncatedRecord, ZeroedHeader


def judge_entry_log(entry_log_id: int, problems: Iterable[EntryLogError], active: bool,
                    indexed_into: Callable[[], bool] | None = None) -> list[Finding]:
    """``damaged_entry_log`` findings; ``active``: the bookie's current log (newest, no ledgers map yet);
    ``indexed_into()``: whether the bookie's index, read now, points into the log (asked only of a log whose
    header reads as zeros; None: taken as yes).

    A header of zeros is a log BookKeeper created and has not written yet, or a header lost. Its DirectEntryLogger
    (4.16.7) creates a log at its full size, zero-filled (``DirectWriter``: fallocate), and queues the write of the
    header block behind that (``DirectEntryLogger.newDirectWriter``, ``WriterWithMetadata``): a bookie stopped, or
    stuck, before the write leaves the file all zeros. Its garbage collector reads such a file as empty and deletes
    it (``GarbageCollectorThread.extractMetaFromEntryLogs``: no ledgers map, and the scan it falls back on,
    ``LogReaderScan.scan``, stops at the zero at offset 1024). The index never points into a log before its header
    is in the file: DbLedgerStorage writes locations after the entry logger's flush, which waits for the header
    write (``SingleDirectoryDbLedgerStorage.checkpoint``, ``DirectEntryLogger.flush``); DefaultEntryLogger's header
    is the first bytes of its write buffer (``EntryLoggerAllocator.allocateNewLog``), so it reaches the file before
    any record. So a header of zeros is damage only when the index points into the log: a header lost, and the
    records located there at risk of that deletion.
    """
    findings = []
    for problem in problems:
        # The log a bookie still appends to ends wherever its write buffer last reached the disk.
        if active and isinstance(problem, TruncatedRecord):
            continue
        if isinstance(problem, ZeroedHeader) and indexed_into is not None and not indexed_into():
            continue
        findings.append(Finding(Category.DAMAGED_ENTRY_LOG, getattr(problem, "ledger_id", None), None,
                                entry_log_id, problem.offset, str(problem)))
    return findings
