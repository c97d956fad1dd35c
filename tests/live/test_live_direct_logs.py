"""A DirectEntryLogger bookie scanned again and again: while a writer runs, after it, with the bookie stopped and
after its restart, the scans find nothing but orphan ledgers; a zeroed header of a sealed log the index points into
is still reported.

The livebk kit's bookie3 writes its entry logs with BookKeeper 4.16.7's DirectEntryLogger (``LIVEBK_DIRECT_IO_3``).
That logger creates each log at its full size, zero-filled, and writes the log's header a moment later: a scan can
meet the newest log as all zeros, and a bookie stopped in between leaves it so (here the stop leaves one in place,
as such a stop does); the bookie's garbage collector deletes it at its next start. When it finishes a log, it
writes the header, with the ledgers map's offset, just before the map: a scan can find zeros there for a moment.

With the kit's 1 MiB logs, bookie3 stalls for good in 4.16.7 once a burst of rolled logs waits for the logger's
flush thread (each rolled log keeps one of its eight write buffers until finalized, and a new log's header needs
one more): it then leaves its newest log all zeros and acknowledges nothing, and the writer fails. Logs of 8 MiB
keep it clear of that.

Ledgers are written first (``LedgerFill``, none deleted), then the kit's writer runs until ``WRITING_SCANS`` scans ran
beside it and the last verified ``ENOUGH_ENTRIES``, at most ``LIVE_SECONDS`` (default 90); ``LIVE_SECONDS=1800
ENOUGH_ENTRIES=0`` runs it the whole time.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

from livebk import LIVE_SETTLE_SECONDS, LiveCluster
from scanner.cli import main
from scanner.storage.bookie import open_bookie
from scanner.storage.entrylog import DIRECT_BLOCK_SIZE, LEGACY_HEADER_SIZE, EntryLog
from scanner.storage.layout import discover_layout

SECONDS = int(os.environ.get("LIVE_SECONDS", "90"))
# Written enough: the scans after the writes must each verify over 1000 entries (the writer deletes about half of
# its older ledgers as it goes), so a scan during them verifying this many ends the writes; 0: never
ENOUGH_ENTRIES = int(os.environ.get("ENOUGH_ENTRIES", "2000"))
# The kit's writer keeps about four ledgers of its own (it deletes as many as it creates): the ledgers written first
# make up the entries. A scan that meets a ledger closed moments ago waits for it to settle: about one in three beside
# the writer does.
FILLED_LEDGERS = 20
WRITING_SCANS = 3
NOT_DAMAGE = {"orphan_ledger"}
LOG_SIZE = 8 << 20  # bookie3's logSizeLimit here (see the module doc)
GC_WAIT_MS = 1000
SCANS_AFTER = 9  # scans after the writer, with the bookie stopped, and after its restart (each)
# A clean stop finalizes every log (ledgers map, then the header); on a loaded host it can take longer than the
# helper's default wait before SIGKILL, which could leave a log killed half-way through that.
STOP_SECONDS = 120
MET = {"log of zeros": "reads as zeros", "map read again": "ledgers map, read again",
       "written behind a walk": "after the walk read zeros there"}


def _set(conf: Path, **settings) -> None:
    """The bookie's conf with ``settings`` in place of its own lines for them."""
    lines = [line for line in conf.read_text().splitlines() if line.split("=", 1)[0] not in settings]
    conf.write_text("\n".join([*lines, *(f"{key}={value}" for key, value in settings.items())]) + "\n")


def _scan(capsys, bookie) -> dict:
    status = main(["scan", "--full-speed", "--bookie-conf", str(bookie.conf), "--format", "json",
                   "--settle-seconds", str(LIVE_SETTLE_SECONDS)])
    report = json.loads(capsys.readouterr().out)
    assert status in (0, 1), report
    return report


def _zero_logs(ledger_dir: Path) -> set[str]:
    """The entry logs whose header reads as zeros now."""
    found = set()
    for path in ledger_dir.glob("*.log"):
        try:
            with open(path, "rb") as f:
                head = f.read(LEGACY_HEADER_SIZE)
        except FileNotFoundError:
            continue  # deleted by garbage collection meanwhile
        if len(head) >= 20 and not any(head):
            found.add(path.name)
    return found


def _sealed_indexed_log(bookie) -> Path:
    """A sealed log (ledgers map written) of the stopped bookie that its index points into."""
    layout = discover_layout(bookie.conf)
    with tempfile.TemporaryDirectory() as scratch, open_bookie(layout, work_dir=Path(scratch)) as storage:
        indexed = Counter(raw >> 32 for _, entry_ids, locations in storage.indexed_ledgers()
                          if entry_ids is not None for raw in locations)
        for log_file in storage.entry_logs():
            with EntryLog(log_file.path, log_file.entry_log_id) as entry_log:
                if entry_log.header_has_map and entry_log.header.direct and indexed[log_file.entry_log_id] > 10:
                    return log_file.path
    raise AssertionError(f"no sealed DirectEntryLogger log the index points into: {dict(indexed)}")


def test_a_direct_entry_logger_bookie_scanned_during_and_after_writes_and_a_restart_has_no_false_finding(
        tmp_path, capsys, monkeypatch, caplog):
    monkeypatch.setenv("LIVEBK_DIRECT_IO_3", "1")
    caplog.set_level(logging.INFO, logger="scanner.scan.log_walks")
    caplog.set_level(logging.INFO, logger="scanner.storage.entrylog")
    scans: dict[str, list[dict]] = {"writing": [], "written": [], "stopped": [], "restarted": []}
    zero_seen: set[str] = set()  # logs a scan met with a header of zeros while the bookie ran
    with LiveCluster(tmp_path / "bk") as cluster:
        bookie = cluster.bookies[2]
        assert "dbStorage_directIOEntryLogger=true" in bookie.conf.read_text()
        # Its garbage collector every second (the kit's: 5 s), so the log of zeros left by the stop goes soon after
        # the restart; compaction comes no more often for it.
        _set(bookie.conf, logSizeLimit=LOG_SIZE, gcWaitTime=GC_WAIT_MS)
        bookie.restart()
        ledger_dir = bookie.ledger_dir

        cluster.fill(FILLED_LEDGERS, seed=1, deletes="none")
        cluster.write(seconds=SECONDS, seed=5)
        while cluster.kit_pid("writer") is not None:
            before = _zero_logs(ledger_dir)
            scans["writing"].append(_scan(capsys, bookie))
            zero_seen |= before | _zero_logs(ledger_dir)
            if ENOUGH_ENTRIES and len(scans["writing"]) >= WRITING_SCANS and \
                    scans["writing"][-1]["summary"]["entries_verified"] >= ENOUGH_ENTRIES:
                cluster.stop_writer()  # its open ledger stays open, as a crashed client's does
                break
        else:
            cluster.wait_for_writer()
        for _ in range(SCANS_AFTER):
            zero_seen |= _zero_logs(ledger_dir)
            scans["written"].append(_scan(capsys, bookie))

        bookie.stop(timeout=STOP_SECONDS)
        # A stop between a new log's creation and its header's write leaves the log all zeros, at its full size.
        newest = max(int(path.stem, 16) for path in ledger_dir.glob("*.log"))
        left = ledger_dir / f"{newest + 1:x}.log"
        left.write_bytes(bytes(LOG_SIZE))
        for _ in range(SCANS_AFTER):
            scans["stopped"].append(_scan(capsys, bookie))

        bookie.start()
        deadline = time.monotonic() + 60
        deleted = f"Deleting entryLogId {newest + 1} as it has no active ledgers!"
        while left.exists() or deleted not in bookie.log.read_text(errors="replace"):
            assert time.monotonic() < deadline, f"bookie3's garbage collector did not delete {left.name}"
            time.sleep(0.5)
        for _ in range(SCANS_AFTER):
            scans["restarted"].append(_scan(capsys, bookie))

        bookie.stop(timeout=STOP_SECONDS)
        sealed = _sealed_indexed_log(bookie)
        with open(sealed, "r+b") as f:
            f.write(bytes(DIRECT_BLOCK_SIZE))  # the whole header block DirectEntryLogger writes at once
        damaged = _scan(capsys, bookie)

    counts = {phase: len(reports) for phase, reports in scans.items()}
    categories = Counter(f["category"] for reports in scans.values() for r in reports for f in r["findings"])
    # What the scans met in between (their log): a log of zeros let be, a ledgers map read again once written, a
    # record written where a walk had just read zeros.
    met = Counter(kind for m in caplog.messages for kind, said in MET.items() if said in m)
    print("scans:", counts, "entries verified by the last scan during the writes:",
          scans["writing"][-1]["summary"]["entries_verified"], "findings:", dict(categories), "met:", dict(met),
          "logs of zeros seen beside the scans:", sorted(zero_seen))
    assert sum(counts.values()) >= 30 and counts["writing"] >= 3, counts
    damage = {phase: [f for r in reports for f in r["findings"] if f["category"] not in NOT_DAMAGE]
              for phase, reports in scans.items()}
    assert not any(damage.values()), {phase: [(f["category"], f["ledger_id"], f["entry_log"], f["offset"], f["detail"])
                                              for f in found] for phase, found in damage.items() if found}
    assert all(r["summary"]["entries_verified"] > 1000 for r in scans["written"] + scans["restarted"])
    sealed_id = int(sealed.stem, 16)
    reported = [f for f in damaged["findings"] if f["category"] == "damaged_entry_log"]
    assert [(f["entry_log"], f["offset"]) for f in reported] == [(sealed_id, 0)], damaged["findings"]
    assert "the header is all zeros" in reported[0]["detail"]
