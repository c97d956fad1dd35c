"""What a metadata store offers (ZooKeeper itself or a dump of it), built on two primitives.

A store only has to read one znode (``node``) and list a znode's children (``children``);
ledger lookup, lazy ledger enumeration and the bookie registry follow from those.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass, field

from scanner.metadata.ledger import LedgerMetadata, MetadataFormatError, parse_ledger_metadata
from scanner.metadata.ledger_paths import (
    LAYOUT_NODE,
    LedgerManager,
    LayoutError,
    ledger_path,
    ledger_paths,
    parse_layout,
    walk_ledger_ids,
)

AVAILABLE_NODE = "available"
READONLY_NODE = "readonly"


class MetadataUnavailable(Exception):
    """The metadata cannot be read at all (unreachable, not authorized, no such root); one line."""


class MetadataMisconfigured(MetadataUnavailable):
    """The metadata service answered, and its answer shows the URI is wrong (no such ledgers root, credentials
    refused): waiting will not fix it."""


class MetadataNeverRead(MetadataUnavailable):
    """The metadata cannot be read now, and the ledger's was never read before to stand in for it (an agent's cache
    of the last copies read, during a ZooKeeper outage)."""


@dataclass(frozen=True, slots=True)
class ZNode:
    path: str
    data: bytes | None  # None: the znode has no data (as opposed to empty data)
    ephemeral: bool
    mzxid: int
    version: int
    ctime: int | None  # ms since epoch; None when a dump did not record it
    # ms since epoch of the last change (ZooKeeper's clock); None where not known (a dump does not record it).
    # When ``mzxid`` happened: not compared, ``mzxid`` already tells one change from another.
    mtime: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class LedgerRead:
    """One ledger's metadata as read now: ``meta`` None means no such ledger, unless ``error`` says why not.

    ``modified_ms``: when the metadata last changed after its creation (a close, an ensemble change), where the
    store knows it; None for metadata never changed (as a writer creates it, or as a dump was loaded).
    """

    ledger_id: int
    meta: LedgerMetadata | None
    error: MetadataFormatError | None = None
    modified_ms: int | None = None


@dataclass(frozen=True, slots=True)
class RegisteredBookies:
    writable: frozenset[str]
    readonly: frozenset[str]


class MetadataStore(abc.ABC):
    """Read access to a cluster's ledger metadata under ``root``, laid out by ``manager``."""

    root: str
    manager: LedgerManager

    @abc.abstractmethod
    def node(self, path: str) -> ZNode | None:
        """The znode at ``path``, or None if there is none."""

    @abc.abstractmethod
    def children(self, path: str) -> list[str]:
        """Names of the children of ``path``; empty if it has none or does not exist."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; the store is unusable afterwards."""

    def ledger(self, ledger_id: int) -> LedgerMetadata | None:
        """The ledger's metadata, or None if there is no such ledger (deleted or never created).

        Raises MetadataFormatError when the znode exists but its bytes do not decode.
        """
        try:
            path = ledger_path(self.manager, self.root, ledger_id)
        except ValueError:
            return None  # an id this manager cannot store cannot exist
        found = self.node(path)
        if found is None:
            return None
        return parse_ledger_metadata(ledger_id, found.data or b"", found.ctime, source=path)

    def nodes(self, paths: list[str]) -> list[ZNode | None]:
        """Several znodes at once (a store that can pipeline the reads does)."""
        return [self.node(path) for path in paths]

    def ledger_batch(self, ledger_ids: list[int]) -> list[LedgerRead]:
        """The metadata of each of ``ledger_ids``, read in one batch; undecodable bytes are an ``error``, not a raise."""
        return [self.ledger_read(ledger_id, path, node)
                for ledger_id, (path, node) in zip(ledger_ids, self.ledger_nodes(ledger_ids))]

    def ledger_nodes(self, ledger_ids: list[int]) -> list[tuple[str | None, ZNode | None]]:
        """(znode path, znode) of each of ``ledger_ids``, read in one batch, not decoded; the path is None for an id
        this manager cannot store, the znode None where there is no such ledger."""
        paths = self.ledger_paths(ledger_ids)
        found = iter(self.nodes([p for p in paths if p is not None]))
        return [(path, None if path is None else next(found)) for path in paths]

    def ledger_paths(self, ledger_ids: list[int]) -> list[str | None]:
        """The znode path of each of ``ledger_ids``; None for an id this manager cannot store (it cannot exist)."""
        return ledger_paths(self.manager, self.root, ledger_ids)

    @staticmethod
    def ledger_read(ledger_id: int, path: str | None, node: ZNode | None) -> LedgerRead:
        """One ledger's metadata decoded from its znode (as :meth:`ledger_nodes` gives it)."""
        if node is None:
            return LedgerRead(ledger_id, None)
        try:
            meta = parse_ledger_metadata(ledger_id, node.data or b"", node.ctime, source=path)
        except MetadataFormatError as exc:
            return LedgerRead(ledger_id, None, exc)
        return LedgerRead(ledger_id, meta, modified_ms=node.mtime if node.version > 0 else None)

    def ledger_ids(self) -> Iterator[int]:
        """Every ledger id, lazily, one tree level at a time (ascending within each branch)."""
        return walk_ledger_ids(self.manager, self.root, self.children)

    def bookies(self) -> RegisteredBookies:
        """The bookies registered as writable and as read-only."""
        available = f"{self.root}/{AVAILABLE_NODE}"
        return RegisteredBookies(
            writable=frozenset(c for c in self.children(available) if c != READONLY_NODE),
            readonly=frozenset(self.children(f"{available}/{READONLY_NODE}")),
        )

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def resolve_manager(layout: ZNode | None, requested: LedgerManager | None, root: str) -> LedgerManager:
    """The manager to use: what ``LAYOUT`` says, checked against the one the user asked for."""
    if layout is None:
        if requested is None:
            raise MetadataUnavailable(
                f"no {root}/{LAYOUT_NODE}: is {root} the ledgers root? "
                "(to go without it, name the manager, e.g. zk+hierarchical://...)"
            )
        return requested
    found = parse_layout(layout.data or b"", source=layout.path).manager
    if requested is not None and requested is not found:
        raise LayoutError(f"{layout.path} says {found.value}, but the metadata URI asks for {requested.value}")
    return found


def check_root(root: str) -> str:
    """``root`` if it is an absolute znode path other than "/" (no trailing slash); else ValueError."""
    if not root.startswith("/") or root == "/" or root.endswith("/") or "//" in root:
        raise ValueError(f"ledgers root {root!r} must be an absolute znode path like /ledgers")
    return root
