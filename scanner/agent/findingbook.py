"""The agent's findings, each with a lifecycle: open while the damage is seen, ended once a later look shows
it gone, then kept only in a bounded, rotated history.

A finding is keyed by (ledger dir, category, ledger, entry log): the ledger dir is the scanner that found
it. Met again, it is the same finding: ``last_seen`` moves, its entries become what the latest look found
(entries met again within one pass of the dir are added up, the first sighting in a pass replaces them),
and it is counted, logged and handed to repair once. A finding ends when:

- a full pass of its ledger dir ends without meeting it again (``begin_pass`` / ``end_pass``);
- a narrower scan that covers it finds it no more (``settle``: a suspect ledger or entry log);
- the repair follow-up ends for its ledger: repaired, the ledger deleted, the data moved (``end_ledger``).

Open findings live in a SQLite database in the state dir (``findings.db``: each change is one small
transaction, synced; nothing is rewritten whole), so what is kept is what is damaged now. Ended ones are
appended as JSON lines to ``findings-history.jsonl``, rotated at ``HISTORY_BYTES`` with
``HISTORY_FILES`` old files kept. Marks are filed later, when the metadata answers: the findings waiting
for one are flagged in the database.

Public API (thread-safe): ``record``, ``settle``, ``begin_pass``, ``end_pass``, ``end_ledger``,
``end_category``, ``open_findings``, ``findings``, ``counts``, ``spread``, ``awaiting_marks``, ``marked``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import logging.handlers
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from scanner.checks.findings import Category, EntryRanges, Finding, count_in_ranges, merge_ranges
from scanner.statefile import FILE_MODE, DamagedStateFile, note_write, read_json

log = logging.getLogger(__name__)

DATABASE_FILE = "findings.db"
HISTORY_FILE = "findings-history.jsonl"
LEGACY_FILE = "findings.json"  # the whole-file record of earlier versions: imported once, then removed
HISTORY_BYTES = 4 << 20
HISTORY_FILES = 3  # rotated ones kept beside the current: at most 16 MiB of history

_SCHEMA = """
CREATE TABLE IF NOT EXISTS findings (
    key TEXT PRIMARY KEY,
    ledger_dir TEXT NOT NULL,
    category TEXT NOT NULL,
    ledger_id INTEGER,
    entry_log INTEGER,
    finding TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    seen_seq INTEGER NOT NULL,
    to_mark INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS findings_by_ledger ON findings (ledger_id);
CREATE TABLE IF NOT EXISTS passes (ledger_dir TEXT PRIMARY KEY, started_seq INTEGER NOT NULL);
"""
_COLUMNS = "ledger_dir, category, ledger_id, entry_log, finding, first_seen, last_seen"


@dataclass(frozen=True, slots=True)
class FindingKey:
    ledger_dir: str
    category: Category
    ledger_id: int | None
    entry_log: int | None

    @classmethod
    def of(cls, ledger_dir: str, finding: Finding) -> "FindingKey":
        return cls(ledger_dir, finding.category, finding.ledger_id, finding.entry_log)

    def text(self) -> str:
        return f"{self.ledger_dir}|{self.category.value}|{self.ledger_id}|{self.entry_log}"


@dataclass(frozen=True, slots=True)
class BookEntry:
    """One finding of the book: open (``ended`` None) or, in the history, ended (and ``why``)."""

    key: FindingKey
    finding: Finding  # as the latest look saw it
    first_seen: float  # epoch seconds
    last_seen: float
    ended: float | None = None
    why: str | None = None

    def to_json(self) -> dict:
        return {"ledger_dir": self.key.ledger_dir, **self.finding.to_json(), "first_seen": self.first_seen,
                "last_seen": self.last_seen, "ended": self.ended, "why": self.why}


class FindingBook:
    """The findings of the agent of ``state_dir``; ``ledger_dirs`` places findings an earlier version kept."""

    def __init__(self, state_dir: Path, ledger_dirs: Sequence[str] = (), clock: Callable[[], float] = time.time,
                 history_bytes: int = HISTORY_BYTES, history_files: int = HISTORY_FILES):
        self.path = Path(state_dir) / DATABASE_FILE
        self._clock = clock
        self._lock = threading.Lock()
        self.new_by_category: Counter[str] = Counter()  # findings opened since start
        self.ended_by_category: Counter[str] = Counter()  # findings ended since start
        self.corrupt_entries_found = 0  # entries found corrupt, each time a scan finds them, since start
        self._history = _history_log(Path(state_dir) / HISTORY_FILE, history_bytes, history_files)
        self._db = self._open()
        self._seq = self._db.execute(
            "SELECT MAX(COALESCE((SELECT MAX(seen_seq) FROM findings), 0),"
            " COALESCE((SELECT MAX(started_seq) FROM passes), 0))").fetchone()[0]
        self._import_legacy(Path(state_dir) / LEGACY_FILE, list(ledger_dirs))

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.DatabaseError as exc:  # not a database, or damaged: what was open is found again
            damaged = self.path.with_name(self.path.name + ".damaged")
            log.warning("%s: damaged findings database (%s), moved to %s; starting empty: the next passes find "
                        "what is still damaged", self.path, exc, damaged)
            os.replace(self.path, damaged)
            for suffix in ("-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, FILE_MODE))  # its -wal and -shm get its mode
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = FULL")  # a finding is saved before the cursor moves past it
            db.executescript(_SCHEMA)
            db.execute("SELECT COUNT(*) FROM findings").fetchone()
        except BaseException:
            db.close()
            raise
        return db

    def close(self) -> None:
        with self._lock:
            self._db.close()
            for handler in self._history.handlers:
                handler.close()

    # -- what the scanners report -------------------------------------------------------------

    def record(self, ledger_dir: str, findings: Iterable[Finding]) -> list[Finding]:
        """Remember what a scanner of ``ledger_dir`` found (saved before returning); the findings opened now."""
        findings = list(findings)
        if not findings:
            return []
        with self._lock, self._writing(), self._transaction():
            opened = self._record(ledger_dir, findings)
        _log_opened(opened)
        return opened

    def settle(self, ledger_dir: str, findings: Iterable[Finding], categories: Iterable[Category], *,
               ledger_id: int | None = None, entry_log: int | None = None, why: str) -> list[Finding]:
        """Record ``findings``, the whole truth of a scan of ``ledger_dir`` narrowed to ``ledger_id`` or
        ``entry_log``: open findings of that dir there, in ``categories``, that it did not find end. The new."""
        if (ledger_id is None) == (entry_log is None):
            raise ValueError("settle narrows to one ledger or one entry log")
        findings, categories = list(findings), tuple(categories)
        met = {FindingKey.of(ledger_dir, f).text() for f in findings}
        where = "ledger_id = ?" if ledger_id is not None else "entry_log = ?"
        with self._lock, self._writing():
            with self._transaction():
                opened = self._record(ledger_dir, findings) if findings else []
                ended = self._end_where(f"ledger_dir = ? AND {where} AND category IN ({_marks(categories)})",
                                        (ledger_dir, ledger_id if ledger_id is not None else entry_log,
                                         *(c.value for c in categories)), why, keep=met)
            self._remember_ended(ended)
        _log_opened(opened)
        return opened

    def begin_pass(self, ledger_dir: str) -> None:
        """A full pass of ``ledger_dir`` starts: what it does not meet again has ended when it ends."""
        with self._lock, self._writing():
            self._seq += 1
            self._db.execute("INSERT OR REPLACE INTO passes (ledger_dir, started_seq) VALUES (?, ?)",
                             (ledger_dir, self._seq))

    def end_pass(self, ledger_dir: str, why: str, unjudged: Collection[int] = ()) -> list[BookEntry]:
        """The pass of ``ledger_dir`` ended: its findings not met since it began end (not the follow-up's own, nor
        those of ``unjudged`` ledgers, which the pass could not judge)."""
        with self._lock, self._writing():
            started = self._pass_start(ledger_dir)
            if started is None:
                return []
            with self._transaction():
                ended = self._end_where("ledger_dir = ? AND seen_seq < ? AND category != ?",
                                        (ledger_dir, started, Category.UNREPAIRED.value), why, spared=unjudged)
            self._remember_ended(ended)
        return ended

    def end_ledger(self, ledger_id: int, categories: Iterable[Category], why: str) -> list[BookEntry]:
        """End the ledger's open findings in ``categories``, in every ledger dir (the repair follow-up's word)."""
        categories = tuple(categories)
        with self._lock, self._writing():
            with self._transaction():
                ended = self._end_where(f"ledger_id = ? AND category IN ({_marks(categories)})",
                                        (ledger_id, *(c.value for c in categories)), why)
            self._remember_ended(ended)
        return ended

    def end_category(self, category: Category, why: str) -> list[BookEntry]:
        """End every open finding of ``category`` (one nothing will look at again)."""
        with self._lock, self._writing():
            with self._transaction():
                ended = self._end_where("category = ?", (category.value,), why)
            self._remember_ended(ended)
        return ended

    # -- what the agent shows and hands on ----------------------------------------------------

    def open_findings(self) -> list[BookEntry]:
        with self._lock:
            return [_entry(row) for row in self._db.execute(f"SELECT {_COLUMNS} FROM findings ORDER BY key")]

    def findings(self) -> list[Finding]:
        return [entry.finding for entry in self.open_findings()]

    def counts(self) -> dict[str, int]:
        """Open findings by category."""
        with self._lock:
            return dict(self._db.execute("SELECT category, COUNT(*) FROM findings GROUP BY category ORDER BY category"))

    def spread(self, ledger_categories, log_categories) -> tuple[int, int]:
        """How many ledgers open findings of ``ledger_categories`` name, and how many entry logs (of any ledger
        dir) those of ``log_categories`` name: counted by the database, not by reading every finding."""
        ledger_values = [c.value for c in ledger_categories]
        log_values = [c.value for c in log_categories]
        with self._lock:
            (ledgers,), = self._db.execute(
                f"SELECT COUNT(DISTINCT ledger_id) FROM findings WHERE category IN ({_marks(ledger_values)})",
                ledger_values)
            (logs,), = self._db.execute(
                "SELECT COUNT(*) FROM (SELECT DISTINCT ledger_dir, entry_log FROM findings "
                f"WHERE entry_log IS NOT NULL AND category IN ({_marks(log_values)}))", log_values)
        return ledgers, logs

    def awaiting_marks(self) -> list[BookEntry]:
        with self._lock:
            return [_entry(row) for row in
                    self._db.execute(f"SELECT {_COLUMNS} FROM findings WHERE to_mark = 1 ORDER BY key")]

    def marked(self, entries: Iterable[BookEntry]) -> None:
        """These were handed to repair (and its own state saved): not again."""
        with self._lock, self._writing(), self._transaction():
            self._db.executemany("UPDATE findings SET to_mark = 0 WHERE key = ?", [(e.key.text(),) for e in entries])

    # -- inside the lock ----------------------------------------------------------------------

    def _record(self, ledger_dir: str, findings: list[Finding]) -> list[Finding]:
        now = self._clock()
        self._seq += 1
        started = self._pass_start(ledger_dir) or 0
        opened = []
        for finding in findings:
            if finding.category is Category.CORRUPT_ENTRY and finding.entries:
                self.corrupt_entries_found += count_in_ranges(finding.entries)
            key = FindingKey.of(ledger_dir, finding)
            row = self._db.execute("SELECT finding, seen_seq FROM findings WHERE key = ?", (key.text(),)).fetchone()
            if row is None:
                self._db.execute(
                    "INSERT INTO findings (key, ledger_dir, category, ledger_id, entry_log, finding, first_seen,"
                    " last_seen, seen_seq, to_mark) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (key.text(), ledger_dir, finding.category.value, finding.ledger_id, finding.entry_log,
                     json.dumps(finding.to_json()), now, now, self._seq,
                     int(finding.category.needs_rereplication)))
                opened.append(finding)
                continue
            if row[1] >= started:  # met before in this pass: another part of the same damage
                finding = _joined(Finding.from_json(json.loads(row[0])), finding)
            self._db.execute("UPDATE findings SET finding = ?, last_seen = ?, seen_seq = ? WHERE key = ?",
                             (json.dumps(finding.to_json()), now, self._seq, key.text()))
        for finding in opened:
            self.new_by_category[finding.category.value] += 1
        return opened

    def _end_where(self, condition: str, parameters: tuple, why: str, keep: set[str] = frozenset(),
                   spared: Collection[int] = ()) -> list[BookEntry]:
        """End the findings ``condition`` selects, but those whose key is in ``keep`` or ledger in ``spared``."""
        rows = self._db.execute(f"SELECT key, {_COLUMNS} FROM findings WHERE {condition}", parameters).fetchall()
        now = self._clock()
        entries = (_entry(row[1:]) for row in rows if row[0] not in keep)
        ended = [dataclasses.replace(entry, ended=now, why=why) for entry in entries
                 if entry.key.ledger_id not in spared]
        self._db.executemany("DELETE FROM findings WHERE key = ?", [(e.key.text(),) for e in ended])
        return ended

    def _remember_ended(self, ended: list[BookEntry]) -> None:
        """After the database let them go: counted, logged, and kept in the history."""
        for entry in ended:
            self.ended_by_category[entry.key.category.value] += 1
            self._history.info(json.dumps(entry.to_json(), sort_keys=True))
            log.info("finding ended: %s: %s", _place(entry.finding), entry.why)

    def _pass_start(self, ledger_dir: str) -> int | None:
        row = self._db.execute("SELECT started_seq FROM passes WHERE ledger_dir = ?", (ledger_dir,)).fetchone()
        return None if row is None else row[0]

    def _writing(self) -> "_Writing":
        return _Writing(self.path)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One synced commit for all the changes inside (the caller holds the lock)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- findings of earlier versions ---------------------------------------------------------

    def _import_legacy(self, path: Path, ledger_dirs: list[str]) -> None:
        """Open the findings an earlier version kept in ``findings.json`` (those awaiting a mark still do), then
        remove it. Each goes to the dir that owns its ledger (ledger id mod dirs), as a pass would find it."""
        if not path.exists() or not ledger_dirs:
            return
        try:
            raw = read_json(path) or {}
            known = {str(k): (Finding.from_json(v["finding"]), float(v["first_seen"]), float(v["last_seen"]))
                     for k, v in raw.get("known", {}).items()}
            to_mark = {str(k) for k in raw.get("to_mark", [])}
        except (DamagedStateFile, OSError, KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            log.warning("%s: damaged findings file of an earlier version, not imported: %s", path, exc)
            known, to_mark = {}, set()
        with self._lock, self._writing(), self._transaction():
            for old_key, (finding, first_seen, last_seen) in known.items():
                owner = ledger_dirs[(finding.ledger_id or 0) % len(ledger_dirs)]
                key = FindingKey.of(owner, finding)
                self._db.execute(
                    "INSERT OR REPLACE INTO findings (key, ledger_dir, category, ledger_id, entry_log, finding,"
                    " first_seen, last_seen, seen_seq, to_mark) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?)",
                    (key.text(), owner, finding.category.value, finding.ledger_id, finding.entry_log,
                     json.dumps(finding.to_json()), first_seen, last_seen, int(old_key in to_mark)))
        path.unlink()
        log.info("%s: %d findings of an earlier version imported into %s", path, len(known), self.path.name)


class _Writing:
    """A database write: what fails becomes the OSError every state write raises, and health names the file."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, traceback) -> bool:
        if exc is None:
            note_write(self.path, None)
            return False
        if isinstance(exc, sqlite3.Error):
            problem = f"cannot write {self.path}: {exc}"
            note_write(self.path, problem)
            raise OSError(errno.EIO, str(exc), str(self.path)) from exc
        return False


def _history_log(path: Path, max_bytes: int, old_files: int) -> logging.Logger:
    """A logger of its own (nothing propagates) writing one line per ended finding, rotated by size."""
    history = logging.Logger(f"findings-history:{path}")
    handler = _PrivateRotatingFile(path, maxBytes=max_bytes, backupCount=old_files, delay=True, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    history.addHandler(handler)
    return history


class _PrivateRotatingFile(logging.handlers.RotatingFileHandler):
    """Rotation as the standard library does it; each new file created private, as every state file is."""

    def _open(self):
        return open(os.open(self.baseFilename, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE), "a",
                    encoding=self.encoding)


def _entry(row) -> BookEntry:
    ledger_dir, category, ledger_id, entry_log, finding, first_seen, last_seen = row
    return BookEntry(FindingKey(ledger_dir, Category(category), ledger_id, entry_log),
                     Finding.from_json(json.loads(finding)), first_seen, last_seen)


def _joined(before: Finding, now: Finding) -> Finding:
    """One finding for two parts of the same damage met in one pass: their entries together, the first words."""
    if before.entries is None or now.entries is None:
        return now
    entries = merge_ranges(before.entries + now.entries)
    offsets = [o for o in (before.offset, now.offset) if o is not None]
    return Finding(now.category, now.ledger_id, entries, now.entry_log, min(offsets) if offsets else None,
                   before.detail)


def _marks(values: Iterable) -> str:
    return ", ".join("?" for _ in values)


def _log_opened(opened: list[Finding]) -> None:
    """A line for each finding opened: WARNING for damage, INFO for what is informational (orphan ledgers)."""
    for finding in opened:
        log.log(logging.INFO if finding.category.informational else logging.WARNING, "finding: %s: %s",
                _place(finding), finding.detail)


def _place(finding: Finding) -> str:
    """``corrupt_entry ledger 7 entry log 2``, naming only what the finding is about."""
    place = [finding.category.value]
    if finding.ledger_id is not None:
        place.append(f"ledger {finding.ledger_id}")
    if finding.entry_log is not None:
        place.append(f"entry log {finding.entry_log}")
    return " ".join(place)
