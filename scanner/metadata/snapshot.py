"""A metadata store over a ZooKeeper dump file, so a scan needs no cluster; and the dump writer.

The dump is a JSON list of znodes ``{"path", "data_b64", "ephemeral", "mzxid", "version"}``
(``data_b64`` null = no data), optionally with ``"ctime"`` (ms since epoch), which
``write_dump`` always records so that ledgers without a stored ctime keep the znode's.
"""

from __future__ import annotations

import base64
import json
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from scanner.metadata.json_list import NotAList, NotJson, json_list_batches
from scanner.metadata.ledger_paths import LAYOUT_NODE, LedgerManager
from scanner.metadata.store import MetadataStore, ZNode, check_root, resolve_manager
from scanner.metadata.znode_table import RecordRun, ZNodeTable, pack_records
from scanner.native.switch import native_code

DEFAULT_ROOT = "/ledgers"
_UNDERREPLICATION = "underreplication"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1  # ZooKeeper's zxids, versions and times are Java longs


class DumpFormatError(ValueError):
    """A dump file that is not a list of znodes in the expected shape."""


class SnapshotStore(MetadataStore):
    """Ledger metadata read from a dump file.

    The dump is decoded once, a read at a time, into a table of the store's own (see ZNodeTable: a scratch file
    with no name, about two thirds of the dump's size, and 28 bytes of memory per znode), so memory grows little with
    the number of znodes and the dump file may change or go afterwards.
    ``root`` defaults to the parent of the shallowest ``LAYOUT`` znode in the dump (else
    /ledgers); ``manager`` defaults to what that ``LAYOUT`` says.
    """

    def __init__(self, dump_path: str | Path, root: str | None = None, manager: LedgerManager | None = None):
        self.dump_path = Path(dump_path)
        layouts: list[str] = []
        self._table = ZNodeTable(_noting_layouts(_read_dump(self.dump_path), layouts))
        try:
            self.root = check_root(root) if root is not None else _guess_root(layouts)
            self.manager = resolve_manager(self.node(f"{self.root}/{LAYOUT_NODE}"), manager, self.root)
        except BaseException:
            self._table.close()
            raise

    def node(self, path: str) -> ZNode | None:
        return self._table.node(path)

    def nodes(self, paths: list[str]) -> list[ZNode | None]:
        return self._table.nodes(paths)

    def children(self, path: str) -> list[str]:
        return self._table.children(path)

    def ledger_data(self, ledger_ids: list[int]) -> list[bytes | None]:
        """The znode bytes of each of ``ledger_ids`` as :meth:`ledger_nodes` reads them, with no znode object: None
        where there is no znode, or one without data (a pass's index step decodes these lean, a batch at a time)."""
        paths = self.ledger_paths(ledger_ids)
        if None not in paths:  # every id one the manager can hold (the common case)
            return self._table.data_of(paths)
        found = iter(self._table.data_of([path for path in paths if path is not None]))
        return [None if path is None else next(found) for path in paths]

    def close(self) -> None:
        self._table.close()


def _noting_layouts(runs: Iterator[RecordRun], layouts: list[str]) -> Iterator[RecordRun]:
    suffix = "/" + LAYOUT_NODE
    for run in runs:
        if ("\n".join(run[1]) + "\n").find(suffix + "\n") >= 0:  # (a run of a million with none: told in C-speed steps)
            layouts.extend(path for path in run[1] if path.endswith(suffix))
        yield run


def _guess_root(layout_paths: list[str]) -> str:
    roots = [
        path.rpartition("/")[0]
        for path in layout_paths
        if not path.endswith(f"/{_UNDERREPLICATION}/{LAYOUT_NODE}")
    ]
    roots = [r for r in roots if r]
    return min(roots, key=lambda r: (r.count("/"), r)) if roots else DEFAULT_ROOT


def _read_dump(path: Path) -> Iterator[RecordRun]:
    """The dump's znodes as runs of the table's records: those of the common form packed natively where the scan's
    native code runs (whole lines in the form `metadata dump` writes straight from their text, with no JSON objects
    made), each other item checked (and its error worded) by :func:`_znode`, the Python reference."""
    native = native_code()
    pack = None if native is None else native.pack_znodes
    try:
        with path.open(encoding="utf-8-sig") as f:
            dump, i = str(path), 0
            for items in json_list_batches(f, None if native is None else native.pack_dump_lines):
                if type(items) is tuple:  # whole lines of the form `metadata dump` writes, packed from their text
                    records, paths, raw_lengths = items
                    lengths = array("I")
                    lengths.frombytes(raw_lengths)
                    yield records, paths, lengths
                    i += len(paths)
                    continue
                done = 0
                while done < len(items):
                    if pack is not None:
                        records, paths, raw_lengths, taken = pack(items, done)
                        if taken:
                            lengths = array("I")
                            lengths.frombytes(raw_lengths)
                            yield records, paths, lengths
                            done += taken
                            continue
                    yield pack_records([_znode(items[done], dump, i + done)])
                    done += 1
                i += len(items)
    except OSError as exc:
        raise DumpFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (NotJson, UnicodeDecodeError) as exc:
        raise DumpFormatError(f"{path}: not JSON: {exc}") from None
    except NotAList as exc:
        raise DumpFormatError(f"{path}: expected a JSON list of znodes, found {exc.found}") from None
    except RecursionError:
        raise DumpFormatError(f"{path}: not a dump: JSON nested deeper than Python's recursion limit") from None


def _znode(entry: object, dump: str, i: int) -> ZNode:
    if not isinstance(entry, dict):
        raise DumpFormatError(f"{dump}: entry {i}: expected an object, found {type(entry).__name__}")
    path = entry.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise DumpFormatError(f"{dump}: entry {i}: 'path' must be an absolute znode path, found {path!r}")
    encoded = entry.get("data_b64")
    if encoded is not None and not isinstance(encoded, str):
        raise DumpFormatError(f"{dump}: entry {i} ({path}): 'data_b64' must be a string or null")
    try:
        data = None if encoded is None else base64.b64decode(encoded, validate=True)
    except ValueError as exc:  # binascii.Error, or a character outside ASCII
        raise DumpFormatError(f"{dump}: entry {i} ({path}): 'data_b64' is not base64: {exc}") from None
    mzxid, version, ctime = entry.get("mzxid"), entry.get("version"), entry.get("ctime")
    for key, value in (("mzxid", mzxid), ("version", version), ("ctime", ctime)):
        if value is not None and not (type(value) is int and _INT64_MIN <= value <= _INT64_MAX):  # not a bool either
            raise DumpFormatError(f"{dump}: entry {i} ({path}): {key!r} must be an integer (64-bit), found {value!r}")
    return ZNode(path, data, bool(entry.get("ephemeral", False)), mzxid or 0, version or 0, ctime)


def write_dump(store: MetadataStore, out: TextIO, root: str | None = None) -> int:
    """Write every znode from ``root`` (default: the store's root) down, as a dump; returns the count.

    Nodes are written as they are read, so the dump never sits in memory as a whole.
    Nodes that disappear during the walk are left out.
    """
    return write_dump_nodes(_subtree(store, root or store.root), out)


def write_dump_nodes(nodes: Iterable[ZNode], out: TextIO) -> int:
    """Write ``nodes`` as a dump, one znode per line, as they come; returns the count."""
    count = 0
    out.write("[")
    for node in nodes:
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
