"""Exports of the corpus bookies for the audit tests, written once per session through the library (pyarrow, no Spark)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from corpus import CORPUS
from scanner.audit.export import bookie_listings, damaged_runs, write_export
from scanner.metadata.snapshot import SnapshotStore
from scanner.scan.on_demand import scan_bookie
from scanner.storage.bookie import open_bookie
from scanner.storage.layout import discover_layout

DUMP = CORPUS / "zk-dump.json"
DUMP_LIVE = CORPUS / "zk-dump-live.json"
DAMAGED_COPIES = {"bookie1": "bookie1-corrupted", "bookie3": "bookie3-corrupted"}


def ledger_dir(name: str, damaged: bool = False) -> Path:
    if damaged and name in DAMAGED_COPIES:
        return CORPUS / "corrupted" / DAMAGED_COPIES[name] / "ledgers"
    return CORPUS / name / "ledgers"


def corpus_layout(name: str, damaged: bool = False):
    return discover_layout(CORPUS / "bookie-configs" / f"{name}.conf", ledger_dirs=(ledger_dir(name, damaged),))


def export_bookie(name: str, output: Path, damaged: bool = False):
    """Scan a corpus bookie (or its damaged copy) against the dump and export it under ``output``."""
    layout = corpus_layout(name, damaged)
    with tempfile.TemporaryDirectory() as work_dir, open_bookie(layout, work_dir=work_dir) as storage, \
            SnapshotStore(DUMP) as store:
        report = scan_bookie(storage, store, layout.bookie_id, layout.storage)
        return write_export(bookie_listings(storage, damaged_runs(report.findings)), layout.bookie_id,
                            layout.storage, str(output))


@pytest.fixture(scope="session")
def clean_exports(tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("clean-exports")
    for name in ("bookie1", "bookie2", "bookie3", "bookie4"):
        export_bookie(name, output)
    return output


@pytest.fixture(scope="session")
def damaged_exports(tmp_path_factory) -> Path:
    """bookie1 and bookie3 replaced by their damaged copies."""
    output = tmp_path_factory.mktemp("damaged-exports")
    for name in ("bookie1", "bookie2", "bookie3", "bookie4"):
        export_bookie(name, output, damaged=True)
    return output
