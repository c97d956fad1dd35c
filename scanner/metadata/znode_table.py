"""Znodes kept in an SQLite file of their own, so that a million of them cost the process little memory.

The file lives in a private temporary directory, is filled once and then only read: what is hot
stays in the page cache, not in the process. Nodes are keyed by (parent path, name), so reading
one node and listing a node's children are both one index lookup. Several threads may read at
once; a process forked after the fill reads through a read-only connection of its own.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import threading
import weakref
from collections.abc import Iterable

from scanner.metadata.store import ZNode

_SCHEMA = """
CREATE TABLE znode (
    parent TEXT NOT NULL, name TEXT NOT NULL, data BLOB, ephemeral INTEGER NOT NULL,
    mzxid INTEGER NOT NULL, version INTEGER NOT NULL, ctime INTEGER,
    PRIMARY KEY (parent, name)
) WITHOUT ROWID
"""
_INSERT = "INSERT OR REPLACE INTO znode VALUES (?, ?, ?, ?, ?, ?, ?)"  # a path given twice: the last wins
_SELECT_NODE = "SELECT data, ephemeral, mzxid, version, ctime FROM znode WHERE parent = ? AND name = ?"
_SELECT_NAMED = "SELECT name, data, ephemeral, mzxid, version, ctime FROM znode WHERE parent = ? AND name IN ({})"
_NAMES_PER_QUERY = 500  # well below SQLite's limit on bound parameters
_SELECT_CHILDREN = "SELECT name FROM znode WHERE parent = ? AND name != ''"


class ZNodeTable:
    """Znodes by path, written once from ``nodes``; ``close`` (or garbage collection) removes the file."""

    def __init__(self, nodes: Iterable[ZNode]):
        self._dir = tempfile.mkdtemp(prefix="bookie-scanner-znodes-")
        self._cleanup = weakref.finalize(self, _remove_in_owner, self._dir, os.getpid())
        self._path = os.path.join(self._dir, "znodes.sqlite")
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._db: sqlite3.Connection | None = sqlite3.connect(self._path, check_same_thread=False)
        try:
            # scratch data: a crash loses nothing worth a journal or a sync
            self._db.execute("PRAGMA journal_mode = OFF")
            self._db.execute("PRAGMA synchronous = OFF")
            self._db.execute(_SCHEMA)
            with self._db:
                self._db.executemany(_INSERT, (_row(node) for node in nodes))
            _keep_read_lock(self._db)
        except BaseException:
            self.close()
            raise

    def node(self, path: str) -> ZNode | None:
        if not path.startswith("/"):
            return None
        parent, _, name = path.rpartition("/")
        with self._lock:
            db = self._connection()
            row = db.execute(_SELECT_NODE, (parent, name)).fetchone() if db else None
        if row is None:
            return None
        data, ephemeral, mzxid, version, ctime = row
        return ZNode(path, data, bool(ephemeral), mzxid, version, ctime)

    def nodes(self, paths: list[str]) -> list[ZNode | None]:
        """Several znodes at once: one query per parent, not one per node."""
        wanted: dict[str, list[str]] = {}
        for path in paths:
            if path.startswith("/"):
                parent, _, name = path.rpartition("/")
                wanted.setdefault(parent, []).append(name)
        found: dict[str, ZNode] = {}
        with self._lock:
            db = self._connection()
            for parent, names in wanted.items() if db else ():
                for start in range(0, len(names), _NAMES_PER_QUERY):
                    part = names[start:start + _NAMES_PER_QUERY]
                    query = _SELECT_NAMED.format(", ".join("?" * len(part)))
                    for name, data, ephemeral, mzxid, version, ctime in db.execute(query, (parent, *part)):
                        path = f"{parent}/{name}"
                        found[path] = ZNode(path, data, bool(ephemeral), mzxid, version, ctime)
        return [found.get(path) for path in paths]

    def children(self, path: str) -> list[str]:
        if not path.startswith("/"):
            return []
        with self._lock:
            db = self._connection()
            rows = db.execute(_SELECT_CHILDREN, ("" if path == "/" else path,)).fetchall() if db else []
        return [name for (name,) in rows]

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
        self._cleanup()

    def _connection(self) -> sqlite3.Connection | None:
        if self._db is not None and self._pid != os.getpid():
            # SQLite connections must not cross a fork: the child opens its own
            self._db = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, check_same_thread=False)
            _keep_read_lock(self._db)
            self._pid = os.getpid()
        return self._db


def _keep_read_lock(db: sqlite3.Connection) -> None:
    # the file no longer changes: hold the shared lock instead of taking it (and re-checking the
    # file) on every lookup, which costs several times the lookup; other readers can still share it
    db.execute("PRAGMA locking_mode = EXCLUSIVE")


def _row(node: ZNode) -> tuple:
    parent, _, name = node.path.rpartition("/")
    return parent, name, node.data, int(node.ephemeral), node.mzxid, node.version, node.ctime


def _remove_in_owner(directory: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # a forked child's exit must not take the parent's file
        shutil.rmtree(directory, ignore_errors=True)
