"""The agent's metadata cache over a real dump store: reads pass through while the store answers, the znodes last read
serve while it does not (here a store that stops answering), decoded as the store decodes them."""

from __future__ import annotations

import pytest

from scanner.agent.cached_metadata import CachedMetadata
from scanner.metadata.snapshot import SnapshotStore
from scanner.metadata.store import MetadataUnavailable
from scanner.sample.sample_cluster import build_sample


class Unplugged:
    """A store that answers until it is unplugged, then raises MetadataUnavailable for every ledger read."""

    def __init__(self, store):
        self._store = store
        self.unplugged = False

    def ledger_nodes(self, ledger_ids):
        if self.unplugged:
            raise MetadataUnavailable("unplugged")
        return self._store.ledger_nodes(ledger_ids)

    def __getattr__(self, name):
        return getattr(self._store, name)


@pytest.fixture
def dump_store(tmp_path):
    with SnapshotStore(build_sample(tmp_path / "sample").dump) as store:
        yield store


def test_the_cache_serves_what_it_read_while_the_store_does_not_answer(dump_store):
    ledger_ids = sorted(dump_store.ledger_ids())[:4]
    store = Unplugged(dump_store)
    metadata = CachedMetadata(store, capacity=3)
    try:
        expected = dump_store.ledger_batch(ledger_ids + [10**9])
        assert metadata.ledger_batch(ledger_ids + [10**9]) == expected  # 10^9: no such ledger
        assert metadata.ledger_nodes(ledger_ids[:1]) == dump_store.ledger_nodes(ledger_ids[:1])
        assert metadata.connected
        store.unplugged = True
        # the capacity of 3 kept the last three read: ledger_ids[2], ledger_ids[3], 10^9 (ledger_ids[0] read again)
        assert metadata.ledger_batch([ledger_ids[3], 10**9]) == [expected[3], expected[4]]
        assert metadata.ledger(ledger_ids[0]) == expected[0].meta and metadata.ledger(10**9) is None
        assert not metadata.connected
        with pytest.raises(MetadataUnavailable, match="unplugged"):
            metadata.ledger_batch([ledger_ids[1]])
        store.unplugged = False
        assert metadata.ledger_batch([ledger_ids[1]]) == [expected[1]] and metadata.connected
    finally:
        metadata.close()
