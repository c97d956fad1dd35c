"""A directory tree's state, to prove that reading a bookie changed nothing in it."""

import hashlib
import os
from pathlib import Path


def snapshot(root: Path) -> dict[str, tuple]:
    """relative path -> (size, mtime_ns, sha256) for files, (mtime_ns,) for directories."""
    state = {}
    for directory, subdirs, files in os.walk(root):
        state[os.path.relpath(directory, root)] = (os.stat(directory).st_mtime_ns,)
        for name in files:
            path = Path(directory, name)
            info = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            state[str(path.relative_to(root))] = (info.st_size, info.st_mtime_ns, digest)
    return state
