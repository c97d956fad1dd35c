"""Opening a bookie's file for reading without touching it: not even its access time where the OS allows."""

from __future__ import annotations

import os

# Linux: reading then leaves the file's metadata alone (allowed to the file's owner or root); elsewhere 0.
_NOATIME = getattr(os, "O_NOATIME", 0)


def open_read_only(path) -> int:
    """A read-only descriptor of ``path``, opened with O_NOATIME where this process may."""
    try:
        return os.open(path, os.O_RDONLY | _NOATIME | os.O_CLOEXEC)
    except PermissionError:
        if not _NOATIME:
            raise
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
