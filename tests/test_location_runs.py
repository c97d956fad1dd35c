"""The index's locations sorted by where they point, in runs spilled to scratch files, served per entry log."""

from __future__ import annotations

import random
from array import array

import pytest

from scanner.scan import location_runs
from scanner.scan.location_runs import LocationRuns


def encoded(entry_log_id: int, pos: int) -> int:
    return entry_log_id << 32 | pos


def test_locations_from_many_runs_come_back_per_log_in_position_order(tmp_path):
    rng = random.Random(4)
    placed = {}  # (ledger, entry) -> (log, pos)
    logs = [0, 3, 7, 0x1A, 2**31]
    with LocationRuns(tmp_path, run_entries=50) as runs:  # several runs: each log's records are spread over them
        for ledger_id in range(1, 80):
            entries = array("Q", range(rng.randrange(1, 9)))
            where = [(rng.choice(logs[:-1]), 1024 + 100 * len(placed) + k) for k in range(len(entries))]
            placed.update({(ledger_id, e): w for e, w in zip(entries, where)})
            runs.add(ledger_id, entries, array("Q", (encoded(*w) for w in where)))
        runs.add(80, array("Q", [0]), array("Q", [encoded(logs[-1], 4096)]))
        placed[(80, 0)] = (logs[-1], 4096)
        runs.finish()
        assert runs.count == len(placed)
        assert runs.entry_log_ids() == sorted({log for log, _ in placed.values()})
        for log in logs:
            served = [(pos, ledger, entry) for window in runs.windows(log)
                      for pos, ledger, entry in zip(window.pos, window.ledger_ids, window.entry_ids)]
            assert served == sorted((pos, ledger, entry) for (ledger, entry), (at, pos) in placed.items() if at == log)
        later = [pos for window in runs.windows(3, start_pos=3000) for pos in window.pos]
        assert later == sorted(pos for at, pos in placed.values() if at == 3 and pos >= 3000)
        assert runs.entry_log_ids() == sorted({log for log, _ in placed.values()})  # unchanged by the walks


def test_no_locations_no_logs(tmp_path):
    with LocationRuns(tmp_path) as runs:
        runs.finish()
        assert runs.entry_log_ids() == [] and list(runs.windows(0)) == []


@pytest.mark.parametrize("fence, by_windows", [(512, False), (8, True)])
def test_runs_longer_than_a_fence_are_searched_right(tmp_path, monkeypatch, fence, by_windows):
    # Runs of thousands of locations in 40 logs' windows: with one fence in 512 locations, more windows than fences, so
    # a search goes through the fences kept in memory, then one block of the file; with one in 8, fewer windows than
    # fences, so each run keeps where its windows start and a search reads nothing.
    monkeypatch.setattr(location_runs, "FENCE", fence)
    rng = random.Random(7)
    placed = {}
    with LocationRuns(tmp_path, run_entries=3000) as runs:
        for ledger_id in range(1, 1200):
            entries = array("Q", range(rng.randrange(1, 12)))
            where = [(rng.randrange(0, 40), rng.randrange(1024, 1 << 20)) for _ in entries]
            placed.update({(ledger_id, e): w for e, w in zip(entries, where)})
            runs.add(ledger_id, entries, array("Q", (encoded(*w) for w in where)))
        runs.finish()
        assert len(runs._runs) > 1 and all((run._windows is not None) == by_windows for run in runs._runs)
        for log in range(41):
            expected = sorted(pos for at, pos in placed.values() if at == log)
            for start_pos in (0, 1024, rng.randrange(1 << 20), expected[len(expected) // 2] if expected else 5):
                served = [pos for window in runs.windows(log, start_pos) for pos in window.pos]
                assert served == [pos for pos in expected if pos >= start_pos]


def test_a_window_still_viewed_keeps_its_locations_while_later_batches_are_served(tmp_path, monkeypatch):
    # Batches of few locations (a log or two each; a log with more is served a window of 1 MiB of positions at a
    # time). A gather's columns serve the next gather once nothing views them; windows the walk still holds (here all
    # of log 0's) must not be overwritten by later gathers.
    monkeypatch.setattr(location_runs, "BATCH_ENTRIES", 40)
    monkeypatch.setattr(location_runs, "WINDOW_BYTES", 1 << 20)
    rng = random.Random(11)
    placed = {}
    with LocationRuns(tmp_path, run_entries=100) as runs:
        for ledger_id in range(1, 300):
            entries = array("Q", range(rng.randrange(1, 6)))
            where = [(0 if rng.random() < 0.3 else rng.randrange(1, 30), rng.randrange(1024, 1 << 24)) for _ in entries]
            placed.update({(ledger_id, e): w for e, w in zip(entries, where)})
            runs.add(ledger_id, entries, array("Q", (encoded(*w) for w in where)))
        runs.finish()

        def expected(log):
            return sorted((pos, ledger, entry) for (ledger, entry), (at, pos) in placed.items() if at == log)

        def served(window):
            return list(zip(window.pos, window.ledger_ids, window.entry_ids))

        held = list(runs.windows(0))
        assert len(held) > 1
        for log in range(1, 30):
            assert [t for window in runs.windows(log) for t in served(window)] == expected(log)
        assert [t for window in held for t in served(window)] == expected(0)


@pytest.mark.parametrize("run_entries", [7, 50, 1 << 18])
def test_ledgers_added_together_make_the_runs_added_one_at_a_time(tmp_path, run_entries):
    # Ledgers of 0 to 30 entries (more than a run of 7 in one), given a few at a time or one at a time: the same runs,
    # spilled after the same ledgers, hold the same columns.
    rng = random.Random(11)
    ledgers = []
    for ledger_id in range(1, 300):
        entries = array("Q", sorted(rng.sample(range(40), rng.choice([0, 1, 2, 10, 30]))))
        ledgers.append((ledger_id, entries, array("Q", (encoded(rng.randrange(5), rng.randrange(1024, 1 << 20))
                                                        for _ in entries))))

    def runs_of(add) -> tuple[int, list]:
        with LocationRuns(tmp_path, run_entries=run_entries) as runs:
            add(runs)
            runs.finish()
            return runs.count, [[list(run.column(which, 0, run.count)) for which in range(3)] for run in runs._runs]

    def one_at_a_time(runs):
        for ledger in ledgers:
            runs.add(*ledger)

    def together(runs):
        at = 0
        while at < len(ledgers):
            group = ledgers[at:at + rng.randrange(1, 40)]
            runs.add_ledgers([ledger_id for ledger_id, _, _ in group], [entries for _, entries, _ in group],
                             [found for _, _, found in group])
            at += len(group)

    expected = runs_of(one_at_a_time)
    assert expected[0] == sum(len(entries) for _, entries, _ in ledgers)
    assert len(expected[1]) > (1 if run_entries < 1000 else 0)
    assert runs_of(together) == expected


def test_the_ledger_column_made_natively_is_the_reference_column():
    from scanner.native import _native

    rng = random.Random(5)
    for _ in range(50):
        ids = [rng.choice([0, 1, 7, 2**63, 2**64 - 1, rng.randrange(2**64)]) for _ in range(rng.randrange(0, 20))]
        columns = [array("Q", range(rng.choice([0, 1, 3, 10]))) for _ in ids]
        assert location_runs._repeated_ids(_native, ids, columns) == location_runs._repeated_ids(None, ids, columns)
    assert _native.repeated_ids([], []) == b""
    with pytest.raises(ValueError):
        _native.repeated_ids([1, 2], [array("Q", [1])])
    with pytest.raises(OverflowError):
        _native.repeated_ids([-1], [array("Q", [1])])
    with pytest.raises(OverflowError):
        _native.repeated_ids([2**64], [array("Q", [1])])
    with pytest.raises((TypeError, ValueError, BufferError)):
        _native.repeated_ids([1], [array("I", [1])])
