"""The agent: one scanner thread per ledger dir, suspects fed from the bookie's log and the endpoint,
periodic work on an apscheduler, marks filed when ZooKeeper answers, and systemd's protocol.

SIGTERM/SIGINT stop at the next record (cursors saved, exit 0); SIGHUP reloads rates, windows and
log files from the config. Everything that can keep the agent from starting (the bookie's layout,
a state dir inside a bookie dir or unwritable, a busy listen port) is a StartupError before any
scanning begins.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time

from apscheduler.schedulers.background import BackgroundScheduler

from scanner.agent import control, statedir
from scanner.agent.cached_metadata import CachedMetadata
from scanner.agent.config import PACE_SPREAD, AgentConfig, ThrottleConfig, load_config
from scanner.agent.endpoint import Endpoint
from scanner.agent.findingbook import FindingBook
from scanner.agent.lograte import RateLimitedLog
from scanner.agent.logsignals import suspects_in_line
from scanner.agent.logtail import LogTail
from scanner.agent.metrics import agent_registry
from scanner.agent.schedule import pass_schedule
from scanner.agent.sdnotify import SystemdNotifier
from scanner.agent.suspects import ENTRY_LOG, Suspect, SuspectQueue, parse_suspect
from scanner.agent.verdict import judge
from scanner.agent.workcount import MeteredPacer
from scanner.agent.worker import LedgerDirWorker, WorkerSettings
from scanner.checks.findings import Category
from scanner.metadata.store import MetadataMisconfigured, MetadataUnavailable
from scanner.metadata.uri import metadata_uri_from_conf, open_metadata
from scanner.native.switch import walker_in_use
from scanner.scan.targeted import LedgerScanner
from scanner.statefile import write_problem
from scanner.storage.bookie import open_bookie
from scanner.storage.layout import LayoutError
from scanner.units import iso_time, moment_text, rate_text
from throttle import DiskLoad

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
MARK_SECONDS = 5.0
FOLLOW_UP_SECONDS = 3600.0
MOVE_SECONDS = 1.0  # with re-replication: a move due (a new mark, a retry) is made within a second
LOG_COUNT_SECONDS = 60.0
CONNECT_RETRY_SECONDS = 5.0
CONNECT_TIMEOUT_SECONDS = 2.0  # one try at start: short, so SIGTERM is served within a few seconds
# A metadata service that never answered since the start is shown as a configuration error after this
# (a wrong host or port looks so; so does ZooKeeper down): the agent keeps trying.
UNREACHED_IS_CONFIG_ERROR_SECONDS = 60.0
STOP_JOIN_SECONDS = 30.0


class StartupError(Exception):
    """The agent cannot start (bookie layout, metadata URI); one line for the operator."""


class Agent:
    """Everything the ``run`` command runs; ``run()`` blocks until stopped and returns the exit status."""

    def __init__(self, config: AgentConfig, notifier: SystemdNotifier | None = None):
        self.config = config
        self.notifier = notifier or SystemdNotifier()
        self.started = time.time()
        self._stop = threading.Event()
        self._stop_signal: int | None = None
        self._reload = threading.Event()
        try:
            self.layout = config.bookie_layout()
        except LayoutError as exc:
            raise StartupError(str(exc)) from None
        self.metadata_uri = config.metadata_uri or metadata_uri_from_conf(self.layout.conf)
        if not self.metadata_uri:
            raise StartupError(f"{config.source}: no [metadata] uri and the bookie conf names no metadata service")
        self.on_zookeeper = not self.metadata_uri.startswith("file:")
        self.state_dir = config.state_dir
        try:
            statedir.make_ready(self.state_dir, self.layout)
        except statedir.StateDirError as exc:
            raise StartupError(str(exc)) from None
        statedir.clean(self.state_dir)
        self.book = FindingBook(self.state_dir, [str(d) for d in self.layout.ledger_dirs])
        self.suspects = SuspectQueue(self.state_dir, config.suspect_window_seconds, config.suspect_limit)
        self._paused = control.is_paused(self.state_dir)
        self.metadata: CachedMetadata | None = None
        self.config_error: str | None = None  # why the agent cannot begin (the verdict's config_error)
        # While the metadata service has not answered yet (nothing is scanned before it has).
        self.waiting_for_metadata: str | None = "connecting to the metadata service"
        self.marking = None
        self.workers: list[LedgerDirWorker] = []
        self._log_count: tuple[float, int] | None = None  # (when listed, entry logs in the ledger dirs)
        self._behind: set[str] = set()  # ledger dirs whose pass the configured rate cannot finish in time
        self._unsaved = RateLimitedLog(log, logging.WARNING)
        self._watchdog_withheld = False
        self.registry = agent_registry(self.health)
        self.tail = LogTail(config.log_files, self._on_log_line)
        self.scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1})
        try:
            self.endpoint = Endpoint(self, config.listen_host, config.listen_port)
        except OSError as exc:
            raise StartupError(f"{config.source}: cannot listen on {config.listen_host}:{config.listen_port} "
                               f"([agent] listen): {exc.strerror or exc}") from None

    # -- lifecycle ----------------------------------------------------------------------------

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_stop_signal)
        signal.signal(signal.SIGHUP, lambda *_: self._reload.set())
        self.endpoint.start()
        control.write_address(self.state_dir, self.endpoint.address)
        try:
            if not self._connect():
                self._log_stop_signal()
                return 0
            self.suspects.drain_inbox(self.route)  # before the scanners start: what waited there goes first
            self._start_workers()
            self.tail.start()
            self._schedule()
            self.notifier.ready(self._status_line())
            log.info("agent for bookie %s serving on %s", self.layout.bookie_id, self.endpoint.address)
            while not self._stop.wait(POLL_SECONDS):
                if self._reload.is_set():
                    self._reload.clear()
                    self.reload()
            self._log_stop_signal()
            self.notifier.stopping()
            return 0
        finally:
            self._shutdown()

    def stop(self) -> None:
        self._stop.set()

    def _log_stop_signal(self) -> None:
        if self._stop_signal is not None:
            log.info("%s received: stopping at the next record, cursors saved",
                     signal.Signals(self._stop_signal).name)

    def _on_stop_signal(self, signum, frame) -> None:
        self._stop_signal = signum  # logged by the main loop: no logging inside a signal handler
        self._stop.set()

    def _connect(self) -> bool:
        """Open the metadata store, retrying while it is unreachable; False if stopped first.

        What keeps it from opening is shown on /health: ``waiting_for_metadata`` at first, a ``config_error``
        once the service answered without the ledgers root (or refused the credentials), or never answered
        for ``UNREACHED_IS_CONFIG_ERROR_SECONDS``. StartupError (exit 2) once the service answered so for
        ``[metadata] misconfigured_exit_seconds``: a wrong root or password is not fixed by waiting.
        """
        started = time.monotonic()
        misconfigured_since: float | None = None
        while True:
            try:
                self.metadata = CachedMetadata(open_metadata(self.metadata_uri,
                                                             connect_timeout=CONNECT_TIMEOUT_SECONDS))
                self.config_error = self.waiting_for_metadata = None
                break
            except MetadataMisconfigured as exc:
                now = time.monotonic()
                misconfigured_since = misconfigured_since if misconfigured_since is not None else now
                self.config_error = f"{exc}; check [metadata] uri (or the bookie conf's metadataServiceUri)"
                give_up = self.config.misconfigured_exit_seconds
                if now - misconfigured_since >= give_up:
                    raise StartupError(f"{self.config_error}: still so after {give_up:g}s, giving up") from None
            except MetadataUnavailable as exc:
                misconfigured_since = None
                unreached = time.monotonic() - started
                self.waiting_for_metadata = f"waiting for the metadata service: {exc}"
                if unreached >= UNREACHED_IS_CONFIG_ERROR_SECONDS:
                    self.config_error = (f"{exc}; not reached in the {unreached:.0f}s since the start: a wrong host "
                                         f"or port in [metadata] uri looks like this (or ZooKeeper is down)")
            problem = self.config_error or self.waiting_for_metadata
            self.notifier.status(problem)
            log.warning("metadata unavailable at start, retrying in %gs: %s", CONNECT_RETRY_SECONDS, problem)
            if self._stop.wait(CONNECT_RETRY_SECONDS):
                return False
        if self.config.mark:
            if self.metadata.client is None:
                raise StartupError(f"{self.config.source}: [repair] mark needs ZooKeeper metadata, not {self.metadata_uri}")
            from scanner.agent.marking import Marking
            from scanner.bookie_protocol.transport import TransportRefused
            from scanner.repair.placement.settings import PlacementSettingsError

            try:
                self.marking = Marking(
                    self.metadata, self.book, self.layout.bookie_id, self.state_dir, self.config.repair_command,
                    ledger_dirs=[str(d) for d in self.layout.ledger_dirs],
                    copy_bytes_per_second=self.config.copy_bytes_per_second if self.config.rereplicate else None,
                    rereplicate=self.config.rereplicate, stopping=self._stop.is_set,
                    blast_radius=self.config.blast_radius, bookie_size=self._bookie_size, conf=self.layout.conf,
                    placement=self.config.placement, first_retry_seconds=self.config.retry_seconds)
            except TransportRefused as exc:
                raise StartupError(f"{self.config.source}: [repair] mark: {exc.reason}") from None
            except PlacementSettingsError as exc:
                raise StartupError(f"{self.config.source}: [repair] placement: {exc}") from None
        else:
            self.book.end_category(Category.UNREPAIRED, "the repair follow-up is off ([repair] mark = false)")
        return True

    def _start_workers(self) -> None:
        count = len(self.layout.ledger_dirs)
        for index in range(count):
            worker = LedgerDirWorker(index, count, self._settings(self.config), self.metadata, self.book,
                                     self.suspects, self._pacer(index), self._pacer(index), self.paused)
            self.workers.append(worker)
        for worker in self.workers:
            worker.start()

    def _settings(self, config: AgentConfig) -> WorkerSettings:
        return WorkerSettings(self.layout, self.state_dir, config.period_seconds, config.checkpoint_seconds,
                              config.throttle.bytes_per_second, config.throttle.entries_per_second,
                              spread_evenly=config.pace == PACE_SPREAD, period_jitter=config.period_jitter,
                              start_jitter_seconds=config.start_jitter_seconds, settle_seconds=config.settle_seconds)

    def _pacer(self, index: int) -> MeteredPacer:
        throttle = self.config.throttle
        loads = []
        if throttle.disk_backoff:
            try:
                loads.append(DiskLoad(self.layout.ledger_dirs[index]))
            except OSError as exc:
                log.warning("%s: no disk back-off: %s", self.layout.ledger_dirs[index], exc)
        return MeteredPacer(throttle.bytes_per_second, throttle.entries_per_second, windows=throttle.windows,
                            outside_factor=throttle.outside_factor, disk_loads=loads, backoff=throttle.backoff)

    def _schedule(self) -> None:
        add = self.scheduler.add_job
        add(self._checkpoint, "interval", seconds=self.config.checkpoint_seconds, id="checkpoint")
        add(self._poll, "interval", seconds=POLL_SECONDS, id="poll")
        if self.marking is not None:
            add(self.marking.file_pending, "interval", seconds=MARK_SECONDS, id="marks",
                next_run_time=_now_datetime())
            add(self._follow_up, "interval", seconds=MOVE_SECONDS if self.config.rereplicate else FOLLOW_UP_SECONDS,
                id="follow-up")
        if self.notifier.watchdog_interval:
            add(self._watchdog, "interval", seconds=self.notifier.watchdog_interval, id="watchdog",
                next_run_time=_now_datetime())
        self.scheduler.start()

    def _shutdown(self) -> None:
        for worker in self.workers:
            worker.stop()
        for worker in self.workers:
            if not worker.join(STOP_JOIN_SECONDS):
                log.error("%s: scanner did not stop within %gs", worker.ledger_dir, STOP_JOIN_SECONDS)
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)
        self.tail.stop()
        if self.endpoint is not None:
            self.endpoint.stop()
        control.remove_address(self.state_dir)
        if self.metadata is not None:
            self.metadata.close()
        self.book.close()

    # -- periodic work ------------------------------------------------------------------------

    def _checkpoint(self) -> None:
        for worker in self.workers:
            try:
                worker.checkpoint()
            except OSError as exc:  # /health says the state dir cannot be written; the next checkpoint retries
                self._unsaved.log("%s: cursor not saved: %s", worker.ledger_dir, exc.strerror or exc)

    def _poll(self) -> None:
        paused = control.is_paused(self.state_dir)
        if paused != self._paused:
            self._set_paused_flag(paused)
        try:
            if self.suspects.drain_inbox(self.route):
                self._wake_all()
        except OSError as exc:  # shown on /health as the state dir's problem; the inbox waits
            log.debug("inbox not drained: %s", exc)
        self.suspects.flush_logs()
        self.tail.poll()
        for worker in self.workers:
            status = worker.status()
            self._note_schedule(worker.ledger_dir, self._schedule_of(dataclasses.asdict(status)))

    def _schedule_of(self, scanner: dict):
        return pass_schedule(scanner["phase"], scanner["pass_started"], scanner["bytes_done"], scanner["bytes_total"],
                             self.config.period_seconds, self.config.throttle.bytes_per_second, time.time(),
                             scanner["next_pass_due"])

    def _note_schedule(self, ledger_dir: str, schedule) -> None:
        """One line when a pass falls behind its period (with the rate that would keep up), one when it no longer is."""
        if schedule.behind and ledger_dir not in self._behind:
            self._behind.add(ledger_dir)
            needed = ("it is already overdue" if schedule.needed_bytes_per_second is None
                      else f"it needs {rate_text(schedule.needed_bytes_per_second)}")
            log.warning("%s: at [throttle] bytes_per_second = %s the pass cannot end by %s, one period after it "
                        "started: %s; raise the rate or period_days", ledger_dir,
                        rate_text(self.config.throttle.bytes_per_second), moment_text(schedule.pass_due), needed)
        elif not schedule.behind and ledger_dir in self._behind:
            self._behind.discard(ledger_dir)
            log.info("%s: the pass is on schedule again", ledger_dir)

    def _watchdog(self) -> None:
        """Ping systemd's watchdog only while every scanner thread makes progress or is idle by design."""
        stalled = self._stalled()
        if stalled and not self._watchdog_withheld:
            log.error("%s: no progress for %.0fs outside a wait by design (a read that does not return, a "
                      "deadlock?): the watchdog is no longer pinged, systemd restarts the agent",
                      ", ".join(stalled), max(w.stalled_seconds() for w in self.workers))
        elif not stalled and self._watchdog_withheld:
            log.info("every scanner makes progress again: the watchdog is pinged again")
        self._watchdog_withheld = bool(stalled)
        if not stalled:
            self.notifier.watchdog()
        self.notifier.status(self._status_line())

    def _stalled(self) -> list[str]:
        """The ledger dirs whose scanner has stalled for longer than ``[agent] stall_minutes``."""
        return [w.ledger_dir for w in self.workers if w.stalled_seconds() > self.config.stall_seconds]

    def _bookie_size(self) -> tuple[int, int]:
        """Ledgers in the bookie's index (as the passes counted them) and entry logs in its ledger dirs (listed at
        most once every ``LOG_COUNT_SECONDS``: the breaker asks every follow-up cycle, and a bookie has thousands)."""
        ledgers = sum(w.status().ledgers_total for w in self.workers)
        now = time.monotonic()
        if self._log_count is None or now - self._log_count[0] >= LOG_COUNT_SECONDS:
            logs = 0
            for current in self.layout.ledger_current_dirs:
                try:
                    with os.scandir(current) as names:
                        logs += sum(1 for name in names if name.name.endswith(".log"))
                except OSError:
                    continue  # a dir that cannot be listed: its worker reports it
            self._log_count = (now, logs)
        return ledgers, self._log_count[1]

    def _follow_up(self) -> None:
        def reverify(ledger_id: int):
            with open_bookie(self.layout, work_dir=self.state_dir / "work") as storage, \
                    LedgerScanner(storage, self.metadata, self.layout.bookie_id) as scanner:
                return scanner.scan_ledger(ledger_id, verify_digests=True)

        self.marking.follow_up(reverify)

    # -- suspects, pause, reload --------------------------------------------------------------

    def route(self, suspect: Suspect) -> list[Suspect]:
        """The suspect as each responsible ledger dir's scanner sees it (none if no dir has it)."""
        count = len(self.layout.ledger_dirs)
        if suspect.ledger_dir is not None:
            return [suspect] if suspect.ledger_dir < count else []
        if suspect.kind != ENTRY_LOG:
            return [dataclasses.replace(suspect, ledger_dir=suspect.id % count)]
        name = f"{suspect.id:x}.log"
        holders = [i for i, current in enumerate(self.layout.ledger_current_dirs) if (current / name).is_file()]
        return [dataclasses.replace(suspect, ledger_dir=i) for i in holders]

    def add_suspects(self, items: list) -> int:
        """Queue suspects given as JSON objects (ValueError names a bad one); how many were new."""
        routed = [s for item in items for s in self.route(parse_suspect(item))]
        added = self.suspects.add(routed)
        if added:
            self._wake_all()
        return added

    def _on_log_line(self, line: str) -> None:
        found = [s for suspect in suspects_in_line(line) for s in self.route(suspect)]
        if found and self.suspects.add(found):
            self._wake_all()

    def paused(self) -> bool:
        return self._paused

    def set_paused(self, paused: bool) -> None:
        """Persisted first: OSError (a full or read-only state dir) leaves the agent as it was."""
        control.persist_pause(self.state_dir, paused)
        self._set_paused_flag(paused)

    def _set_paused_flag(self, paused: bool) -> None:
        self._paused = paused
        log.info("scanning %s", "paused" if paused else "resumed")
        self._wake_all()

    def _wake_all(self) -> None:
        for worker in self.workers:
            worker.wake()

    def reload(self) -> None:
        """Apply the config file again: rates, windows, back-off and log files (others need a restart)."""
        try:
            config = load_config(self.config.source)
        except ValueError as exc:
            log.error("reload refused, keeping the running config: %s", exc)
            return
        unchanged = ("bookie_conf", "bookie_home", "bookie_environment", "ledger_dirs", "bookie_id", "metadata_uri",
                     "state_dir", "listen_host", "listen_port", "mark", "rereplicate", "copy_bytes_per_second",
                     "start_jitter_seconds")
        for name in unchanged:
            if getattr(config, name) != getattr(self.config, name):
                log.warning("reload: %s changed; it takes effect at the next restart", name)
        config = dataclasses.replace(config, **{name: getattr(self.config, name) for name in unchanged})
        self.config = config
        self.suspects.window_seconds = config.suspect_window_seconds
        for worker in self.workers:
            worker.settings = self._settings(config)
            _apply_throttle(worker.pass_pacer, config.throttle)
            _apply_throttle(worker.suspect_pacer, config.throttle)
            worker.wake()
        self.tail.set_paths(config.log_files)
        log.info("configuration reloaded from %s", config.source)

    # -- health -------------------------------------------------------------------------------

    def health(self) -> dict:
        """Everything ``/health`` shows; ``/metrics`` and ``status`` are views of it."""
        scanners = []
        for worker in self.workers:
            scanner = dataclasses.asdict(worker.status())
            schedule = self._schedule_of(scanner)
            scanner.update(stalled=scanner.pop("stalled_seconds") > self.config.stall_seconds,
                           next_pass_at=schedule.next_pass_at, behind_schedule=schedule.behind,
                           needed_bytes_per_second=schedule.needed_bytes_per_second,
                           bytes_read=worker.pass_pacer.bytes_taken + worker.suspect_pacer.bytes_taken)
            scanners.append(scanner)
        connected = self.metadata is not None and self.metadata.connected
        state_problem = write_problem(self.state_dir)
        if not self.workers:
            status = "starting"
        elif any(s["error"] or s["stalled"] for s in scanners):
            status = "failing"
        elif state_problem or (self.on_zookeeper and self.metadata is not None and not connected):
            status = "degraded"
        else:
            status = "paused" if self._paused else "ok"
        marking = self.marking
        health = {
            "status": status,
            "bookie_id": self.layout.bookie_id,
            "storage": self.layout.storage,
            "record_walker": walker_in_use(),
            "paused": self._paused,
            "state_dir_problem": state_problem,
            "findings": self.book.counts(),
            "findings_new_since_start": dict(self.book.new_by_category),
            "findings_ended_since_start": dict(self.book.ended_by_category),
            "corrupt_entries_found": self.book.corrupt_entries_found,
            "scanners": scanners,
            "suspects_queued": self.suspects.queued(),
            "suspects_dropped": self.suspects.dropped,
            "suspects_failed": self.suspects.failed,
            "suspects_recent": sorted(self.suspects.recently_scanned()),
            "marks": {
                "enabled": marking is not None,
                "awaiting": len(self.book.awaiting_marks()) if marking is not None else 0,
                "filed": marking.filed_ledgers if marking is not None else 0,
                "tracked": marking.tracked_by_stage() if marking is not None else {},
                "rereplicate": marking is not None and self.config.rereplicate,
            },
            "repair": marking.repair_report() if marking is not None else
            {"following_total": 0, "ended_total": 0, "following": [], "ended": []},
            "period_seconds": self.config.period_seconds,
            "pace": self.config.pace,
            "uptime_seconds": time.time() - self.started,
        }
        if self.on_zookeeper:
            health["zookeeper_connected"] = connected
        if self.config_error:
            health["config_error"] = self.config_error
        elif self.waiting_for_metadata:
            health["waiting_for_metadata"] = self.waiting_for_metadata
        verdict = judge(health)
        health.update(state=verdict.state, state_reason=verdict.reason)
        _add_iso_times(health)
        return health

    def _status_line(self) -> str:
        """systemd's one-line STATUS=: the verdict first, as every other signal gives it."""
        done = sum(w.cursor.passes_completed for w in self.workers)
        progress = [f"{w.cursor.pass_progress:.0%}" for w in self.workers]
        return (f"{self.health()['state']}: passes {done}, progress {' '.join(progress)}, "
                f"findings {sum(self.book.counts().values())}")


# Times /health gives as epoch numbers (seconds, or milliseconds for the repair report): each also as an ISO 8601
# UTC string under the name with _iso appended (added keys: the numbers keep their meaning).
_SCANNER_TIMES = ("pass_started", "last_pass_finished", "next_pass_at", "start_at", "last_progress")
_REPAIR_TIMES_MS = ("since_ms", "stage_since_ms", "ended_ms", "next_try_ms", "at_ms")


def _add_iso_times(health: dict) -> None:
    for scanner in health["scanners"]:
        for key in _SCANNER_TIMES:
            if scanner.get(key):
                scanner[key + "_iso"] = iso_time(scanner[key])
    for row in health["repair"]["following"] + health["repair"]["ended"]:
        for item in (row, *row["events"]):
            for key in _REPAIR_TIMES_MS:
                if item.get(key):
                    item[key.removesuffix("_ms") + "_iso"] = iso_time(item[key] / 1000)


def _apply_throttle(pacer: MeteredPacer, throttle: ThrottleConfig) -> None:
    pacer.set_rate(throttle.bytes_per_second, throttle.entries_per_second)
    pacer.set_windows(throttle.windows, throttle.outside_factor)


def _now_datetime():
    from datetime import datetime

    return datetime.now()
