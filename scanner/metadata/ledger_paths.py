"""Where ledger znodes live under the ledgers root, for each ledger manager, and how to walk them.

Hierarchical (the usual one) splits ``%010d`` of the id 2-4-4 for ids below 2^31-1 and
``%019d`` 3-4-4-4-4 from 2^31-1 on; the two trees live side by side under the root.
LongHierarchical always uses 3-4-4-4-4, LegacyHierarchical always 2-4-4, Flat puts
``L%010d`` directly under the root. The ``LAYOUT`` znode says which manager a cluster uses.
"""

from __future__ import annotations

import enum
import logging
import operator
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from scanner.metadata.ledger import MAX_LEDGER_ID
from scanner.native.switch import native_code

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1  # Java's Integer.MAX_VALUE: the hierarchical manager's switch to the long form
LAYOUT_NODE = "LAYOUT"
LAYOUT_FORMAT_VERSIONS = (1, 2)
_SPECIAL_ZNODES = frozenset(
    {"available", "cookies", "LAYOUT", "INSTANCEID", "underreplication", "idgen", "idgen-long"}
)
_ID_GENERATOR_PREFIX = "ID-"


class LedgerManager(enum.Enum):
    """The ledger managers that store metadata in ZooKeeper, by their metadata-URI names."""

    FLAT = "flat"
    HIERARCHICAL = "hierarchical"
    LONG_HIERARCHICAL = "longhierarchical"
    LEGACY_HIERARCHICAL = "legacyhierarchical"

    @property
    def factory_class(self) -> str:
        """The factory class name BookKeeper writes into ``LAYOUT`` for this manager."""
        return f"org.apache.bookkeeper.meta.{_FACTORY_STEMS[self]}LedgerManagerFactory"


_FACTORY_STEMS = {
    LedgerManager.FLAT: "Flat",
    LedgerManager.HIERARCHICAL: "Hierarchical",
    LedgerManager.LONG_HIERARCHICAL: "LongHierarchical",
    LedgerManager.LEGACY_HIERARCHICAL: "LegacyHierarchical",
}
_BY_FACTORY_CLASS_NAME = {f"{stem}LedgerManagerFactory": m for m, stem in _FACTORY_STEMS.items()}


class LayoutError(ValueError):
    """A ``LAYOUT`` znode that is malformed or names a manager the scanner cannot read."""


@dataclass(frozen=True, slots=True)
class LedgerLayout:
    format_version: int
    manager: LedgerManager
    factory_class: str  # as written: a class name (format 2) or a manager type name (format 1)
    manager_version: int


def parse_layout(data: bytes, source: str = LAYOUT_NODE) -> LedgerLayout:
    """Decode a ``LAYOUT`` znode: ``<format>\\n<factory class or type>:<manager version>``."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LayoutError(f"{source}: not UTF-8 at offset {exc.start}") from None
    lines = text.split("\n")
    if not re.fullmatch(r"[0-9]{1,9}", lines[0]):
        raise LayoutError(f"{source}: first line {lines[0]!r} is not a layout format version")
    format_version = int(lines[0])
    if format_version not in LAYOUT_FORMAT_VERSIONS:
        raise LayoutError(f"{source}: layout format {format_version}, expected one of {LAYOUT_FORMAT_VERSIONS}")
    if len(lines) < 2:
        raise LayoutError(f"{source}: no '<ledger manager>:<version>' line after the format version")
    name, sep, version = lines[1].rpartition(":")
    if not sep or not name or not re.fullmatch(r"[0-9]{1,9}", version):
        raise LayoutError(f"{source}: second line {lines[1]!r}, expected '<ledger manager>:<version>'")
    return LedgerLayout(format_version, _manager_named(name, format_version, source), name, int(version))


def _manager_named(name: str, format_version: int, source: str) -> LedgerManager:
    if format_version == 1:
        # Format 1 names the type; only these two existed then.
        if name in ("flat", "hierarchical"):
            return LedgerManager(name)
        raise LayoutError(f"{source}: layout format 1 names {name!r}, expected 'flat' or 'hierarchical'")
    # Compare the simple class name so shaded copies (some.prefix.org.apache...) are recognised.
    manager = _BY_FACTORY_CLASS_NAME.get(name.rsplit(".", 1)[-1])
    if manager is None:
        raise LayoutError(
            f"{source}: ledger manager factory {name!r} is not one the scanner reads "
            f"({', '.join(m.factory_class for m in LedgerManager)})"
        )
    return manager


def layout_bytes(manager: LedgerManager) -> bytes:
    """``LAYOUT`` contents as BookKeeper writes them for ``manager`` (format 2, version 1)."""
    return f"2\n{manager.factory_class}:1".encode()


def is_special_znode(name: str) -> bool:
    """True for children of the root that are never ledgers (registration, cookies, id generators...)."""
    return name in _SPECIAL_ZNODES or name.startswith(_ID_GENERATOR_PREFIX)


def _check_id(ledger_id: int) -> None:
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise ValueError(f"ledger id {ledger_id} outside 0..2^63-1")


def _short_path(ledger_id: int) -> str:
    s = f"{ledger_id:010d}"
    return f"/{s[0:2]}/{s[2:6]}/L{s[6:10]}"


def _long_path(ledger_id: int) -> str:
    s = f"{ledger_id:019d}"
    return f"/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def ledger_path(manager: LedgerManager, root: str, ledger_id: int) -> str:
    """The znode path of ``ledger_id`` under ``root``.

    Raises ValueError for ids the manager cannot hold (negative, or >= 2^31-1 for legacy).
    """
    _check_id(ledger_id)
    if manager is LedgerManager.FLAT:
        return f"{root}/L{ledger_id:010d}"
    if manager is LedgerManager.LONG_HIERARCHICAL:
        return root + _long_path(ledger_id)
    if manager is LedgerManager.LEGACY_HIERARCHICAL:
        if ledger_id >= INT_MAX:
            raise ValueError(f"ledger id {ledger_id} is too large for the legacy hierarchical manager (< 2^31-1)")
        return root + _short_path(ledger_id)
    return root + (_short_path(ledger_id) if ledger_id < INT_MAX else _long_path(ledger_id))


def ledger_paths(manager: LedgerManager, root: str, ledger_ids: Sequence[int]) -> list[str | None]:
    """The znode path of each of ``ledger_ids`` as :func:`ledger_path` gives it; None for an id the manager cannot
    hold. A batch of ids in the hierarchical managers' short range (most clusters' every id) is named in one step, by
    the native code when it runs (:mod:`scanner.native.switch`; :func:`_short_path` is the reference) and the root is
    ASCII."""
    if (ledger_ids and manager in (LedgerManager.HIERARCHICAL, LedgerManager.LEGACY_HIERARCHICAL)
            and 0 <= min(ledger_ids) and max(ledger_ids) < INT_MAX):
        native = native_code()
        if native is not None and root.isascii() and type(ledger_ids) is list:
            return native.short_ledger_paths(root, ledger_ids)
        return [root + path for path in map(_short_path, ledger_ids)]
    paths = []
    for ledger_id in ledger_ids:
        try:
            paths.append(ledger_path(manager, root, ledger_id))
        except ValueError:
            paths.append(None)
    return paths


@dataclass(frozen=True, slots=True)
class _Tree:
    """Name patterns of the intermediate levels and of the leaves of one path scheme; ``leaves``: of several leaf
    names joined by "/" (which no name holds)."""

    levels: tuple[re.Pattern[str], ...]
    leaf: re.Pattern[str]
    leaves: re.Pattern[str]


def _tree(levels: tuple[str, ...], leaf: str) -> _Tree:
    return _Tree(tuple(map(re.compile, levels)), re.compile(leaf), re.compile(f"{leaf}(?:/{leaf})*"))


_LEAF = r"L[0-9]{4}"
_LEGACY_TREE = _tree((r"[0-9]{2}", r"[0-9]{4}"), _LEAF)
_LONG_TREE = _tree((r"[0-9]{3}",) + (r"[0-9]{4}",) * 3, _LEAF)
# Flat ids come from a ZooKeeper sequence (< 2^31-1, 10 digits); longer ones still parse.
_FLAT_TREE = _tree((), r"L[0-9]{10,19}")
_DIGITS = operator.itemgetter(slice(1, None))  # a leaf's digits, after its "L"

_TREES = {
    LedgerManager.FLAT: (_FLAT_TREE,),
    LedgerManager.HIERARCHICAL: (_LEGACY_TREE, _LONG_TREE),
    LedgerManager.LONG_HIERARCHICAL: (_LONG_TREE,),
    LedgerManager.LEGACY_HIERARCHICAL: (_LEGACY_TREE,),
}


def ledger_id_from_path(manager: LedgerManager, root: str, path: str) -> int | None:
    """The ledger id a znode path names under ``manager``, or None if it is not a ledger path."""
    prefix = root + "/"
    if not path.startswith(prefix):
        return None
    names = path[len(prefix) :].split("/")
    for tree in _TREES[manager]:
        if _matches(tree, names):
            return _id_of(names)
    return None


def _matches(tree: _Tree, names: Sequence[str]) -> bool:
    if len(names) != len(tree.levels) + 1 or is_special_znode(names[0]):
        return False
    patterns = (*tree.levels, tree.leaf)
    return all(p.fullmatch(n) for p, n in zip(patterns, names))


def _id_of(names: Sequence[str]) -> int | None:
    # Levels and leaf (without its "L") concatenated, read as decimal.
    ledger_id = int("".join(names[:-1]) + names[-1][1:])
    return ledger_id if ledger_id <= MAX_LEDGER_ID else None


def walk_ledger_ids(
    manager: LedgerManager, root: str, children: Callable[[str], Sequence[str]]
) -> Iterator[int]:
    """Every ledger id under ``root``, found by listing one level at a time.

    ``children(path)`` lists a znode's child names (empty when the node is gone). Only the
    listings on the current branch are held, never the set of ids. Ids come out ascending
    within each tree; for the hierarchical manager the 2-4-4 tree comes before the long one.
    Leaves that do not parse are skipped, as BookKeeper does.
    """
    for tree in _TREES[manager]:
        for parent in _parents(tree, root, 0, children):
            yield from _leaf_ids(tree, root, parent, children(parent))


def _leaf_ids(tree: _Tree, root: str, parent: str, names: Sequence[str]) -> list[int]:
    """The ids of the ledger leaves among ``names``, the children of ``parent`` (a level of up to 10^4 at once),
    ascending: each id is the levels' names and the leaf's digits."""
    at_root = parent == root  # flat: the leaves sit beside the root's special znodes
    prefix = parent[len(root):].replace("/", "")
    if names and len(set(map(len, names))) == 1 and tree.leaves.fullmatch("/".join(names)):
        # Every name a leaf, all of one width (a parent's 10^4 ledgers, most often): sorted by name is ascending, each
        # id the prefix's value shifted by the leaf's digits plus theirs, in C-speed steps
        base = int(prefix or "0") * 10 ** (len(names[0]) - 1)
        ids = list(map(base.__add__, map(int, map(_DIGITS, sorted(names)))))
    else:
        leaves = []
        for name in names:
            if tree.leaf.fullmatch(name):
                leaves.append(name)
            elif not at_root:
                log.debug("skipping %s/%s: not a ledger znode of this manager", parent, name)
        # Shorter names first, so ids of different widths (flat) still come out ascending: sorted by name, then
        # (stably) by length.
        leaves.sort()
        leaves.sort(key=len)
        ids = [int(prefix + name[1:]) for name in leaves]
    return ids if not ids or max(ids) <= MAX_LEDGER_ID else [i for i in ids if i <= MAX_LEDGER_ID]


def leaf_parents(manager: LedgerManager, root: str, children: Callable[[str], Sequence[str]]) -> Iterator[str]:
    """The znodes whose children are ledger leaves (the hierarchical managers' last level; flat: the root).

    Lists the intermediate levels only, never the leaves: a cluster's ledgers can then be read
    parent by parent, in parallel, by whoever lists and reads each parent's leaves.
    """
    for tree in _TREES[manager]:
        yield from _parents(tree, root, 0, children)


def _parents(tree: _Tree, path: str, depth: int, children: Callable[[str], Sequence[str]]) -> Iterator[str]:
    if depth == len(tree.levels):
        yield path
        return
    for name in sorted(children(path), key=lambda n: (len(n), n)):
        if depth == 0 and is_special_znode(name):
            continue
        if tree.levels[depth].fullmatch(name):
            yield from _parents(tree, f"{path}/{name}", depth + 1, children)
