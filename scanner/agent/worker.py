"""One ledger directory's scanner: suspects first, then its share of a regular pass, under a throttle.

A pass checks the dir's ledgers (conditions 1-2, in id order), then walks its entry logs in id
order verifying every digest (condition 3). The cursor is saved every ``checkpoint_seconds`` and
whenever the worker stops, so a restart resumes at the last record boundary it saved.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from scanner.agent.cursor import ENTRY_LOGS, LEDGERS, WAITING, Cursor, cursor_path, fresh_cursor, load_cursor, save_cursor
from scanner.agent.findingbook import FindingBook
from scanner.agent.suspects import ENTRY_LOG, Suspect, SuspectQueue
from scanner.bookie_scan import BookieScanner
from scanner.checks.findings import Finding
from scanner.metadata.store import MetadataUnavailable
from scanner.storage.bookie import BookieStorage, EntryLogFile, open_bookie
from scanner.storage.layout import BookieLayout
from throttle import Pacer

log = logging.getLogger(__name__)

# A DbLedgerStorage index view is a snapshot: reopen it this often so new entries are seen.
STORAGE_REFRESH_SECONDS = 300.0
# The lowest derived rate: a pass far ahead of schedule still moves.
MIN_BYTES_PER_SECOND = 1024.0
RETRY_SECONDS = 5.0
ERROR_RETRY_SECONDS = 60.0
IDLE_WAIT_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    layout: BookieLayout
    state_dir: Path
    period_seconds: float
    checkpoint_seconds: float
    bytes_per_second: float | None  # the cap; None: unlimited
    entries_per_second: float | None
    spread_evenly: bool = False  # pace a pass over the whole period instead of reading at the cap


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    ledger_dir: str
    phase: str
    pass_progress: float
    passes_completed: int
    eta_seconds: float | None
    bytes_per_second: float | None
    ledgers_done: int
    ledgers_total: int
    bytes_done: int
    bytes_total: int
    pass_started: float
    last_pass_finished: float | None
    last_progress: float  # epoch seconds of the last cursor advance
    suspects_scanned: int
    error: str | None
    entries_verified: int = 0  # digests checked by the current pass's scanner (it starts again at 0)


class _Interrupted(Exception):
    """The regular pass yields: stopping, paused, or a suspect is waiting."""


class _YieldingPacer:
    """The pass's pacer, giving way: a take cut short by ``wake``/``stop`` raises when the pass must yield.

    So a suspect, a pause or SIGTERM is served at the next record even in the middle of a ledger;
    the cursor has not moved past that ledger or record, so nothing is skipped.
    """

    def __init__(self, pacer: Pacer, must_yield: Callable[[], bool]):
        self.pacer = pacer
        self.must_yield = must_yield

    def take_bytes(self, n: int) -> bool:
        if self.pacer.take_bytes(n) and self.must_yield():
            raise _Interrupted
        return False

    def take_entries(self, n: int) -> bool:
        if self.pacer.take_entries(n) and self.must_yield():
            raise _Interrupted
        return False


class LedgerDirWorker:
    """The scanner thread of ledger dir ``index`` (of ``dir_count``)."""

    def __init__(self, index: int, dir_count: int, settings: WorkerSettings, metadata, book: FindingBook,
                 suspects: SuspectQueue, pass_pacer: Pacer, suspect_pacer: Pacer, paused: Callable[[], bool],
                 clock: Callable[[], float] = time.time):
        self.index = index
        self.dir_count = dir_count
        self.settings = settings
        self.ledger_dir = str(settings.layout.ledger_dirs[index])
        self.metadata = metadata
        self.book = book
        self.suspects = suspects
        self.pass_pacer = pass_pacer
        self.suspect_pacer = suspect_pacer
        self.paused = paused
        self.clock = clock
        self.path = cursor_path(settings.state_dir, index)
        self.cursor = load_cursor(self.path, self.ledger_dir) or fresh_cursor(self.ledger_dir, clock())
        self.suspects_scanned = 0
        self.error: str | None = None
        self.last_progress = clock()
        self._stopping = threading.Event()
        self._saved_at = clock()
        self._saved: Cursor | None = None
        self._save_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"scanner-dir{index}", daemon=True)
        self._storage: BookieStorage | None = None
        self._storage_opened = 0.0
        self._scanner: BookieScanner | None = None
        self._ledgers: list[int] | None = None

    # -- control (any thread) -----------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Look again now: a suspect arrived, or pause/resume/rates changed."""
        self.pass_pacer.wake()

    def stop(self) -> None:
        self._stopping.set()
        self.pass_pacer.stop()
        self.suspect_pacer.stop()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def status(self) -> WorkerStatus:
        cursor = self.cursor
        rate = self.pass_pacer.effective_rate()
        eta = None
        if cursor.phase != WAITING and rate:
            eta = max(0, cursor.bytes_total - cursor.bytes_done) / rate
        return WorkerStatus(self.ledger_dir, "paused" if self.paused() else cursor.phase, cursor.pass_progress,
                            cursor.passes_completed, eta, rate, cursor.ledgers_done, cursor.ledgers_total,
                            cursor.bytes_done, cursor.bytes_total,
                            cursor.pass_started, cursor.last_pass_finished, self.last_progress,
                            self.suspects_scanned, self.error,
                            scanner.totals.entries_verified if (scanner := self._scanner) is not None else 0)

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    self._step()
                    self.error = None
                except _Interrupted:
                    pass
                except MetadataUnavailable as exc:
                    log.warning("%s: waiting for metadata: %s", self.ledger_dir, exc)
                    self.pass_pacer.wait(RETRY_SECONDS)
                except Exception as exc:  # a bug or a disk error must not end the agent: report and retry
                    log.exception("%s: scanner step failed; retrying in %gs", self.ledger_dir, ERROR_RETRY_SECONDS)
                    self.error = f"{type(exc).__name__}: {exc}"
                    self._close_storage()
                    self.pass_pacer.wait(ERROR_RETRY_SECONDS)
        finally:
            self._save()
            self._close_storage()

    def _step(self) -> None:
        if self.paused():
            self.pass_pacer.wait(IDLE_WAIT_SECONDS)
            return
        suspect = self.suspects.take(self.index)
        if suspect is not None:
            self._scan_suspect(suspect)
            return
        cursor = self.cursor
        if cursor.phase == WAITING:
            due = cursor.pass_started + self.settings.period_seconds
            if self.clock() < due:
                self.pass_pacer.wait(min(due - self.clock(), IDLE_WAIT_SECONDS))
                return
            self._begin_pass()
        elif cursor.phase == LEDGERS:
            self._ledger_phase()
        else:
            self._entry_log_phase()

    def _interrupted(self) -> bool:
        return self._stopping.is_set() or self.paused() or self.suspects.has_work(self.index)

    # -- suspects -----------------------------------------------------------------------------

    def _scan_suspect(self, suspect: Suspect) -> None:
        try:
            with open_bookie(self.settings.layout, work_dir=self._work_dir()) as storage, \
                    BookieScanner(storage, self.metadata, self.settings.layout.bookie_id, self.suspect_pacer) as scanner:
                if suspect.kind == ENTRY_LOG:
                    findings = self._scan_suspect_log(scanner, storage, suspect.id)
                else:
                    findings = scanner.scan_ledger(suspect.id, verify_digests=True)
                findings += scanner.orphan_findings()
        except BaseException:
            self.suspects.release(suspect)
            raise
        if self._stopping.is_set():
            self.suspects.release(suspect)  # cut short: scan it whole after the restart
            return
        self.book.record(findings)
        self.suspects.done(suspect)
        self.suspects_scanned += 1
        log.info("%s: suspect %s %d scanned: %d findings", self.ledger_dir, suspect.kind, suspect.id, len(findings))

    def _scan_suspect_log(self, scanner: BookieScanner, storage: BookieStorage, entry_log_id: int) -> list[Finding]:
        found: list[Finding] = []

        def checkpoint(offset: int, findings: list[Finding]) -> bool:
            found.extend(findings)
            return self._stopping.is_set()

        for log_file in self._dir_logs(storage):
            if log_file.entry_log_id == entry_log_id:
                found.extend(scanner.scan_entry_log(log_file, checkpoint=checkpoint))
        return found

    # -- the regular pass ---------------------------------------------------------------------

    def _begin_pass(self) -> None:
        old = self.cursor
        self._ledgers = None
        self._close_storage()
        self.cursor = fresh_cursor(self.ledger_dir, self.clock(), old.passes_completed, old.last_pass_finished)
        self._save()
        log.info("%s: pass %d started", self.ledger_dir, old.passes_completed + 1)

    def _ledger_phase(self) -> None:
        scanner = self._pass_scanner()
        if self._ledgers is None:
            # Fixed for the pass and in id order, so "the last ledger done" is a place to resume from.
            self._ledgers = sorted(l for l in scanner.ledgers_to_check() if l % self.dir_count == self.index)
            total = sum(self._sizes(self._dir_logs(scanner.storage)).values())
            self.cursor = self.cursor.advanced(ledgers_total=len(self._ledgers), bytes_total=total)
        self._retune()
        for ledger_id in self._ledgers:
            if self.cursor.ledger_id is not None and ledger_id <= self.cursor.ledger_id:
                continue
            if self._interrupted():
                raise _Interrupted
            scanner = self._pass_scanner()
            self.book.record(scanner.scan_ledger(ledger_id))
            self._advance(ledger_id=ledger_id, ledgers_done=self.cursor.ledgers_done + 1)
        self._advance(phase=ENTRY_LOGS)
        self._save()

    def _entry_log_phase(self) -> None:
        scanner = self._pass_scanner()
        logs = self._dir_logs(scanner.storage)
        sizes = self._sizes(logs)
        cursor = self.cursor
        if cursor.entry_log_id is None:
            self._advance(bytes_total=sum(sizes.values()))
        for log_file in logs:
            cursor = self.cursor
            if cursor.entry_log_id is not None and (log_file.entry_log_id < cursor.entry_log_id or (
                    log_file.entry_log_id == cursor.entry_log_id and cursor.offset is None)):
                continue
            if self._interrupted():
                raise _Interrupted
            self._walk(self._pass_scanner(), log_file, sizes.get(log_file, 0))
        self.book.record(scanner.orphan_findings())
        self._finish_pass()

    def _walk(self, scanner: BookieScanner, log_file: EntryLogFile, size: int) -> None:
        cursor = self.cursor
        inode = _inode(log_file.path)
        start = None
        if cursor.entry_log_id == log_file.entry_log_id and cursor.offset is not None and cursor.entry_log_inode == inode:
            start = cursor.offset
        base = cursor.bytes_done - (start or 0)  # bytes of the logs before this one
        stopped = False
        self._advance(entry_log_id=log_file.entry_log_id, entry_log_inode=inode, offset=start)

        def checkpoint(offset: int, findings: list[Finding]) -> bool:
            nonlocal stopped
            self.book.record(findings)  # saved before the cursor moves past them
            self._advance(offset=offset, bytes_done=base + offset)
            self._retune()
            stopped = self._interrupted()
            return stopped

        try:
            findings = scanner.scan_entry_log(log_file, start=start, checkpoint=checkpoint)
        finally:
            scanner.close()  # never keep a log mapped that garbage collection may delete
        if stopped:
            self._save()
            raise _Interrupted
        self.book.record(findings)
        self._advance(offset=None, entry_log_inode=None, bytes_done=base + size)

    def _finish_pass(self) -> None:
        cursor = self.cursor
        now = self.clock()
        self.cursor = cursor.advanced(phase=WAITING, passes_completed=cursor.passes_completed + 1,
                                      last_pass_finished=now, bytes_done=cursor.bytes_total)
        self._save()
        self._close_storage()
        log.info("%s: pass %d finished in %.0fs", self.ledger_dir, self.cursor.passes_completed,
                 now - cursor.pass_started)

    # -- plumbing -----------------------------------------------------------------------------

    def _advance(self, **changes) -> None:
        self.cursor = self.cursor.advanced(**changes)
        self.last_progress = self.clock()
        if self.clock() - self._saved_at >= self.settings.checkpoint_seconds:
            self._save()

    def checkpoint(self) -> None:
        """Save the cursor if it moved since the last save (any thread)."""
        if self.cursor != self._saved:
            self._save()

    def _save(self) -> None:
        with self._save_lock:
            cursor = self.cursor  # read under the lock: a later save never writes an older cursor
            save_cursor(self.path, cursor)
            self._saved, self._saved_at = cursor, self.clock()

    def _retune(self) -> None:
        """Read at the configured rate (the pass is then idle until the period is over); spread evenly,
        what is left of the pass goes over what is left of the period, capped by that rate."""
        cap = self.settings.bytes_per_second
        rate = cap
        if self.settings.spread_evenly:
            cursor = self.cursor
            left = cursor.pass_started + self.settings.period_seconds - self.clock()
            if left > 0:
                remaining = max(0, cursor.bytes_total - cursor.bytes_done)
                rate = max(MIN_BYTES_PER_SECOND, remaining / left)
                if cap is not None:
                    rate = min(rate, cap)
        self.pass_pacer.set_rate(rate, self.settings.entries_per_second)

    def _work_dir(self) -> Path:
        work = self.settings.state_dir / "work"
        work.mkdir(parents=True, exist_ok=True)
        return work

    def _pass_scanner(self) -> BookieScanner:
        now = self.clock()
        if self._storage is None or now - self._storage_opened > STORAGE_REFRESH_SECONDS:
            old = self._storage
            self._storage = open_bookie(self.settings.layout, work_dir=self._work_dir())
            self._storage_opened = now
            if old is not None:
                old.close()
        if self._scanner is None:
            self._scanner = BookieScanner(self._storage, self.metadata, self.settings.layout.bookie_id,
                                          _YieldingPacer(self.pass_pacer, self._interrupted))
        self._scanner.storage = self._storage
        return self._scanner

    def _close_storage(self) -> None:
        if self._scanner is not None:
            self._scanner.close()
            self._scanner = None
        if self._storage is not None:
            self._storage.close()
            self._storage = None

    def _dir_logs(self, storage: BookieStorage) -> list[EntryLogFile]:
        return sorted((f for f in storage.entry_logs() if self._owns_log(f)), key=lambda f: f.entry_log_id)

    def _owns_log(self, log_file: EntryLogFile) -> bool:
        return log_file.ledger_dir_index == self.index

    @staticmethod
    def _sizes(logs: list[EntryLogFile]) -> dict[EntryLogFile, int]:
        sizes = {}
        for log_file in logs:
            try:
                sizes[log_file] = os.stat(log_file.path).st_size
            except FileNotFoundError:
                pass  # garbage collection got there first
        return sizes


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None
