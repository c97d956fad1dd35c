"""Where a bookie is and how it must be spoken to, read from its registration as BookKeeper's clients read it.

A bookie registers under ``<root>/available/<id>`` (``<root>/available/readonly/<id>`` while read-only).
Since BookKeeper 4.12 the znode holds a ``BookieServiceInfoFormat`` (binary protobuf): endpoints, each
with an id, host, port, protocol, the authentication methods it takes and its extensions, and free
properties. The bookie itself publishes one endpoint, protocol ``bookie-rpc``, with the extension
``tls`` when it has a TLS provider (``BookieService.publishInfo``). A client reaches the bookie at the
host and port of its ``bookie-rpc`` endpoint (``DefaultBookieAddressResolver``); only a registration
with no data, as older bookies write it, is read as the id itself being ``host:port``
(``ZKRegistrationClient.deserializeBookieServiceInfo``, ``BookieServiceInfoUtils.buildLegacyBookieServiceInfo``).
So an id of any form (``bookieId=bookie-0.bookie.ns.svc``, BookKeeper 4.13+) is reached, and a bookie
that moved to another host is found there.

A bookie registered neither as writable nor as read-only is not running: it cannot be resolved, as in
BookKeeper. Registrations are kept for ``ttl`` seconds; ``forget`` drops one at once (after a connection to
its address failed, say), so the next lookup reads it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from scanner.metadata.store import AVAILABLE_NODE, READONLY_NODE, MetadataStore

BOOKIE_RPC = "bookie-rpc"  # the protocol of the endpoint that serves BookKeeper's bookie protocol
TLS_EXTENSION = "tls"
DEFAULT_TTL_SECONDS = 30.0


class BookieNotResolved(Exception):
    """No address for a bookie: not registered (not running), or a registration that gives none; one line."""


class BookieNotRegistered(BookieNotResolved):
    """The bookie is registered neither as writable nor as read-only: it is not running."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: str
    host: str
    port: int
    protocol: str
    auth: tuple[str, ...] = ()
    extensions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Registration:
    """A bookie's registration as found: ``legacy`` when the znode had no data and the id was read as host:port."""

    bookie_id: str
    readonly: bool
    endpoints: tuple[Endpoint, ...]
    properties: dict[str, str] = field(default_factory=dict, compare=False)
    legacy: bool = False

    def rpc_endpoint(self) -> Endpoint:
        """The ``bookie-rpc`` endpoint (the first, as BookKeeper takes any); BookieNotResolved when there is none."""
        found = next((e for e in self.endpoints if e.protocol == BOOKIE_RPC), None)
        if found is None:
            published = ", ".join(sorted({e.protocol for e in self.endpoints})) or "none"
            raise BookieNotResolved(f"bookie {self.bookie_id} publishes no {BOOKIE_RPC} endpoint "
                                    f"(protocols: {published})")
        return found

    @property
    def address(self) -> tuple[str, int]:
        endpoint = self.rpc_endpoint()
        return endpoint.host, endpoint.port


def legacy_address(bookie_id: str) -> tuple[str, int]:
    """Host and port of an id of the ``host:port`` form (``[v6]:port`` too); BookieNotResolved otherwise."""
    host, sep, port = bookie_id.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BookieNotResolved(f"bookie id {bookie_id!r} is not HOST:PORT and its registration gives no address")
    return host.strip("[]"), int(port)


def decode_registration(bookie_id: str, data: bytes | None, *, readonly: bool = False) -> Registration:
    """The registration of ``bookie_id`` from its znode's bytes; BookieNotResolved for bytes that do not decode."""
    if not data:
        host, port = legacy_address(bookie_id)
        return Registration(bookie_id, readonly, (Endpoint(bookie_id, host, port, BOOKIE_RPC),), legacy=True)
    from google.protobuf.message import DecodeError

    from scanner.metadata.proto.data_formats_pb2 import BookieServiceInfoFormat

    info = BookieServiceInfoFormat()
    try:
        info.ParseFromString(data)
    except DecodeError as exc:
        raise BookieNotResolved(f"bookie {bookie_id}: its registration ({len(data)} bytes) is not a "
                                f"BookieServiceInfoFormat: {exc}") from None
    if not info.IsInitialized():  # the parse above does not check required fields of nested messages
        raise BookieNotResolved(f"bookie {bookie_id}: its registration ({len(data)} bytes) is not a "
                                f"BookieServiceInfoFormat: missing {', '.join(info.FindInitializationErrors())}")
    endpoints = tuple(Endpoint(e.id, e.host, e.port, e.protocol, tuple(e.auth), tuple(e.extensions))
                      for e in info.endpoints)
    return Registration(bookie_id, readonly, endpoints, dict(info.properties))


def registration_path(root: str, bookie_id: str, *, readonly: bool = False) -> str:
    return f"{root}/{AVAILABLE_NODE}/{READONLY_NODE}/{bookie_id}" if readonly else f"{root}/{AVAILABLE_NODE}/{bookie_id}"


class BookieRegistry:
    """Registrations read from ``store`` (writable first, then read-only, as BookKeeper does), kept ``ttl`` seconds."""

    def __init__(self, store: MetadataStore, *, ttl: float = DEFAULT_TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.ttl = ttl
        self.clock = clock
        self._known: dict[str, tuple[float, Registration]] = {}

    def registration(self, bookie_id: str) -> Registration:
        """The bookie's registration; BookieNotResolved when it is not registered or its bytes do not decode."""
        kept = self._known.get(bookie_id)
        if kept is not None and self.clock() - kept[0] < self.ttl:
            return kept[1]
        found = self._read(bookie_id)
        self._known[bookie_id] = (self.clock(), found)
        return found

    def address(self, bookie_id: str) -> tuple[str, int]:
        """Host and port of the bookie's ``bookie-rpc`` endpoint; BookieNotResolved when there is none."""
        return self.registration(bookie_id).address

    def forget(self, bookie_id: str) -> None:
        """Read the bookie's registration again at its next lookup."""
        self._known.pop(bookie_id, None)

    def _read(self, bookie_id: str) -> Registration:
        if not bookie_id or "/" in bookie_id or bookie_id in (".", "..", READONLY_NODE):
            raise BookieNotResolved(f"{bookie_id!r} cannot be a bookie id")
        for readonly in (False, True):
            node = self.store.node(registration_path(self.store.root, bookie_id, readonly=readonly))
            if node is not None:
                return decode_registration(bookie_id, node.data, readonly=readonly)
        raise BookieNotRegistered(f"bookie {bookie_id} is not registered (neither available nor read-only): "
                                "it is not running")
