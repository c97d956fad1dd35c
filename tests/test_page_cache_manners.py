"""A scan leaves the page cache as it found it: what it read from disk is gone afterwards, what the bookie
had cached is still there (issue 9's page-cache manners)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from page_cache import cached_pages
from scanner.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from bench_scale import drop_from_page_cache  # noqa: E402
from scale_bookie import Shape, generate  # noqa: E402

# Entry logs of 8 MB: several chunks and prefetches each.
SHAPE = dict(ledgers=50, entry_logs=4, entry_size=16384, entries_per_ledger=40)


@pytest.mark.parametrize("storage", ["interleaved", "db"])
def test_a_scan_drops_what_it_read_and_keeps_what_the_bookie_had_cached(tmp_path, capsys, storage):
    bookie = generate(Shape(storage, **SHAPE), tmp_path / "bookie")
    logs = sorted(bookie.entry_logs)
    index_files = sorted((tmp_path / "bookie").rglob("*.idx"))
    files = logs + index_files
    drop_from_page_cache(files)
    if any(cached_pages(path)[0] for path in files):
        pytest.skip("this filesystem keeps file pages in memory whatever the advice (tmpfs?)")
    hot = [logs[1]] + index_files[3:4]  # what the bookie's readers have been reading
    for path in hot:
        path.read_bytes()

    status = main(["scan", "--full-speed", "--bookie-conf", str(bookie.bookie_conf), "--metadata", f"file:{bookie.dump}",
                   "--format", "json"])
    report = json.loads(capsys.readouterr().out)

    assert (status, report["findings"]) == (0, [])
    assert report["summary"]["entries_verified"] == SHAPE["ledgers"] * SHAPE["entries_per_ledger"]
    left = {path: cached_pages(path) for path in files}
    assert all(cached == total for cached, total in (left[path] for path in hot)), "the bookie's pages must stay"
    # Dropping is advice: the kernel keeps a page another task holds at that moment. Without drop-behind (or
    # with the kernel's read-ahead making later chunks look cached) nine in ten pages of each cold log stay.
    for kind in (logs, index_files):  # each kind on its own: the index files are a few pages beside the logs
        cold = {path.name: left[path] for path in kind if path not in hot}
        assert sum(cached for cached, _ in cold.values()) <= sum(total for _, total in cold.values()) // 10, {
            name: pages for name, pages in cold.items() if pages[0]}
