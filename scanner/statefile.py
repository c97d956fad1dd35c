"""The scanner's own state files (cursors, suspects, marks): written atomically, read defensively.

Never used on a bookie's directories: only on the scanner's state dir. Every state file is
private to the scanner's user (mode 0600). A file whose last write failed (a full or read-only
disk) is remembered until a write of it succeeds, so health can say the state is not saved.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

FILE_MODE = 0o600
TEMP_SUFFIX = ".tmp"
# file -> why its last write failed; gone once a write of it succeeds
_failed_writes: dict[Path, str] = {}


class DamagedStateFile(ValueError):
    """A state file exists but does not parse (a torn write from before atomic writes, a disk error)."""


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file, whole."""
    path = Path(path)
    try:
        _replace(path, data)
    except OSError as exc:
        note_write(path, f"cannot write {path}: {exc.strerror or exc}")
        raise
    note_write(path, None)


def note_write(path: Path, problem: str | None) -> None:
    """Remember why the last write of ``path`` failed (None: it succeeded), for ``write_problem``."""
    if problem is None:
        _failed_writes.pop(Path(path), None)
    else:
        _failed_writes[Path(path)] = problem


def _replace(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)  # the rename itself must survive a power cut
    finally:
        os.close(dir_fd)


def write_problem(directory: Path) -> str | None:
    """Why a state file in ``directory`` could not be written last time, or None if every one could."""
    directory = Path(directory)
    return next((problem for path, problem in list(_failed_writes.items()) if path.parent == directory), None)


def remove_stale_temps(directory: Path) -> list[Path]:
    """Delete the temp files writes cut short by a crash left in ``directory``; the ones removed."""
    removed = []
    for temp in Path(directory).glob(f".*{TEMP_SUFFIX}"):
        if temp.is_file():
            temp.unlink(missing_ok=True)
            removed.append(temp)
    return removed


def write_json(path: Path, obj) -> None:
    write_atomically(path, json.dumps(obj, indent=1, sort_keys=True).encode() + b"\n")


def read_json(path: Path):
    """The parsed file, or None when it does not exist; DamagedStateFile when it does not parse."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    return parse_json(raw, path)


def parse_json(raw: bytes | str, source) -> object:
    """``raw`` parsed; DamagedStateFile naming ``source`` when it is not JSON or nests too deep to parse."""
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedStateFile(f"{source}: not a readable state file ({exc})") from None
    except RecursionError:
        raise DamagedStateFile(f"{source}: not a readable state file (JSON nested too deep)") from None
