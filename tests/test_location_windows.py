"""LocationRuns serves each log's locations sorted, whatever the runs, batches and windows they pass through."""

from __future__ import annotations

import random
from array import array

import pytest

from scanner.native.switch import NATIVE_VARIABLE
from scanner.scan.location_runs import LocationRuns
import scanner.scan.location_runs as location_runs


def _index(rng: random.Random, ledgers: int, logs: int) -> dict[int, list[tuple[int, int]]]:
    """ledger -> [(entry id, encoded location)], entries in id order, records scattered over the logs."""
    used: set[int] = set()
    index = {}
    for ledger_id in rng.sample(range(10**6), ledgers):
        entries = []
        for entry_id in range(rng.randrange(1, 60)):
            while True:
                location = (rng.randrange(logs) << 32) | rng.randrange(1024, 1 << 20)
                if location not in used:
                    used.add(location)
                    break
            entries.append((entry_id, location))
        index[ledger_id] = entries
    return index


def _expected(index, log_id: int, start_pos: int) -> list[tuple[int, int, int]]:
    return sorted((location & 0xFFFFFFFF, ledger_id, entry_id) for ledger_id, entries in index.items()
                  for entry_id, location in entries if location >> 32 == log_id and location & 0xFFFFFFFF >= start_pos)


def _served(runs: LocationRuns, log_id: int, start_pos: int = 0) -> list[tuple[int, int, int]]:
    served = []
    for window in runs.windows(log_id, start_pos):
        served.extend(zip(window.pos, window.ledger_ids, window.entry_ids))
    return served


@pytest.mark.parametrize("walker", ["native", "python"])
@pytest.mark.parametrize("batch_entries, window_bytes", [(1 << 18, 64 << 20), (40, 64 << 20), (7, 1 << 17)])
def test_every_log_gets_exactly_its_locations_in_order(tmp_path, monkeypatch, batch_entries, window_bytes, walker):
    # The native code stores the runs' columns narrow, the Python form as uint64: the same locations come back.
    monkeypatch.setattr(location_runs, "BATCH_ENTRIES", batch_entries)
    monkeypatch.setattr(location_runs, "WINDOW_BYTES", window_bytes)
    if walker == "python":
        monkeypatch.setenv(NATIVE_VARIABLE, "0")
    rng = random.Random(batch_entries)
    index = _index(rng, ledgers=120, logs=25)
    with LocationRuns(tmp_path, run_entries=300) as runs:
        for ledger_id, entries in index.items():
            runs.add(ledger_id, array("Q", [e for e, _ in entries]), array("Q", [loc for _, loc in entries]))
        runs.finish()
        scratch_bytes = sum(path.stat().st_size for path in tmp_path.glob("locations-*/runs"))
        # 24 bytes a location as uint64; narrow: 4 (25 logs, positions below 2^20), 4 (ledger ids), 1 (entry ids)
        assert scratch_bytes == 24 * runs.count if walker == "python" else scratch_bytes == 9 * runs.count
        logs = sorted({location >> 32 for entries in index.values() for _, location in entries})
        assert runs.entry_log_ids() == logs
        for log_id in range(27):  # in order, as a pass walks them (two logs hold nothing)
            assert _served(runs, log_id) == _expected(index, log_id, 0), log_id
        for log_id in rng.sample(logs, 10):  # out of order, from a record inside, as a resumed walk asks
            start_pos = rng.randrange(1024, 1 << 20)
            assert _served(runs, log_id, start_pos) == _expected(index, log_id, start_pos), (log_id, start_pos)
            assert _served(runs, log_id) == _expected(index, log_id, 0), log_id
