"""A scan leaves the page cache as it found it: what it read from disk is gone afterwards, what the bookie
had cached is still there (issue 9's page-cache manners)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from page_cache import cached_page_numbers, cached_pages
from scanner.cli import main
from scanner.storage.pagecache import ASK_SIZE

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


def read_like_a_bookie(path: Path, start: int, length: int) -> None:
    """Read [start, start + length) 4 KiB at a time, the kernel's read-ahead on (it runs ahead of the reader and leaves
    its mark on a page it cached), then wait for what it started to land."""
    with open(path, "rb", buffering=0) as file:
        file.seek(start)
        for _ in range(length // 4096):
            file.read(4096)
    settled, last = 0, None
    while settled < 3:
        now = cached_pages(path)
        settled = settled + 1 if now == last else 0
        last = now
        time.sleep(0.05)


@pytest.mark.parametrize("storage", ["interleaved", "db"])
def test_a_scan_keeps_what_the_bookie_read_of_a_log_in_part_and_adds_nothing(tmp_path, capsys, storage):
    """The bookie's readers leave stretches of a log cached among pages that are not, and read-ahead marks on some
    of them: a read passing a mark starts the kernel's read-ahead past it. The scan must keep the bookie's stretch
    (it may count up to a piece at each end of it as its own) and leave nothing of its own behind."""
    bookie = generate(Shape(storage, **SHAPE), tmp_path / "bookie")
    logs = sorted(bookie.entry_logs)
    drop_from_page_cache(logs)
    if any(cached_pages(path)[0] for path in logs):
        pytest.skip("this filesystem keeps file pages in memory whatever the advice (tmpfs?)")
    tail_start = os.path.getsize(logs[0]) // 2
    read_like_a_bookie(logs[0], tail_start, 1 << 20)  # a cold head, then the stretch a catching-up reader left
    read_like_a_bookie(logs[2], 0, 1 << 20)  # the head, and whatever the kernel's read-ahead brought after it
    before = {path: cached_page_numbers(path)[0] for path in logs}

    status = main(["scan", "--full-speed", "--bookie-conf", str(bookie.bookie_conf), "--metadata", f"file:{bookie.dump}",
                   "--format", "json"])
    report = json.loads(capsys.readouterr().out)

    assert (status, report["findings"]) == (0, [])
    piece = ASK_SIZE // os.sysconf("SC_PAGE_SIZE")
    for path in logs:
        after, pages = cached_page_numbers(path)
        assert len(before[path] - after) <= 2 * piece, f"{path.name}: the bookie's pages dropped"
        assert len(after - before[path]) <= (pages - len(before[path])) // 10, f"{path.name}: pages of ours left"
    assert len(before[logs[0]]) > 4 * piece and len(before[logs[2]]) > 4 * piece  # the bookie's stretches were there
