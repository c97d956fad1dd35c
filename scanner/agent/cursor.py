"""Where a ledger directory's scanner is in its pass, saved so a restart resumes there."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from scanner.statefile import DamagedStateFile, read_json, write_json

log = logging.getLogger(__name__)

LEDGERS = "ledgers"
ENTRY_LOGS = "entry_logs"
WAITING = "waiting"  # the pass is done; the next starts when the period is over
PHASES = (LEDGERS, ENTRY_LOGS, WAITING)
# Share of a pass's progress given to the ledger phase, which reads headers only.
LEDGER_PHASE_SHARE = 0.1


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where the pass is. In the entry-log phase the logs are walked in id order: every log up to
    ``last_log_done`` was walked to its end (or had vanished, then it is in ``vanished_logs``), and
    ``entry_log_id`` is the log being walked, to be resumed at the record that starts at ``offset``
    (0: its first record). Nothing is ever "done" by default: a restart resumes exactly there."""

    ledger_dir: str
    pass_started: float  # epoch seconds
    phase: str
    ledgers_done: int = 0
    ledgers_total: int = 0
    last_log_done: int | None = None  # the last entry log walked to its end in this pass
    entry_log_id: int | None = None  # the entry log being walked
    entry_log_inode: int | None = None  # a log id can be reused: resume only in the same file
    offset: int = 0  # the record boundary in that log where the walk resumes (0: its first record)
    vanished_logs: tuple[int, ...] = ()  # logs garbage collection removed before their turn
    bytes_done: int = 0
    bytes_total: int = 0
    passes_completed: int = 0
    last_pass_finished: float | None = None

    def advanced(self, **changes) -> "Cursor":
        return replace(self, **changes)

    @property
    def pass_progress(self) -> float:
        """0..1 through the current pass (1 while waiting for the next one)."""
        if self.phase == WAITING:
            return 1.0
        if self.phase == LEDGERS:
            return LEDGER_PHASE_SHARE * min(1.0, self.ledgers_done / max(1, self.ledgers_total))
        share = min(1.0, self.bytes_done / self.bytes_total) if self.bytes_total else 1.0
        return LEDGER_PHASE_SHARE + (1 - LEDGER_PHASE_SHARE) * share


def fresh_cursor(ledger_dir: str, now: float, passes_completed: int = 0,
                 last_pass_finished: float | None = None) -> Cursor:
    return Cursor(ledger_dir, now, LEDGERS, passes_completed=passes_completed,
                  last_pass_finished=last_pass_finished)


def cursor_path(state_dir: Path, dir_index: int) -> Path:
    return Path(state_dir) / f"cursor-{dir_index}.json"


def load_cursor(path: Path, ledger_dir: str) -> Cursor | None:
    """The saved cursor, or None (with a warning when the file is damaged or is another dir's)."""
    try:
        raw = read_json(path)
    except (DamagedStateFile, OSError) as exc:
        log.warning("%s: damaged cursor, starting a fresh pass: %s", path, exc)
        return None
    if raw is None:
        return None
    try:
        cursor = _from_json(raw)
    except (TypeError, ValueError) as exc:
        log.warning("%s: unusable cursor, starting a fresh pass: %s", path, exc)
        return None
    if cursor.ledger_dir != ledger_dir:
        log.warning("%s: cursor of %s, not of %s: starting a fresh pass", path, cursor.ledger_dir, ledger_dir)
        return None
    return cursor


def save_cursor(path: Path, cursor: Cursor) -> None:
    write_json(path, asdict(cursor))


_TYPES = {"ledger_dir": (str,), "pass_started": (int, float), "phase": (str,),
          "last_pass_finished": (int, float, type(None)), "vanished_logs": (list,)}


def _from_json(raw) -> Cursor:
    if not isinstance(raw, dict):
        raise TypeError(f"expected a JSON object, found {type(raw).__name__}")
    values = {}
    for f in fields(Cursor):
        value = raw.get(f.name)
        expected = _TYPES.get(f.name, (int, type(None)) if f.default is None else (int,))
        out_of_range = isinstance(value, int) and not 0 <= value < 2**63  # nothing we write is outside
        if isinstance(value, bool) or not isinstance(value, expected) or out_of_range:
            raise ValueError(f"{f.name} = {value!r}")
        if isinstance(value, list):
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
                raise ValueError(f"{f.name} = {value!r}")
            value = tuple(value)
        values[f.name] = value
    if values["phase"] not in PHASES:
        raise ValueError(f"phase = {values['phase']!r}, expected one of {', '.join(PHASES)}")
    return Cursor(**values)
