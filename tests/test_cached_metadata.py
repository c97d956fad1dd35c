"""The agent's metadata cache over a real dump store: reads pass through while the store answers, the znodes last read
serve while it does not (here a store that stops answering), decoded as the store decodes them."""

from __future__ import annotations

import pytest

from scanner.agent.cached_metadata import CachedMetadata
from scanner.metadata.snapshot import SnapshotStore
from scanner.metadata.store import MetadataNeverRead, MetadataUnavailable
from scanner.sample.sample_cluster import build_sample
from scanner.scan.full_pass import BookiePass
from scanner.storage.bookie import open_bookie
from scanner.storage.layout import discover_layout


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
        with pytest.raises(MetadataNeverRead, match="unplugged"):
            metadata.ledger_batch([ledger_ids[1]])
        store.unplugged = False
        assert metadata.ledger_batch([ledger_ids[1]]) == [expected[1]] and metadata.connected
    finally:
        metadata.close()


def _pass_findings(sample, tmp_path, unplug_after_index: bool):
    """The findings of a whole pass over the sample bookie; the store unplugged once the index and cluster steps are
    done (an outage that begins as the walk begins), or not at all."""
    layout = discover_layout(sample.bookie_conf)
    tmp_path.mkdir()
    store = Unplugged(SnapshotStore(sample.dump))
    metadata = CachedMetadata(store)  # (closes the store it wraps)
    try:
        with open_bookie(layout, work_dir=tmp_path) as storage, \
                BookiePass(storage, metadata, layout.bookie_id, tmp_path,
                           lambda: open_bookie(layout, work_dir=tmp_path)) as full:
            full.read_index()
            full.read_cluster()
            findings = full.judge_index()
            store.unplugged = unplug_after_index
            for log_file in full.log_files:
                findings += full.walk(log_file)
            findings += full.finish()
            return {(f.category.value, f.ledger_id) for f in findings}, full.metadata_unread
    finally:
        metadata.close()


def test_a_pass_walks_on_through_an_outage_past_records_of_a_ledger_whose_metadata_it_never_read(tmp_path):
    # Ledger 9 was deleted: the index does not list it, its records sit in the logs. Only the walk asks for its
    # metadata, and during an outage nobody had read it before. The pass must not wait for ZooKeeper for it.
    sample = build_sample(tmp_path / "sample")
    found, unread = _pass_findings(sample, tmp_path / "answering", unplug_after_index=False)
    assert ("orphan_ledger", 9) in found and unread == set()
    found_in_outage, unread = _pass_findings(sample, tmp_path / "outage", unplug_after_index=True)
    assert unread == {9}
    assert found_in_outage == found - {("orphan_ledger", 9)}  # every other finding, the walk's corrupt entry too
    assert ("corrupt_entry", 2) in found_in_outage
