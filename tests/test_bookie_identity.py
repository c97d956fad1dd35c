"""How a bookie is found and whether it may be spoken to: its registration, as BookKeeper's clients read it.

Registration bytes are built with the project's ``BookieServiceInfoFormat`` and, once, by hand from
BookKeeper's field numbers; resolution, its cache and its refresh run on a real ZooKeeper; the pool's
refresh reaches a listening socket through a registration that changed. The live cluster (a bookie
with a custom ``bookieId``) is in tests/live/test_bookie_identity_live.py.
"""

from __future__ import annotations

import asyncio
import struct

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import InvalidACLError
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE

from scanner.bookie_protocol.pool import BookiePool
from scanner.bookie_protocol.transport import TransportRefused, cluster_refusal, screen_move
from scanner.bookie_protocol.wire import BookieUnreachable, ReturnCode
from scanner.metadata.bookie_registry import (
    BOOKIE_RPC,
    BookieNotRegistered,
    BookieNotResolved,
    BookieRegistry,
    Endpoint,
    decode_registration,
    registration_path,
)
from scanner.metadata.ledger import LedgerMetadata, LedgerState, move_refusal, parse_ledger_metadata, \
    serialize_ledger_metadata
from scanner.metadata.proto.data_formats_pb2 import BookieServiceInfoFormat
from scanner.metadata.zookeeper import ZooKeeperStore
from scanner.repair.ledger_lock import LedgerLock
from scanner.repair.zk_acls import zk_acls
from scanner.storage.entry import DigestType

CUSTOM = "bookie-0.bookie.ns.svc"


def registration_bytes(host: str, port: int, *, protocol: str = BOOKIE_RPC, auth=(), extensions=(),
                       properties=None) -> bytes:
    """What a bookie writes under available/<id>: one endpoint, as ``BookieService.publishInfo`` publishes it."""
    info = BookieServiceInfoFormat()
    info.endpoints.add(id="bookie", host=host, port=port, protocol=protocol, auth=list(auth),
                       extensions=list(extensions))
    info.properties.update(properties or {})
    return info.SerializeToString()


def _field(number: int, payload: bytes) -> bytes:
    return bytes([number << 3 | 2, len(payload)]) + payload


# -- decoding a registration ----------------------------------------------------------------------------


def test_a_registration_gives_the_bookie_rpc_endpoint_whatever_the_id():
    data = registration_bytes("10.1.2.3", 3181, properties={"rack": "/r1"})
    found = decode_registration(CUSTOM, data)
    assert found.address == ("10.1.2.3", 3181) and not found.legacy and not found.readonly
    assert found.rpc_endpoint() == Endpoint("bookie", "10.1.2.3", 3181, BOOKIE_RPC)
    assert found.properties == {"rack": "/r1"}
    # An id of host:port form is not read as an address when the registration gives one: the host may have changed.
    assert decode_registration("10.9.9.9:3181", data).address == ("10.1.2.3", 3181)


def test_bookkeepers_field_numbers_decode():
    """Endpoints are field 6 and properties field 7 of BookieServiceInfoFormat (DataFormats.proto), not 1 and 2."""
    endpoint = (_field(1, b"bookie") + bytes([2 << 3]) + b"\x9d\x18"  # port 3101 as a varint
                + _field(3, b"bk-host") + _field(4, b"bookie-rpc") + _field(6, b"tls"))
    entry = _field(1, b"k") + _field(2, b"v")
    found = decode_registration(CUSTOM, _field(6, endpoint) + _field(7, entry))
    assert found.rpc_endpoint() == Endpoint("bookie", "bk-host", 3101, BOOKIE_RPC, (), ("tls",))
    assert found.properties == {"k": "v"}


def test_a_registration_without_data_is_the_id_read_as_host_port():
    assert decode_registration("10.0.0.7:3181", b"").address == ("10.0.0.7", 3181)
    assert decode_registration("[::1]:3181", None).address == ("::1", 3181)
    assert decode_registration("10.0.0.7:3181", b"").legacy
    for bad in (CUSTOM, "host:", "host:99999", ":3181"):
        with pytest.raises(BookieNotResolved, match="not HOST:PORT"):
            decode_registration(bad, b"")


def test_bytes_that_are_no_registration_are_an_error_not_a_crash():
    with pytest.raises(BookieNotResolved, match="not a BookieServiceInfoFormat"):
        decode_registration(CUSTOM, b"\xff\xff\xff")
    with pytest.raises(BookieNotResolved, match="not a BookieServiceInfoFormat"):
        decode_registration(CUSTOM, _field(6, _field(3, b"host-only")))  # required fields missing


def test_a_registration_without_bookie_rpc_has_no_address():
    found = decode_registration(CUSTOM, registration_bytes("h", 8080, protocol="http"))
    with pytest.raises(BookieNotResolved, match="publishes no bookie-rpc endpoint .protocols: http"):
        found.address


# -- what is refused ---------------------------------------------------------------------------------------


def test_auth_provider_settings_refuse_the_cluster():
    assert cluster_refusal({}) is None
    assert cluster_refusal({"bookieAuthProviderFactoryClass": ""}) is None  # set empty: no plugin
    for key in ("bookieAuthProviderFactoryClass", "clientAuthProviderFactoryClass"):
        reason = cluster_refusal({key: "org.apache.bookkeeper.sasl.SASLBookieAuthProviderFactory"})
        assert key in reason and "authenticate" in reason


def test_format_1_metadata_is_refused_with_its_own_reason():
    v1 = LedgerMetadata(ledger_id=7, format_version=1, ensemble_size=3, write_quorum=2, ack_quorum=2,
                        state=LedgerState.CLOSED, last_entry_id=9, length=100,
                        segments=((0, ("a:1", "b:1", "c:1")),), digest_type=None, password=None, ctime=None,
                        custom_metadata=(), ctoken=None)
    read_back = parse_ledger_metadata(7, serialize_ledger_metadata(v1, 1))
    assert read_back.format_version == 1
    assert "metadata format 1" in move_refusal(read_back) and "not moved" in move_refusal(read_back)
    v2_unverifiable = parse_ledger_metadata(7, serialize_ledger_metadata(v1, 2))
    assert "no digest type and password" in move_refusal(v2_unverifiable)
    v3 = LedgerMetadata(**{**{f: getattr(v1, f) for f in v1.__dataclass_fields__}, "format_version": 3,
                           "digest_type": DigestType.CRC32C, "password": b"pw", "ctime": 1})
    assert move_refusal(parse_ledger_metadata(7, serialize_ledger_metadata(v3, 3))) is None


def test_zk_acls_follow_zkEnableSecurity():
    plain = KazooClient(hosts="127.0.0.1:1")
    assert zk_acls({}, plain) == list(OPEN_ACL_UNSAFE)
    assert zk_acls({"zkEnableSecurity": "false"}, plain) == list(OPEN_ACL_UNSAFE)
    with pytest.raises(TransportRefused, match="zkEnableSecurity=true.*SASL identity"):
        zk_acls({"zkEnableSecurity": "true"}, plain)
    sasl = KazooClient(hosts="127.0.0.1:1", sasl_options={"mechanism": "DIGEST-MD5", "username": "bookkeeper",
                                                           "password": "secret"})
    assert zk_acls({"zkEnableSecurity": "true"}, sasl) == list(CREATOR_ALL_ACL)
    with pytest.raises(TransportRefused, match="zkEnableSecurity='maybe'"):
        zk_acls({"zkEnableSecurity": "maybe"}, plain)


def test_creator_only_marks_need_an_authenticated_session(zk_client, zk_chroot):
    """What zk_acls guards against: ZooKeeper refuses a creator-only znode from a session with no identity."""
    lock = LedgerLock(zk_client, f"{zk_chroot}/ledgers", 5, "bookie-scanner", acl=list(CREATOR_ALL_ACL))
    with pytest.raises(InvalidACLError):
        lock.acquire()


# -- resolution on a real ZooKeeper --------------------------------------------------------------------------


@pytest.fixture
def store(zookeeper, zk_client, zk_chroot):
    root = f"{zk_chroot}/ledgers"
    zk_client.create(f"{root}/available/readonly", makepath=True)
    zk_client.create(f"{root}/LAYOUT", b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1\n")
    opened = ZooKeeperStore(zookeeper.connect_string, root)
    yield opened
    opened.close()


def register(store, bookie_id: str, data: bytes, *, readonly: bool = False) -> None:
    store.client.create(registration_path(store.root, bookie_id, readonly=readonly), data)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_resolution_reads_writable_then_readonly_registrations(store):
    register(store, CUSTOM, registration_bytes("10.1.0.1", 3181))
    register(store, "ro-bookie", registration_bytes("10.1.0.2", 3182), readonly=True)
    register(store, "10.1.0.3:3183", b"")
    registry = BookieRegistry(store)
    assert registry.address(CUSTOM) == ("10.1.0.1", 3181)
    assert registry.registration("ro-bookie").readonly and registry.address("ro-bookie") == ("10.1.0.2", 3182)
    assert registry.address("10.1.0.3:3183") == ("10.1.0.3", 3183)
    with pytest.raises(BookieNotRegistered, match="not registered"):
        registry.address("10.1.0.4:3184")  # a host:port id that is not registered is not running: not guessed
    with pytest.raises(BookieNotResolved):
        registry.address("readonly")  # the read-only bookies' parent is no bookie


def test_a_moved_bookie_is_found_at_its_new_host_after_the_ttl_or_a_forget(store):
    register(store, CUSTOM, registration_bytes("10.1.0.1", 3181))
    clock = Clock()
    registry = BookieRegistry(store, ttl=30, clock=clock)
    assert registry.address(CUSTOM) == ("10.1.0.1", 3181)
    path = registration_path(store.root, CUSTOM)
    store.client.set(path, registration_bytes("10.2.0.9", 3181))  # the pod came back on another host
    clock.now = 29
    assert registry.address(CUSTOM) == ("10.1.0.1", 3181)  # kept for the ttl
    clock.now = 31
    assert registry.address(CUSTOM) == ("10.2.0.9", 3181)
    store.client.set(path, registration_bytes("10.3.0.1", 3181))
    registry.forget(CUSTOM)
    assert registry.address(CUSTOM) == ("10.3.0.1", 3181)


def test_the_pool_reaches_a_bookie_whose_address_changed(store):
    """A connection to the cached address fails: the registration is read again and the new address is used."""
    async def one_read_server(reader, writer):
        frame = await reader.readexactly(24)
        _, header, ledger_id, entry_id = struct.unpack(">iiqq", frame)
        writer.write(struct.pack(">iiiqq", 24, header, ReturnCode.ENOENTRY, ledger_id, entry_id))
        await writer.drain()
        writer.close()

    async def run():
        server = await asyncio.start_server(one_read_server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            registry = BookieRegistry(store)
            assert registry.address(CUSTOM) == ("127.0.0.1", dead_port)  # cached: the old place
            store.client.set(registration_path(store.root, CUSTOM), registration_bytes("127.0.0.1", port))
            async with BookiePool(timeout=5, resolver=registry) as pool:
                reply = await pool.ask(CUSTOM, lambda c: c.read_entry(7, 3))
            assert (reply.code, reply.ledger_id, reply.entry_id) == (ReturnCode.ENOENTRY, 7, 3)
            async with BookiePool(timeout=5) as legacy:  # the id read as host:port: no such host
                with pytest.raises(BookieUnreachable, match="not HOST:PORT"):
                    await legacy.ask(CUSTOM, lambda c: c.read_entry(7, 3))

    dead = __import__("socket").socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]  # bound, never listening: a connection is refused
    try:
        register(store, CUSTOM, registration_bytes("127.0.0.1", dead_port))
        asyncio.run(run())
    finally:
        dead.close()


def test_an_unregistered_bookie_is_unreachable_not_a_crash(store):
    async def run():
        async with BookiePool(timeout=1, resolver=BookieRegistry(store)) as pool:
            with pytest.raises(BookieUnreachable, match="not registered"):
                await pool.ask(CUSTOM, lambda c: c.read_entry(7, 3))

    asyncio.run(run())


def test_a_move_screens_peers_and_targets_before_anything_is_copied(store):
    register(store, "plain-peer", registration_bytes("10.0.0.1", 3181))
    register(store, "tls-bookie", registration_bytes("10.0.0.2", 3181, extensions=["tls"]))
    register(store, "auth-bookie", registration_bytes("10.0.0.3", 3181, auth=["sasl"]))
    register(store, "http-only", registration_bytes("10.0.0.4", 8080, protocol="http"))
    register(store, "spare", registration_bytes("10.0.0.5", 3181))
    registry = BookieRegistry(store)

    screened = screen_move(registry, {}, ["plain-peer", "stopped-peer"],
                           ["tls-bookie", "auth-bookie", "http-only", "gone", "spare"])
    assert screened.targets == ("spare",)  # a stopped peer is no refusal: the copy reads the others
    assert "advertises TLS" in screened.refused["tls-bookie"] and "no TLS" in screened.refused["tls-bookie"]
    assert "advertises authentication (sasl" in screened.refused["auth-bookie"]
    assert "no bookie-rpc endpoint" in screened.refused["http-only"]
    assert "not registered" in screened.refused["gone"]

    with pytest.raises(TransportRefused, match="bookie tls-bookie advertises TLS.*nothing is moved"):
        screen_move(registry, {}, ["plain-peer", "tls-bookie"], ["spare"])
    with pytest.raises(TransportRefused, match="clientAuthProviderFactoryClass"):
        screen_move(registry, {"clientAuthProviderFactoryClass": "x.Factory"}, ["plain-peer"], ["spare"])
