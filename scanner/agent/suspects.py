"""Suspects: ledgers and entry logs named by read errors, scanned before the regular pass.

The queue is saved on every change, so a crash loses none: a suspect taken but not finished is
queued again at the next start. A suspect scanned within the dedup window is not queued again.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from scanner.agent.lograte import RateLimitedLog
from scanner.metadata.ledger import MAX_LEDGER_ID
from scanner.metadata.store import MetadataUnavailable
from scanner.statefile import FILE_MODE, DamagedStateFile, parse_json, read_json, write_json

log = logging.getLogger(__name__)

LEDGER = "ledger"
ENTRY_LOG = "entry_log"
KINDS = (LEDGER, ENTRY_LOG)
STATE_FILE = "suspects.json"
# Where `bookie-scanner suspect` appends when the agent does not answer (one JSON object per line).
INBOX_FILE = "suspects.inbox"
# Entries of the inbox read at most per call: a huge inbox is drained over several calls.
INBOX_BATCH_BYTES = 1 << 20
# A suspect whose scan failed this often (errors other than unreachable metadata) is dropped: it must
# not hold the regular pass behind it for good.
MAX_FAILED_SCANS = 3


@dataclass(frozen=True, slots=True)
class Suspect:
    kind: str  # LEDGER or ENTRY_LOG
    id: int
    ledger_dir: int | None = None  # which dir's scanner owns it; None until routed

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.id}@{'' if self.ledger_dir is None else self.ledger_dir}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "id": self.id, "ledger_dir": self.ledger_dir}


def parse_suspect(obj) -> Suspect:
    """A suspect from ``{"ledger": N}``, ``{"entry_log": N}`` or ``to_json``'s form; ValueError otherwise."""
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object like {\"ledger\": 12} or {\"entry_log\": 3}")
    if "kind" in obj:
        kind, value, ledger_dir = obj.get("kind"), obj.get("id"), obj.get("ledger_dir")
    else:
        named = [k for k in KINDS if k in obj]
        if len(named) != 1 or len(obj) != 1:
            raise ValueError("expected exactly one of \"ledger\" or \"entry_log\", e.g. {\"ledger\": 12}")
        kind, value, ledger_dir = named[0], obj[named[0]], None
    if kind not in KINDS or isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LEDGER_ID:
        # Ledger ids are Java longs, entry log ids too (parsed from hex file names).
        raise ValueError(f"expected a {'/'.join(KINDS)} id that is an integer from 0 to {MAX_LEDGER_ID}, "
                         f"found {value!r}")
    if ledger_dir is not None and (isinstance(ledger_dir, bool) or not isinstance(ledger_dir, int) or ledger_dir < 0):
        raise ValueError(f"ledger_dir {ledger_dir!r}: expected a non-negative integer")
    return Suspect(kind, value, ledger_dir)


def append_to_inbox(state_dir: Path, suspect: Suspect) -> None:
    """Leave a suspect for the agent to pick up when it (re)starts; safe against a concurrent drain."""
    path = Path(state_dir) / INBOX_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    with open(fd, "a", encoding="utf-8") as inbox:
        fcntl.flock(inbox, fcntl.LOCK_EX)
        inbox.write(json.dumps(suspect.to_json()) + "\n")
        inbox.flush()
        os.fsync(inbox.fileno())


class SuspectQueue:
    """A persisted FIFO of routed suspects with a dedup window; thread-safe."""

    def __init__(self, state_dir: Path, window_seconds: float = 600.0, limit: int = 10000,
                 clock: Callable[[], float] = time.time):
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / STATE_FILE
        self.window_seconds = window_seconds
        self.limit = limit
        self._clock = clock
        self._lock = threading.Lock()
        self._queued: OrderedDict[str, Suspect] = OrderedDict()
        self._taken: dict[str, Suspect] = {}
        self._recent: OrderedDict[str, float] = OrderedDict()  # key -> when its scan finished
        self.dropped = 0
        self.failed = 0  # suspects dropped after MAX_FAILED_SCANS failed scans
        self._failures: dict[str, int] = {}
        self._drops = RateLimitedLog(log, logging.WARNING)
        self._ignored_lines = RateLimitedLog(log, logging.WARNING)
        self._load()

    def _load(self) -> None:
        try:
            raw = read_json(self.path) or {}
            queued = [parse_suspect(s) for s in raw.get("queued", [])]
            recent = {str(k): float(v) for k, v in raw.get("recent", {}).items()}
        except (DamagedStateFile, OSError, ValueError, TypeError, AttributeError, OverflowError) as exc:
            log.warning("%s: damaged suspect queue, starting empty: %s", self.path, exc)
            return
        for suspect in queued:
            self._queued[suspect.key] = suspect
        for key, when in sorted(recent.items(), key=lambda item: item[1]):
            self._recent[key] = when

    def _save(self, queued: OrderedDict[str, Suspect] | None = None) -> None:
        # Taken suspects are saved as queued: they count as done only when their scan finished.
        queued = [*self._taken.values(), *(self._queued if queued is None else queued).values()]
        write_json(self.path, {"queued": [s.to_json() for s in queued], "recent": dict(self._recent)})

    def add(self, suspects: list[Suspect]) -> int:
        """Queue routed suspects not already queued nor scanned within the window; how many were new.

        Saved before they count as queued: OSError (a full or read-only state dir) leaves the queue as it was.
        """
        with self._lock:
            self._expire()
            queued = self._queued.copy()
            added = dropped = 0
            for suspect in suspects:
                key = suspect.key
                if key in queued or key in self._taken or key in self._recent:
                    continue
                if len(queued) >= self.limit:
                    dropped += 1
                    continue
                queued[key] = suspect
                added += 1
            if added:
                self._save(queued)
            self._queued = queued
            self.dropped += dropped
        if dropped:
            self._drops.log("suspect queue full (%d): %d suspect(s) dropped, %d in all", self.limit, dropped,
                            self.dropped)
        return added

    def flush_logs(self) -> None:
        """Write the pending summary lines of repeated events (called now and then)."""
        self._drops.flush()
        self._ignored_lines.flush()

    def take(self, ledger_dir: int) -> Suspect | None:
        """The oldest suspect of ``ledger_dir``; it stays saved until ``done``."""
        with self._lock:
            for key, suspect in self._queued.items():
                if suspect.ledger_dir == ledger_dir:
                    del self._queued[key]
                    self._taken[key] = suspect
                    return suspect
            return None

    def has_work(self, ledger_dir: int) -> bool:
        with self._lock:
            return any(s.ledger_dir == ledger_dir for s in self._queued.values())

    def done(self, suspect: Suspect) -> None:
        """The suspect's scan finished and its findings are recorded: remember it for the window."""
        with self._lock:
            self._taken.pop(suspect.key, None)
            self._failures.pop(suspect.key, None)
            self._recent[suspect.key] = self._clock()
            self._recent.move_to_end(suspect.key)
            self._expire()
            self._save()

    def release(self, suspect: Suspect) -> None:
        """The scan could not finish: queue it again, first.

        Called while the exception that cut the scan short is handled, if one did. A scan that failed
        (neither stopped nor waiting for the metadata) counts against the suspect; at MAX_FAILED_SCANS
        it is dropped instead, logged and counted, and not queued again within the window: the regular
        pass still reaches its ledger or entry log.
        """
        failure = sys.exc_info()[1]
        with self._lock:
            if self._taken.pop(suspect.key, None) is None:
                return
            if isinstance(failure, Exception) and not isinstance(failure, MetadataUnavailable):
                self._failures[suspect.key] = failures = self._failures.get(suspect.key, 0) + 1
                if failures >= MAX_FAILED_SCANS:
                    del self._failures[suspect.key]
                    self._recent[suspect.key] = self._clock()
                    self.failed += 1
                    self._save()
                    log.warning("suspect %s dropped after %d failed scans (last: %s: %s)", suspect.key, failures,
                                type(failure).__name__, failure)
                    return
            self._queued[suspect.key] = suspect
            self._queued.move_to_end(suspect.key, last=False)

    def _expire(self) -> None:
        horizon = self._clock() - self.window_seconds
        while self._recent and (next(iter(self._recent.values())) < horizon or len(self._recent) > self.limit):
            self._recent.popitem(last=False)

    def queued(self) -> int:
        with self._lock:
            return len(self._queued) + len(self._taken)

    def recently_scanned(self) -> dict[str, float]:
        with self._lock:
            return dict(self._recent)

    def drain_inbox(self, route: Callable[[Suspect], list[Suspect]]) -> int:
        """Move what ``bookie-scanner suspect`` left in the inbox into the queue; how many were new."""
        path = self.state_dir / INBOX_FILE
        try:
            inbox = open(path, "r+", encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return 0
        with inbox:
            fcntl.flock(inbox, fcntl.LOCK_EX)
            lines = inbox.read(INBOX_BATCH_BYTES + 1)
            rest = ""
            if len(lines) > INBOX_BATCH_BYTES:
                cut = lines.rfind("\n", 0, INBOX_BATCH_BYTES) + 1
                lines, rest = lines[:cut], lines[cut:] + inbox.read()
            routed = []
            for number, line in enumerate(lines.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    routed.extend(route(parse_suspect(parse_json(line, INBOX_FILE))))
                except ValueError as exc:
                    self._ignored_lines.log("%s: line %d ignored: %s", path, number, exc)
            added = self.add(routed)  # saved before the inbox is emptied: a crash between them repeats, never loses
            inbox.seek(0)
            inbox.truncate()
            inbox.write(rest)
            inbox.flush()
            os.fsync(inbox.fileno())
        return added
