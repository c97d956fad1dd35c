"""Connections to the bookies of a repair, opened on first use and reused, a few per bookie.

The v2 protocol answers one request at a time per connection, so ``per_bookie`` connections let
that many requests to one bookie be in flight. A bookie that cannot be connected to is not tried
again by this pool (each try could cost a whole timeout); a connection that breaks is dropped and
its request raises ``BookieUnreachable``.

Where a bookie is comes from ``resolver`` (a ``BookieRegistry``: the ``bookie-rpc`` endpoint of its
registration, as BookKeeper's clients find it). When a connection to the address it gave fails, the
registration is read again and, if the bookie is now elsewhere (a pod rescheduled to another host), the
new address is tried once. Without a resolver an id is read as ``host:port``, as a BookKeeper client
with ``bookieAddressResolverEnabled=false`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from scanner.bookie_protocol.wire import BookieConnection, BookieUnreachable
from scanner.metadata.bookie_registry import BookieNotResolved, legacy_address
from scanner.metadata.store import MetadataUnavailable

T = TypeVar("T")


class AddressResolver(Protocol):
    def address(self, bookie_id: str) -> tuple[str, int]: ...

    def forget(self, bookie_id: str) -> None: ...


class BookiePool:
    def __init__(self, timeout: float = 10.0, per_bookie: int = 1, *, resolver: AddressResolver | None = None):
        if per_bookie < 1:
            raise ValueError(f"per_bookie must be at least 1, got {per_bookie}")
        self.timeout = timeout
        self.per_bookie = per_bookie
        self.resolver = resolver
        self._idle: dict[str, asyncio.Queue[BookieConnection | None]] = {}
        self._open: dict[str, list[BookieConnection]] = {}
        self._unreachable: dict[str, str] = {}

    async def ask(self, bookie_id: str, request: Callable[[BookieConnection], Awaitable[T]]) -> T:
        """``request(connection)`` on one of the bookie's connections; BookieUnreachable if it has none."""
        if bookie_id in self._unreachable:
            raise BookieUnreachable(self._unreachable[bookie_id])
        idle = self._idle.get(bookie_id)
        if idle is None:
            idle = self._idle[bookie_id] = asyncio.Queue()
            for _ in range(self.per_bookie):
                idle.put_nowait(None)  # a place for a connection not opened yet
        connection = await idle.get()
        try:
            if connection is None:
                connection = await self._connect(bookie_id)
            result = await request(connection)
        except BookieUnreachable:
            if connection is not None:
                self._open[bookie_id].remove(connection)
                await connection.close()
            idle.put_nowait(None)
            raise
        except BaseException:
            idle.put_nowait(connection)
            raise
        idle.put_nowait(connection)
        return result

    async def _connect(self, bookie_id: str) -> BookieConnection:
        try:
            connection = await self._open_resolved(bookie_id)
        except BookieUnreachable as exc:
            self._unreachable[bookie_id] = str(exc)
            raise
        self._open.setdefault(bookie_id, []).append(connection)
        return connection

    async def _open_resolved(self, bookie_id: str) -> BookieConnection:
        address = await self._address(bookie_id)
        try:
            return await BookieConnection.open(bookie_id, address, self.timeout)
        except BookieUnreachable:
            if self.resolver is None:
                raise
            self.resolver.forget(bookie_id)
            moved = await self._address(bookie_id)
            if moved == address:
                raise
        return await BookieConnection.open(bookie_id, moved, self.timeout)

    async def _address(self, bookie_id: str) -> tuple[str, int]:
        try:
            if self.resolver is None:
                return legacy_address(bookie_id)
            # the registry reads ZooKeeper (blocking): off the event loop, so other requests go on meanwhile
            return await asyncio.to_thread(self.resolver.address, bookie_id)
        except BookieNotResolved as exc:
            raise BookieUnreachable(str(exc)) from None
        except MetadataUnavailable as exc:
            raise BookieUnreachable(f"cannot read the registration of bookie {bookie_id}: {exc}") from None

    async def close(self) -> None:
        connections = [c for cs in self._open.values() for c in cs]
        self._open.clear()
        self._idle.clear()
        for connection in connections:
            await connection.close()

    async def __aenter__(self) -> "BookiePool":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()
