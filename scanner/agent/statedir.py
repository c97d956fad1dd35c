"""The agent's state dir, made ready before anything is written to it: never inside a bookie's dirs,
writable, and (when the agent starts) cleared of the temp files a crash left behind.

Every command that writes there (``run``, ``suspect``, ``pause``) checks first, so a state dir set
to a bookie dir by mistake is refused before a single file or directory is created.
"""

from __future__ import annotations

import logging
from pathlib import Path

from scanner.statefile import remove_stale_temps, write_atomically

log = logging.getLogger(__name__)

DIR_MODE = 0o700
PROBE_FILE = ".writable"


class StateDirError(Exception):
    """The state dir cannot be used; one line saying why."""


def make_ready(state_dir: Path, layout) -> None:
    """The checks every writer of the state dir makes first: outside ``layout``'s dirs, then usable."""
    refuse_inside_bookie(state_dir, layout.ledger_dirs + layout.index_dirs)
    prepare(state_dir)


def refuse_inside_bookie(state_dir: Path, bookie_dirs) -> None:
    """StateDirError if ``state_dir`` is, or lies inside, one of the bookie's dirs (symlinks resolved)."""
    state = Path(state_dir).resolve()
    for bookie_dir in bookie_dirs:
        if state.is_relative_to(Path(bookie_dir).resolve()):
            raise StateDirError(f"state dir {state_dir} lies inside bookie dir {bookie_dir}: "
                                "the scanner never writes there; choose another")


def prepare(state_dir: Path) -> None:
    """Create the state dir if needed and prove it writable; StateDirError if it is not usable."""
    state_dir = Path(state_dir)
    try:
        state_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        probe = state_dir / PROBE_FILE
        write_atomically(probe, b"")
        probe.unlink(missing_ok=True)  # another command may be probing at the same time
    except OSError as exc:
        raise StateDirError(f"state dir {state_dir} is not usable: {exc.strerror or exc}") from None


def clean(state_dir: Path) -> None:
    """Remove the temp files interrupted writes left (only the agent, at start: no write of its own is under way)."""
    removed = remove_stale_temps(state_dir)
    if removed:
        log.info("removed %d temp file(s) left by interrupted writes in %s", len(removed), state_dir)
