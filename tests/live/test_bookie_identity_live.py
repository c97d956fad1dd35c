"""Bookies found as BookKeeper 4.16.7's clients find them, on the live cluster.

bookie2 and the spare bookie4 run with custom ``bookieId``s (not host:port): an id is only a name,
the address only in the registration. The registry finds bookie2 there, and a v2 read through the
pool returns an entry the kit's writer wrote, its digest verifying; read as host:port, as before, the
id reaches nothing. bookie2's share of a fragment is copied to bookie4, every copy verified and read
back, both reached by name. A registration that advertises TLS (written for an id no bookie has) is
refused with that reason: as a candidate it is skipped, as a peer it makes the move impossible,
before any connection.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from livebk import LiveCluster
from scanner.bookie_protocol.pool import BookiePool
from scanner.bookie_protocol.transport import TransportRefused, cluster_refusal, screen_move
from scanner.bookie_protocol.wire import BookieUnreachable
from scanner.metadata.bookie_registry import BOOKIE_RPC, BookieRegistry, registration_path
from scanner.metadata.proto.data_formats_pb2 import BookieServiceInfoFormat
from scanner.metadata.uri import open_metadata
from scanner.repair.fragment_copy import FragmentCopier
from scanner.repair.zk_acls import zk_acls
from scanner.storage.entry import DigestType, DigestVerifier
from scanner.storage.layout import discover_layout

CUSTOM_ID = "bookie-two.bookies.livebk.test"
SPARE_ID = "bookie-four.bookies.livebk.test"
TLS_ID = "bookie-tls.bookies.livebk.test"


def _a_closed_ledger_on(store, bookie_id: str, not_on: str):
    for ledger_id in store.ledger_ids():
        meta = store.ledger(ledger_id)
        if (meta is not None and meta.is_closed and meta.last_entry_id >= 0 and meta.digest_type is not None
                and meta.digest_type is not DigestType.DUMMY and len(meta.segments) == 1
                and bookie_id in meta.segments[0][1] and not_on not in meta.segments[0][1]):
            return meta
    raise AssertionError(f"the writer left no closed ledger on {bookie_id} and not on {not_on}")


def test_a_custom_bookie_id_is_reached_through_its_registration_and_a_tls_bookie_is_refused(tmp_path):
    with LiveCluster(tmp_path / "bk", bookie_count=4, custom_ids={2: CUSTOM_ID, 4: SPARE_ID}) as cluster:
        bookie2 = cluster.bookies[1]
        assert discover_layout(bookie2.conf).bookie_id == CUSTOM_ID  # the scanner knows its bookie by that id
        for seed in (42, 43, 44, 45):  # a few ledgers can leave none on bookie2 without bookie4: write more
            cluster.fill(8, seed=seed)
            with open_metadata(cluster.metadata_uri) as store:
                try:
                    _a_closed_ledger_on(store, CUSTOM_ID, not_on=SPARE_ID)
                    break
                except AssertionError:
                    continue
        with open_metadata(cluster.metadata_uri) as store:
            registry = BookieRegistry(store)
            registration = registry.registration(CUSTOM_ID)
            # BookKeeper's own bytes: one bookie-rpc endpoint at the address the bookie listens on
            assert not registration.legacy and registration.rpc_endpoint().protocol == BOOKIE_RPC
            assert registration.address == ("127.0.0.1", bookie2.port)
            meta = _a_closed_ledger_on(store, CUSTOM_ID, not_on=SPARE_ID)
            index = meta.segments[0][1].index(CUSTOM_ID)
            fragment = meta.fragments()[0]
            entry_id = next(fragment.entries_of(index))

            async def read(pool):
                async with pool:
                    return await pool.ask(CUSTOM_ID, lambda c: c.read_entry(meta.ledger_id, entry_id))

            reply = asyncio.run(read(BookiePool(timeout=10, resolver=registry)))
            assert reply.ok, reply
            assert struct.unpack_from(">qq", reply.body) == (meta.ledger_id, entry_id)
            assert DigestVerifier(meta.digest_type, meta.password).verify(memoryview(reply.body))
            with pytest.raises(BookieUnreachable, match="not HOST:PORT"):
                asyncio.run(read(BookiePool(timeout=10)))  # the id split as host:port, as before

            async def move_share():
                async with BookiePool(timeout=10, per_bookie=4, resolver=registry) as pool:
                    return await FragmentCopier(pool).copy(meta, fragment, CUSTOM_ID, SPARE_ID, ())

            copied = asyncio.run(move_share())  # from one custom id to another, each copy read back from the spare
            assert copied.entries == len(list(fragment.entries_of(index))) > 0

            conf = discover_layout(bookie2.conf).conf
            assert cluster_refusal(conf) is None and zk_acls(conf, store.client)  # the kit: no auth, open ACLs
            info = BookieServiceInfoFormat()
            info.endpoints.add(id="bookie", host="127.0.0.1", port=bookie2.port, protocol=BOOKIE_RPC,
                               extensions=["tls"])
            store.client.create(registration_path(store.root, TLS_ID), info.SerializeToString(), ephemeral=True)
            ensemble = list(meta.segments[0][1])
            screened = screen_move(registry, conf, ensemble, [TLS_ID])
            assert screened.targets == ()
            assert f"bookie {TLS_ID} advertises TLS" in screened.refused[TLS_ID]
            with pytest.raises(TransportRefused, match=f"bookie {TLS_ID} advertises TLS.*no TLS"):
                screen_move(registry, conf, [*ensemble, TLS_ID], [])
