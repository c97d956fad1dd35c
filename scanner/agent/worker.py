"""One ledger directory's scanner: suspects first, then its share of a regular pass, under a throttle.

Passes are spread in time so a fleet does not read in step: after each start of the agent, pass work
waits a random delay of up to ``start_jitter_seconds`` (suspects do not), and each pass starts a
period times a factor in [1 - period_jitter, 1 + period_jitter] after the one before (the factor is
drawn per bookie, dir and pass, so a restart keeps it).

A pass (``scanner.scan.full_pass``) reads the dir's index once (conditions 1-2 for its ledgers), then
walks its entry logs in id order, each front to back, verifying every digest and the index's
locations (condition 3). The cursor is saved every ``checkpoint_seconds`` and whenever the worker
stops, so a restart resumes at the record boundary it saved (the index is then read again).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from scanner.agent.cursor import ENTRY_LOGS, LEDGERS, WAITING, Cursor, cursor_path, fresh_cursor, load_cursor, save_cursor
from scanner.agent.findingbook import FindingBook
from scanner.agent.liveness import BeatingMetadata, Heartbeat
from scanner.agent.schedule import jittered_period
from scanner.agent.startdelay import start_time
from scanner.agent.suspects import ENTRY_LOG, Suspect, SuspectQueue
from scanner.checks.findings import Category, Finding
from scanner.metadata.store import MetadataUnavailable
from scanner.scan.full_pass import BookiePass
from scanner.scan.log_walks import Stopped
from scanner.scan.settling import SETTLE_SECONDS
from scanner.scan.targeted import LedgerScanner
from scanner.storage.bookie import BookieStorage, EntryLogFile, file_size, open_bookie
from scanner.storage.layout import BookieLayout
from throttle import Pacer

log = logging.getLogger(__name__)

# The lowest derived rate: a pass far ahead of schedule still moves.
MIN_BYTES_PER_SECOND = 1024.0
MIN_PACE_INTERVAL = 4096
MAX_PACE_INTERVAL = 1 << 20
RETRY_SECONDS = 5.0
ERROR_RETRY_SECONDS = 60.0
IDLE_WAIT_SECONDS = 3600.0
STARTING = "starting"  # the phase shown while pass work waits for the start delay
# What a suspect's scan looks at again, so what it no longer finds there has ended.
LEDGER_SCAN_FINDS = (Category.LOST_ENTRY, Category.CORRUPT_ENTRY, Category.MISSING_LEDGER, Category.MISSING_ENTRY,
                     Category.ORPHAN_LEDGER)
ENTRY_LOG_SCAN_FINDS = (Category.DAMAGED_ENTRY_LOG, Category.CORRUPT_ENTRY)


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    layout: BookieLayout
    state_dir: Path
    period_seconds: float
    checkpoint_seconds: float
    bytes_per_second: float | None  # the cap; None: unlimited
    entries_per_second: float | None
    spread_evenly: bool = False  # pace a pass over the whole period instead of reading at the cap
    period_jitter: float = 0.0
    start_jitter_seconds: float = 0.0
    settle_seconds: float = SETTLE_SECONDS


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
    entries_verified: int = 0  # digests checked by this worker's passes since the agent started
    next_pass_due: float = 0.0  # epoch seconds: when the next pass starts, once this one is done (jitter included)
    stalled_seconds: float = 0.0  # neither progressing nor idle by design this long (see scanner.agent.liveness)
    start_at: float | None = None  # epoch seconds: when pass work begins after the start delay (None: begun)


class _Interrupted(Exception):
    """The regular pass yields: stopping, paused, or a suspect is waiting."""


class _YieldingPacer:
    """A worker's pacer, giving way: a take cut short by ``wake``/``stop`` raises when the pass must yield.

    So a suspect, a pause or SIGTERM is served at the next record even in the middle of a ledger;
    the cursor has not moved past that ledger or record, so nothing is skipped. Waiting on the
    throttle is idle by design; each take paid for is progress.
    """

    def __init__(self, pacer: Pacer, must_yield: Callable[[], bool], heartbeat: Heartbeat):
        self.pacer = pacer
        self.must_yield = must_yield
        self.heartbeat = heartbeat

    def take_bytes(self, n: int) -> bool:
        with self.heartbeat.idle():
            cut_short = self.pacer.take_bytes(n)
        if cut_short and self.must_yield():
            raise _Interrupted
        return False

    def take_entries(self, n: int) -> bool:
        with self.heartbeat.idle():
            cut_short = self.pacer.take_entries(n)
        if cut_short and self.must_yield():
            raise _Interrupted
        return False

    def pause(self, seconds: float) -> None:
        """Idle ``seconds`` (a confirmation's settling time: never less), giving way as a take does: SIGTERM met
        there stopped the agent only once the settling was over, up to 15 s later."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            with self.heartbeat.idle():
                cut_short = self.pacer.pause(left)
            if cut_short and self.must_yield():
                raise _Interrupted


class LedgerDirWorker:
    """The scanner thread of ledger dir ``index`` (of ``dir_count``)."""

    def __init__(self, index: int, dir_count: int, settings: WorkerSettings, metadata, book: FindingBook,
                 suspects: SuspectQueue, pass_pacer: Pacer, suspect_pacer: Pacer, paused: Callable[[], bool],
                 clock: Callable[[], float] = time.time):
        self.index = index
        self.dir_count = dir_count
        self.settings = settings
        self.ledger_dir = str(settings.layout.ledger_dirs[index])
        self.heartbeat = Heartbeat()
        self.metadata = BeatingMetadata(metadata, self.heartbeat)
        self.book = book
        self.suspects = suspects
        self.pass_pacer = pass_pacer
        self.suspect_pacer = suspect_pacer
        self.paused = paused
        self.clock = clock
        self.path = cursor_path(settings.state_dir, index)
        self.cursor = load_cursor(self.path, self.ledger_dir)
        if self.cursor is None:  # a first pass, or a damaged cursor: a pass from the start
            self.cursor = fresh_cursor(self.ledger_dir, clock())
            book.begin_pass(self.ledger_dir)
        self.suspects_scanned = 0
        self.error: str | None = None
        self.last_progress = clock()
        # Pass work, not suspects; the draw survives a restart (scanner.agent.startdelay).
        self._start_after = start_time(settings.state_dir, self.ledger_dir, settings.start_jitter_seconds, clock())
        self._stopping = threading.Event()
        self._saved_at = clock()
        self._saved: Cursor | None = None
        self._save_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"scanner-dir{index}", daemon=True)
        self._pass: BookiePass | None = None
        self._verified_by_closed_passes = 0  # entries verified by this worker's passes closed so far
        self._pass_lock = threading.Lock()  # a pass closed and its count carried over at once, as status() sees it
        # Scratch of a run that was killed (sorted locations, index views): nothing in it is state.
        shutil.rmtree(settings.state_dir / "work" / f"dir{index}", ignore_errors=True)

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
        phase = cursor.phase
        if self.paused():
            phase = "paused"
        elif phase != WAITING and self.clock() < self._start_after:
            phase = STARTING
        return WorkerStatus(self.ledger_dir, phase, cursor.pass_progress,
                            cursor.passes_completed, eta, rate, cursor.ledgers_done, cursor.ledgers_total,
                            cursor.bytes_done, cursor.bytes_total,
                            cursor.pass_started, cursor.last_pass_finished, self.last_progress,
                            self.suspects_scanned, self.error,
                            self.entries_verified(),
                            self.next_pass_due(), self.stalled_seconds(),
                            self._start_after if phase == STARTING else None)

    def entries_verified(self) -> int:
        """Digests checked by this worker's passes since the agent started: closed passes and the current one."""
        with self._pass_lock:
            current = self._pass
            return self._verified_by_closed_passes + (current.totals.entries_verified if current is not None else 0)

    def next_pass_due(self) -> float:
        """When the pass after this one starts: a jittered period after this one started, not before the start delay."""
        cursor = self.cursor
        period = jittered_period(self.settings.period_seconds, self.settings.period_jitter,
                                 f"{self.settings.layout.bookie_id}|{self.ledger_dir}|{cursor.passes_completed}")
        return max(cursor.pass_started + period, self._start_after)

    def stalled_seconds(self) -> float:
        """How long the thread has made no progress outside a wait by design (a thread that died: forever)."""
        if not self._thread.is_alive():
            return 0.0 if self._stopping.is_set() or self._thread.ident is None else float("inf")
        return self.heartbeat.stalled_for()

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
                    self._wait(RETRY_SECONDS)
                except Exception as exc:  # a bug or a disk error must not end the agent: report and retry
                    if self._in_state_dir(exc):  # full or read-only: one line, /health names the state dir
                        log.error("%s: state not saved (%s); retrying in %gs", self.ledger_dir, exc,
                                  ERROR_RETRY_SECONDS)
                    else:
                        log.exception("%s: scanner step failed; retrying in %gs", self.ledger_dir,
                                      ERROR_RETRY_SECONDS)
                    self.error = f"{type(exc).__name__}: {exc}"
                    self._close_pass()
                    self._wait(ERROR_RETRY_SECONDS)
        finally:
            try:
                self._save()
            except OSError as exc:  # a full or read-only state dir: the last saved place stands
                log.error("%s: cursor not saved on stop (%s): the next start resumes from the last saved place",
                          self.ledger_dir, exc.strerror or exc)
            self._close_pass()

    def _step(self) -> None:
        self.heartbeat.beat()
        if self.paused():
            self._wait(IDLE_WAIT_SECONDS)
            return
        suspect = self.suspects.take(self.index)
        if suspect is not None:
            self._scan_suspect(suspect)
            return
        cursor = self.cursor
        due = self.next_pass_due() if cursor.phase == WAITING else self._start_after
        if self.clock() < due:
            self._wait(min(due - self.clock(), IDLE_WAIT_SECONDS))
            return
        if cursor.phase == WAITING:
            self._begin_pass()
        elif cursor.phase == LEDGERS:
            self._ledger_phase()
        else:
            self._entry_log_phase()

    def _wait(self, seconds: float) -> None:
        """Idle by design until ``seconds`` pass or something wakes the worker."""
        with self.heartbeat.idle():
            self.pass_pacer.wait(seconds)

    def _interrupted(self) -> bool:
        return self._stopping.is_set() or self.paused() or self.suspects.has_work(self.index)

    # -- suspects -----------------------------------------------------------------------------

    def _scan_suspect(self, suspect: Suspect) -> None:
        try:
            with open_bookie(self.settings.layout, work_dir=self._work_dir()) as storage:
                if suspect.kind == ENTRY_LOG:
                    findings = self._scan_suspect_log(storage, suspect.id)
                else:
                    with LedgerScanner(storage, self.metadata, self.settings.layout.bookie_id,
                                       self._suspect_pacing()) as scanner:
                        findings = scanner.scan_ledger(suspect.id, verify_digests=True) + scanner.orphan_findings()
        except BaseException:
            self.suspects.release(suspect)
            raise
        if self._stopping.is_set():
            self.suspects.release(suspect)  # cut short: scan it whole after the restart
            return
        if suspect.kind == ENTRY_LOG:
            self.book.settle(self.ledger_dir, findings, ENTRY_LOG_SCAN_FINDS, entry_log=suspect.id,
                             why=f"not found again by a scan of suspect entry log {suspect.id}")
        else:
            self.book.settle(self.ledger_dir, findings, LEDGER_SCAN_FINDS, ledger_id=suspect.id,
                             why=f"not found again by a scan of suspect ledger {suspect.id}")
        self.suspects.done(suspect)
        self.suspects_scanned += 1
        log.info("%s: suspect %s %d scanned: %d findings", self.ledger_dir, suspect.kind, suspect.id, len(findings))

    def _suspect_pacing(self) -> _YieldingPacer:
        """The suspect pacer, its waits idle by design and its takes progress; a suspect's scan yields to nothing but
        a stop (the suspect is kept, and scanned whole after the restart)."""
        return _YieldingPacer(self.suspect_pacer, self._stopping.is_set, self.heartbeat)

    def _scan_suspect_log(self, storage: BookieStorage, entry_log_id: int) -> list[Finding]:
        """The suspect log walked as a pass walks it, judged on the index as it is then."""
        found: list[Finding] = []

        def checkpoint(offset: int, findings: list[Finding]) -> bool:
            found.extend(findings)
            return self._stopping.is_set()

        with BookiePass(storage, self.metadata, self.settings.layout.bookie_id, self._work_dir(),
                        lambda: open_bookie(self.settings.layout, work_dir=self._work_dir()),
                        self._suspect_pacing(), settle_seconds=self.settings.settle_seconds) as logs:
            for log_file in logs.log_files:
                if log_file.ledger_dir_index == self.index and log_file.entry_log_id == entry_log_id:
                    try:
                        found.extend(logs.walk(log_file, checkpoint=checkpoint))
                    except Stopped:
                        return found
            return found + logs.orphan_findings()

    # -- the regular pass ---------------------------------------------------------------------

    def _begin_pass(self) -> None:
        old = self.cursor
        self._close_pass()
        self.cursor = fresh_cursor(self.ledger_dir, self.clock(), old.passes_completed, old.last_pass_finished)
        self.book.begin_pass(self.ledger_dir)  # before the cursor says so: a crash between begins it again
        self._save()
        log.info("%s: pass %d started", self.ledger_dir, old.passes_completed + 1)

    def _ledger_phase(self) -> None:
        """The dir's index read once: conditions 1 and 2 for its ledgers, the locations the walk will check."""
        self._close_pass()
        if self.cursor.ledgers_done == 0:  # the pass begins now, not when the start delay began
            self._advance(pass_started=self.clock())
        self._retune()
        full = self._build_pass()
        self.book.record(self.ledger_dir, full.judge_index())
        total = sum(file_size(f.path) for f in full.log_files)
        self._advance(phase=ENTRY_LOGS, ledgers_done=full.totals.ledgers_checked,
                      ledgers_total=full.totals.ledgers_checked, bytes_total=total, bytes_done=0)
        self._save()
        self._retune()

    def _entry_log_phase(self) -> None:
        full = self._pass
        if full is None:  # resumed after a restart: the index is read again, its findings were already kept
            full = self._build_pass()
        self._retune()
        for log_file in full.log_files:
            cursor = self.cursor
            if cursor.last_log_done is not None and log_file.entry_log_id <= cursor.last_log_done:
                continue
            if self._interrupted():
                raise _Interrupted
            self._walk(full, log_file)
        findings = full.finish(set(self.cursor.vanished_logs) | full.vanished)
        self.book.record(self.ledger_dir, findings)
        self._finish_pass()

    def _build_pass(self) -> BookiePass:
        must_yield = lambda: self._stopping.is_set() or self.paused()  # noqa: E731 - suspects wait for the index
        storage = open_bookie(self.settings.layout, work_dir=self._work_dir())
        try:
            full = BookiePass(storage, self.metadata, self.settings.layout.bookie_id, self._work_dir(),
                              lambda: open_bookie(self.settings.layout, work_dir=self._work_dir()),
                              _YieldingPacer(self.pass_pacer, must_yield, self.heartbeat), dir_index=self.index,
                              settle_seconds=self.settings.settle_seconds)
            try:
                full.read_index()
                full.read_cluster()
            except BaseException:
                full.close()
                raise
        finally:
            storage.close()  # the pass reads the index once; confirmations open a fresh view each time
        full.pacer = _YieldingPacer(self.pass_pacer, self._interrupted, self.heartbeat)
        self._pass = full
        return full

    def _walk(self, full: BookiePass, log_file: EntryLogFile) -> None:
        cursor = self.cursor
        inode = _inode(log_file.path)
        start = 0
        if cursor.entry_log_id == log_file.entry_log_id and cursor.entry_log_inode == inode:
            start = cursor.offset
        base = cursor.bytes_done - start  # bytes of the logs before this one
        self._advance(entry_log_id=log_file.entry_log_id, entry_log_inode=inode, offset=start)

        def checkpoint(offset: int, findings: list[Finding]) -> bool:
            self.book.record(self.ledger_dir, findings)  # saved before the cursor moves past them
            self._advance(offset=offset, bytes_done=base + offset)
            self._retune()
            return self._interrupted()

        try:
            findings = full.walk(log_file, start=start or None, checkpoint=checkpoint,
                                 pace_interval=self._pace_interval())
        except Stopped:
            self._save()
            raise _Interrupted from None
        self.book.record(self.ledger_dir, findings)
        vanished = self.cursor.vanished_logs
        if log_file.entry_log_id in full.vanished:
            vanished = (*vanished, log_file.entry_log_id)
        self._advance(last_log_done=log_file.entry_log_id, entry_log_id=None, entry_log_inode=None, offset=0,
                      vanished_logs=vanished, bytes_done=base + file_size(log_file.path))

    def _finish_pass(self) -> None:
        cursor = self.cursor
        now = self.clock()
        # What the pass did not meet again ends before the pass counts as done: whoever sees the count (health,
        # status) sees its findings ended. A crash in between finishes the pass again, which ends nothing more.
        full = self._pass
        self.book.end_pass(self.ledger_dir, f"not found again by pass {cursor.passes_completed + 1}",
                           unjudged=full.metadata_unread if full is not None else ())
        self.cursor = cursor.advanced(phase=WAITING, passes_completed=cursor.passes_completed + 1,
                                      last_pass_finished=now, bytes_done=cursor.bytes_total)
        self._save()
        self._close_pass()
        log.info("%s: pass %d finished in %.0fs", self.ledger_dir, self.cursor.passes_completed,
                 now - cursor.pass_started)

    # -- plumbing -----------------------------------------------------------------------------

    def _advance(self, **changes) -> None:
        self.cursor = self.cursor.advanced(**changes)
        self.last_progress = self.clock()
        self.heartbeat.beat()
        if self.clock() - self._saved_at >= self.settings.checkpoint_seconds:
            try:
                self._save()
            except OSError:
                pass  # the checkpoint job says so (rate-limited) and retries; /health names the state dir

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

    def _in_state_dir(self, exc: Exception) -> bool:
        name = getattr(exc, "filename", None)
        return isinstance(exc, OSError) and name is not None and Path(name).is_relative_to(self.settings.state_dir)

    def _pace_interval(self) -> int:
        """Bytes between checkpoints: a few a second at the pass's rate, so progress and the cursor move record by
        record on a slow pass, and a MiB at a time on a fast one."""
        rate = self.pass_pacer.effective_rate()
        if not rate:
            return MAX_PACE_INTERVAL
        return int(min(MAX_PACE_INTERVAL, max(MIN_PACE_INTERVAL, rate / 4)))

    def _work_dir(self) -> Path:
        work = self.settings.state_dir / "work" / f"dir{self.index}"
        work.mkdir(parents=True, exist_ok=True)
        return work

    def _close_pass(self) -> None:
        with self._pass_lock:
            closing, self._pass = self._pass, None
            if closing is not None:
                self._verified_by_closed_passes += closing.totals.entries_verified
        if closing is not None:
            closing.close()


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None

