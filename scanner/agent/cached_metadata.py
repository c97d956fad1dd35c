"""Metadata that outlives a ZooKeeper outage: the last copy read of each ledger, used while it is down."""

from __future__ import annotations

import logging
import threading
from array import array
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from kazoo.protocol.states import KazooState

from scanner.metadata.store import LedgerRead, MetadataNeverRead, MetadataUnavailable, ZNode

log = logging.getLogger(__name__)

# A ledger's znode (its path and a few hundred bytes of data) is kept: this bounds the cache to a few MiB, whatever the
# cluster's size.
CACHED_LEDGERS = 20_000
# How often a read in flight checks that ZooKeeper is still connected.
CONNECTION_CHECK_SECONDS = 0.1
# Reads in flight at once: one per ledger dir's scanner on the usual bookie.
READERS = 4


class CachedMetadata:
    """Wraps a store: reads go to it while it answers, to the last copy read while it does not.

    A ledger never read before raises MetadataNeverRead during an outage: the caller waits, or goes on without it.
    """

    def __init__(self, store, capacity: int = CACHED_LEDGERS):
        self.store = store
        self.capacity = capacity
        self._lock = threading.Lock()
        self._ledgers: OrderedDict[int, tuple[str | None, ZNode | None]] = OrderedDict()  # ledger -> (path, znode)
        self._ledger_ids: array | None = None
        self._reachable = True
        self._readers = ThreadPoolExecutor(READERS, thread_name_prefix="metadata-read")
        if self.client is not None:
            self.client.add_listener(self._on_connection_state)

    @property
    def root(self) -> str:
        return self.store.root

    @property
    def client(self):
        """The kazoo client of a ZooKeeper store (None for a dump): repair writes through it."""
        return getattr(self.store, "client", None)

    @property
    def connected(self) -> bool:
        """Whether the store answers now; a dump always does."""
        client = self.client
        return self._reachable if client is None else bool(client.connected) and self._reachable

    def ledger(self, ledger_id: int):
        """The ledger's metadata, or None if there is no such ledger; raises MetadataFormatError when its znode does not
        decode (as a store's ``ledger`` does)."""
        read = self.ledger_batch([ledger_id])[0]
        if read.error is not None:
            raise read.error
        return read.meta

    def ledger_batch(self, ledger_ids: list[int]) -> list[LedgerRead]:
        return [self.store.ledger_read(ledger_id, path, node)
                for ledger_id, (path, node) in zip(ledger_ids, self.ledger_nodes(ledger_ids))]

    def ledger_nodes(self, ledger_ids: list[int]) -> list[tuple[str | None, ZNode | None]]:
        """(znode path, znode) of each of ``ledger_ids`` as the store reads them (a pass's index step decodes only what
        it needs of them), or as last read while the store does not answer. The cache keeps znodes, not their decoded
        metadata: a ledger is decoded again only when read from the cache."""
        if self.client is not None and not self.client.connected:
            return [self._cached(i, None) for i in ledger_ids]
        try:
            nodes = self._read(lambda: self.store.ledger_nodes(ledger_ids))
        except MetadataUnavailable as exc:
            return [self._cached(i, exc) for i in ledger_ids]
        self._note_reachable(True)
        with self._lock:
            for ledger_id, found in zip(ledger_ids, nodes):
                self._remember(ledger_id, found)
        return nodes

    def ledger_read(self, ledger_id: int, path: str | None, node: ZNode | None) -> LedgerRead:
        return self.store.ledger_read(ledger_id, path, node)

    def _remember(self, ledger_id: int, found: tuple[str | None, ZNode | None]) -> None:
        self._ledgers[ledger_id] = found
        self._ledgers.move_to_end(ledger_id)
        if len(self._ledgers) > self.capacity:
            self._ledgers.popitem(last=False)

    def _cached(self, ledger_id: int, error: MetadataUnavailable | None) -> tuple[str | None, ZNode | None]:
        self._note_reachable(False)
        with self._lock:
            if ledger_id in self._ledgers:
                return self._ledgers[ledger_id]
        why = f" ({error})" if error is not None else ""
        raise MetadataNeverRead(f"metadata unreachable{why} and ledger {ledger_id} not read before")

    def ledger_ids(self):
        if self.client is None or self.client.connected:
            try:
                ids = self._read(lambda: array("Q", self.store.ledger_ids()))  # 8 bytes a ledger
            except MetadataUnavailable:
                self._note_reachable(False)
            else:
                self._note_reachable(True)
                with self._lock:
                    self._ledger_ids = ids
                return iter(ids)
        with self._lock:
            if self._ledger_ids is None:
                raise MetadataUnavailable("metadata unreachable and the ledger list never read")
            return iter(self._ledger_ids)

    def bookies(self):
        return self.store.bookies()

    def _read(self, read):
        """``read()`` from the store, given up with MetadataUnavailable as soon as ZooKeeper disconnects.

        kazoo parks a request made while it reconnects (its own retry after a lost connection does) until
        the server is back, however long that takes; the scanner must not wait with it.
        """
        if self.client is None:
            return read()
        future = self._readers.submit(read)
        while True:
            try:
                return future.result(timeout=CONNECTION_CHECK_SECONDS)
            except FutureTimeout:
                if not self.client.connected:
                    raise MetadataUnavailable("ZooKeeper disconnected during the read") from None

    def _on_connection_state(self, state) -> None:
        # The scanner may read no metadata for days (deep in the entry logs): the reconnect itself says so.
        if state == KazooState.CONNECTED:
            self._note_reachable(True)

    def _note_reachable(self, reachable: bool) -> None:
        if reachable != self._reachable:
            self._reachable = reachable
            if reachable:
                log.warning("metadata reachable again")
            else:
                log.warning("metadata unreachable: scanning on with the ledger metadata read before")

    def close(self) -> None:
        self.store.close()  # ends any read still parked in kazoo
        self._readers.shutdown(wait=False, cancel_futures=True)
