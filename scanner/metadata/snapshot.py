"""A metadata store over a ZooKeeper dump file, so a scan needs no cluster; and the dump writer.

The dump is a JSON list of znodes ``{"path", "data_b64", "ephemeral", "mzxid", "version"}``
(``data_b64`` null = no data), optionally with ``"ctime"`` (ms since epoch), which
``write_dump`` always records so that ledgers without a stored ctime keep the znode's.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from scanner.metadata.ledger_paths import LAYOUT_NODE, LedgerManager
from scanner.metadata.store import MetadataStore, ZNode, check_root, resolve_manager

DEFAULT_ROOT = "/ledgers"
_UNDERREPLICATION = "underreplication"


class DumpFormatError(ValueError):
    """A dump file that is not a list of znodes in the expected shape."""


class SnapshotStore(MetadataStore):
    """Ledger metadata read from a dump file, held in memory.

    ``root`` defaults to the parent of the shallowest ``LAYOUT`` znode in the dump (else
    /ledgers); ``manager`` defaults to what that ``LAYOUT`` says.
    """

    def __init__(self, dump_path: str | Path, root: str | None = None, manager: LedgerManager | None = None):
        self.dump_path = Path(dump_path)
        self._nodes = {n.path: n for n in _read_dump(self.dump_path)}
        self._children: dict[str, list[str]] = {}
        for path in self._nodes:
            parent, _, name = path.rpartition("/")
            if name:
                self._children.setdefault(parent or "/", []).append(name)
        self.root = check_root(root) if root is not None else self._guess_root()
        self.manager = resolve_manager(self._nodes.get(f"{self.root}/{LAYOUT_NODE}"), manager, self.root)

    def _guess_root(self) -> str:
        roots = [
            path.rpartition("/")[0]
            for path in self._nodes
            if path.endswith("/" + LAYOUT_NODE) and not path.endswith(f"/{_UNDERREPLICATION}/{LAYOUT_NODE}")
        ]
        roots = [r for r in roots if r]
        return min(roots, key=lambda r: (r.count("/"), r)) if roots else DEFAULT_ROOT

    def node(self, path: str) -> ZNode | None:
        return self._nodes.get(path)

    def children(self, path: str) -> list[str]:
        return list(self._children.get(path, ()))

    def close(self) -> None:
        self._nodes.clear()
        self._children.clear()


def _read_dump(path: Path) -> Iterator[ZNode]:
    try:
        with path.open("rb") as f:
            entries = json.load(f)
    except OSError as exc:
        raise DumpFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise DumpFormatError(f"{path}: not JSON: {exc}") from None
    except RecursionError:
        raise DumpFormatError(f"{path}: not a dump: JSON nested deeper than Python's recursion limit") from None
    if not isinstance(entries, list):
        raise DumpFormatError(f"{path}: expected a JSON list of znodes, found {type(entries).__name__}")
    for i, entry in enumerate(entries):
        yield _znode(entry, f"{path}: entry {i}")


def _znode(entry: object, where: str) -> ZNode:
    if not isinstance(entry, dict):
        raise DumpFormatError(f"{where}: expected an object, found {type(entry).__name__}")
    path = entry.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise DumpFormatError(f"{where}: 'path' must be an absolute znode path, found {path!r}")
    encoded = entry.get("data_b64")
    if encoded is not None and not isinstance(encoded, str):
        raise DumpFormatError(f"{where} ({path}): 'data_b64' must be a string or null")
    try:
        data = None if encoded is None else base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise DumpFormatError(f"{where} ({path}): 'data_b64' is not base64: {exc}") from None
    numbers = {}
    for key in ("mzxid", "version", "ctime"):
        value = entry.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise DumpFormatError(f"{where} ({path}): {key!r} must be an integer, found {value!r}")
        numbers[key] = value
    return ZNode(
        path=path,
        data=data,
        ephemeral=bool(entry.get("ephemeral", False)),
        mzxid=numbers["mzxid"] or 0,
        version=numbers["version"] or 0,
        ctime=numbers["ctime"],
    )


def write_dump(store: MetadataStore, out: TextIO, root: str | None = None) -> int:
    """Write every znode from ``root`` (default: the store's root) down, as a dump; returns the count.

    Nodes are written as they are read, so the dump never sits in memory as a whole.
    Nodes that disappear during the walk are left out.
    """
    count = 0
    out.write("[")
    for node in _subtree(store, root or store.root):
        out.write(",\n" if count else "\n")
        out.write(json.dumps(_dump_entry(node)))
        count += 1
    out.write("\n]\n" if count else "]\n")
    return count


def _subtree(store: MetadataStore, path: str) -> Iterator[ZNode]:
    found = store.node(path)
    if found is None:
        return
    yield found
    prefix = "" if path == "/" else path
    for name in sorted(store.children(path)):
        yield from _subtree(store, f"{prefix}/{name}")


def _dump_entry(node: ZNode) -> dict:
    return {
        "path": node.path,
        "data_b64": None if node.data is None else base64.b64encode(node.data).decode("ascii"),
        "ephemeral": node.ephemeral,
        "mzxid": node.mzxid,
        "version": node.version,
        "ctime": node.ctime,
    }
