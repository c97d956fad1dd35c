"""The scanner's own state files (cursors, suspects, marks): written atomically, read defensively.

Never used on a bookie's directories: only on the scanner's state dir.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


class DamagedStateFile(ValueError):
    """A state file exists but does not parse (a torn write from before atomic writes, a disk error)."""


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file, whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
