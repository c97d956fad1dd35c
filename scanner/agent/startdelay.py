"""The start delay's draw, kept in the state dir so a restart does not draw again.

After each start the agent delays pass work at random (up to ``[agent] start_jitter_minutes``) so a
fleet restarted together does not read in step. Drawn anew at every start, a crash loop would push
the first pass back at every restart; so the draw is saved (atomically) and a restart keeps it while
it is young: a draw is reused until twice the jitter has passed since it was made (its time has come:
the pass begins at once). Only an older draw is replaced, so within any two jitter windows at least
one lets pass work run. A draw later than the configured jitter now allows (the jitter was lowered)
is cut to it.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

from scanner.statefile import DamagedStateFile, read_json, write_json

log = logging.getLogger(__name__)

FILE_NAME = "start-delay.json"
KEEP_FOR_JITTERS = 2.0  # a draw is reused until this many jitter lengths after it was made


def start_time(state_dir: Path, ledger_dir: str, jitter_seconds: float, now: float) -> float:
    """When pass work of ``ledger_dir`` may begin after a start at ``now`` (epoch seconds)."""
    if jitter_seconds <= 0:
        return now
    path = Path(state_dir) / FILE_NAME
    try:
        draws = read_json(path) or {}
    except (DamagedStateFile, OSError) as exc:
        log.warning("%s: start delay not read, drawing anew: %s", path, exc)
        draws = {}
    kept = draws.get(ledger_dir) if isinstance(draws, dict) else None
    if _usable(kept, now, jitter_seconds):
        return min(float(kept["start_at"]), now + jitter_seconds)
    start_at = now + random.uniform(0, jitter_seconds)
    draws = dict(draws) if isinstance(draws, dict) else {}
    draws[ledger_dir] = {"drawn_at": now, "start_at": start_at}
    try:
        write_json(path, draws)
    except OSError as exc:  # the start goes on; a restart draws again
        log.warning("%s: start delay not saved: %s", path, exc.strerror or exc)
    return start_at


def _usable(kept, now: float, jitter_seconds: float) -> bool:
    if not isinstance(kept, dict):
        return False
    try:
        drawn_at, start_at = float(kept["drawn_at"]), float(kept["start_at"])
    except (KeyError, TypeError, ValueError):
        return False
    return drawn_at <= now < drawn_at + KEEP_FOR_JITTERS * jitter_seconds and start_at >= drawn_at
