"""The scan against a real ZooKeeper: the corpus truth, and ledgers that change while they are scanned."""

from __future__ import annotations

import dataclasses

import pytest

from corpus import BOOKIES, CORPUS, assert_clean_report, scan, scan_args, timeless
from scanner.checks.findings import Category, to_ranges
from scanner.metadata.ledger import LedgerState, serialize_ledger_metadata
from scanner.metadata.ledger_paths import LedgerManager, ledger_path
from scanner.metadata.uri import open_metadata
from scanner.sample.sample_cluster import OTHER_BOOKIES, SAMPLE_BOOKIE, build_sample
from scanner.scan.pacing import Unpaced
from scanner.scan.targeted import LedgerScanner
from scanner.storage.bookie import open_bookie
from scanner.storage.layout import discover_layout

DUMP = CORPUS / "zk-dump.json"


@pytest.fixture(scope="module")
def corpus_root(zookeeper, zk_client):
    from zookeeper_server import load_dump

    chroot = "/scan-corpus"
    zk_client.create(chroot)
    load_dump(zk_client, DUMP, prefix=chroot)
    yield f"zk://{zookeeper.connect_string}{chroot}/ledgers"
    zk_client.delete(chroot, recursive=True)


@pytest.mark.parametrize("name", BOOKIES)
def test_each_corpus_bookie_against_zookeeper(capsys, corpus_root, name):
    status, report = scan(capsys, *scan_args(name), "--metadata", corpus_root)
    assert_clean_report(name, status, report)
    status_file, report_file = scan(capsys, *scan_args(name), "--metadata", f"file:{DUMP}")
    assert (status_file, timeless(report_file)) == (status, timeless(report))


@pytest.mark.slow
def test_unreachable_zookeeper_is_one_line_and_exit_2(capsys):
    from zookeeper_server import free_port

    status = __import__("scanner.cli", fromlist=["main"]).main(
        ["scan", "--full-speed", *scan_args("bookie1"), "--metadata", f"zk://127.0.0.1:{free_port()}/ledgers"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith("bookie-scanner scan: ")


class ChangeOnFirstRead(Unpaced):
    """A pacer that lets the test change ZooKeeper once, while the scanner reads the ledger's index."""

    def __init__(self, change):
        self.change = change

    def take_entries(self, n):
        if self.change:
            change, self.change = self.change, None
            change()

    def take_bytes(self, n):
        self.take_entries(0)


@pytest.fixture
def sample_in_zk(tmp_path, zookeeper, zk_client, zk_load_dump):
    sample = build_sample(tmp_path / "sample")
    chroot = zk_load_dump(sample.dump)
    store = open_metadata(f"zk://{zookeeper.connect_string}{chroot}/ledgers")
    layout = discover_layout(sample.bookie_conf)
    with open_bookie(layout) as storage:
        yield sample, store, storage, chroot
    store.close()


def rewrite(zk_client, chroot, store, ledger_id, **changes):
    path = ledger_path(LedgerManager.HIERARCHICAL, f"{chroot}/ledgers", ledger_id)
    meta = dataclasses.replace(store.ledger(ledger_id), **changes)
    zk_client.set(path, serialize_ledger_metadata(meta))


def scan_ledger_with(sample_in_zk, ledger_id, change):
    sample, store, storage, chroot = sample_in_zk
    with LedgerScanner(storage, store, SAMPLE_BOOKIE, pacer=ChangeOnFirstRead(change)) as scanner:
        findings = scanner.scan_ledger(ledger_id)
        return findings, scanner.orphan_findings()


def test_baseline_ledger_5_misses_two_entries(sample_in_zk):
    findings, orphans = scan_ledger_with(sample_in_zk, 5, None)
    assert [(f.category, f.entries) for f in findings] == [(Category.MISSING_ENTRY, ((11, 12),))]


def test_ledger_deleted_mid_scan_is_an_orphan_not_damage(sample_in_zk, zk_client):
    sample, store, storage, chroot = sample_in_zk
    path = ledger_path(LedgerManager.HIERARCHICAL, f"{chroot}/ledgers", 5)
    findings, orphans = scan_ledger_with(sample_in_zk, 5, lambda: zk_client.delete(path))
    assert findings == []
    assert [(f.category, f.ledger_id) for f in orphans] == [(Category.ORPHAN_LEDGER, 5)]


def test_ensemble_change_mid_scan_moves_the_missing_entries_away(sample_in_zk, zk_client):
    sample, store, storage, chroot = sample_in_zk
    first = store.ledger(5).segments[0]
    replaced = (OTHER_BOOKIES[2], *first[1][1:])  # this bookie left the ensemble at entry 10
    findings, _ = scan_ledger_with(sample_in_zk, 5, lambda: rewrite(
        zk_client, chroot, store, 5, segments=(first, (10, replaced))))
    assert findings == []


def test_ledger_closed_mid_scan_is_judged_on_its_closed_metadata(sample_in_zk, zk_client):
    sample, store, storage, chroot = sample_in_zk
    ensemble = store.ledger(5).segments[0][1]
    # Before the scan: recovery is under way, the last fragment starts at entry 40 and is not judged.
    rewrite(zk_client, chroot, store, 5, state=LedgerState.IN_RECOVERY, last_entry_id=-1, length=0,
            segments=((0, ensemble), (40, ensemble)))
    assert [f.entries for f in scan_ledger_with(sample_in_zk, 5, None)[0]] == [((11, 12),)]
    # While it is scanned the ledger is closed at 55: entries 50..55 it owes now count too.
    findings, _ = scan_ledger_with(sample_in_zk, 5, lambda: rewrite(
        zk_client, chroot, store, 5, state=LedgerState.CLOSED, last_entry_id=55, length=5600))
    [missing] = findings
    assert missing.category is Category.MISSING_ENTRY
    owed_after_49 = [e for e in range(50, 56) if (0 - e) % 3 < 2]  # index 0 of 3, write quorum 2
    assert missing.entries == to_ranges([11, 12, *owed_after_49])
