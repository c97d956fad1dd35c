"""The agent's parts on their own: config, cursor, suspects, the bookie-log signals, the log tail,
sd_notify, and an entry log vanishing under a walk."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scanner.agent.config import ConfigError, load_config
from scanner.agent.cursor import ENTRY_LOGS, LEDGERS, Cursor, load_cursor, save_cursor
from scanner.agent.logsignals import suspects_in_line
from scanner.agent.logtail import LogTail
from scanner.agent.sdnotify import SystemdNotifier
from scanner.agent.suspects import (ENTRY_LOG, LEDGER, MAX_FAILED_SCANS, Suspect, SuspectQueue, append_to_inbox,
                                    parse_suspect)
from scanner.metadata.snapshot import SnapshotStore
from scanner.repair.blast_radius import BlastRadius
from scanner.sample.sample_cluster import build_sample
from scanner.scan.full_pass import BookiePass
from scanner.scan.pacing import Unpaced
from scanner.storage.bookie import open_bookie
from scanner.storage.layout import discover_layout

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from scanner.cli import main; sys.exit(main())", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=60)


# -- config -------------------------------------------------------------------------------------


def test_the_documented_config_loads_with_every_default(tmp_path):
    config = load_config(REPO / "conf" / "scanner.toml")
    assert config.listen_host == "127.0.0.1" and config.listen_port == 9721
    assert config.period_seconds == 7 * 86400 and config.pace == "rate"  # BP-24: at the rate, then idle
    assert config.checkpoint_seconds == 30
    assert config.mark is False
    assert config.rereplicate is True and config.copy_bytes_per_second == 20_000_000  # moves, once marking is on
    assert config.blast_radius == BlastRadius()  # the file documents the defaults the code has
    assert config.retry_seconds == 30  # a failed move is tried again after 30 s, 60 s, ...: escalated after 90 s
    assert config.misconfigured_exit_seconds == 30


def test_the_blast_radius_and_the_retries_are_configured_in_repair(tmp_path):
    path = tmp_path / "scanner.toml"
    path.write_text("[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\n[repair]\nmoves_per_hour = 2\n"
                    "move_bytes_per_hour = '1GiB'\nfailed_disk_log_share = 0.5\nretry_seconds = 5\n")
    radius = load_config(path).blast_radius
    assert load_config(path).retry_seconds == 5
    assert (radius.moves_per_hour, radius.move_bytes_per_hour, radius.failed_disk_log_share) == (2, 1 << 30, 0.5)
    path.write_text("[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\n[repair]\nfailed_disk_ledger_share = 2\n")
    with pytest.raises(ConfigError, match="failed_disk_ledger_share"):
        load_config(path)


@pytest.mark.parametrize("text, named", [
    ("[agent]\nstate_dir = 's'\n", "[bookie] conf"),
    ("[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\nperiod_days = 0\n", "period_days"),
    ("[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\nlisten = 'nowhere'\n", "listen"),
    ("[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\n[throttle]\nwindow_hours = '25:00-26:00'\n", "window_hours"),
    ("[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\nspeed = 3\n", "'speed'"),
    ("[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\npace = 'fast'\n", "pace"),
    ("[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\nsettle_seconds = -1\n", "settle_seconds"),
    ("[bookie]\nconf = 'c'\n[metadata]\nmisconfigured_exit_seconds = 'soon'\n[agent]\nstate_dir = 's'\n",
     "misconfigured_exit_seconds"),
    ("[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\n[repair]\nretry_seconds = 0.5\n", "retry_seconds"),
    ("[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\n[repair]\nretry_seconds = 601\n", "retry_seconds"),
    ("[bookie\n", "not valid TOML"),
    # heal in place was replaced by moves: the old key says what to use instead
    ("[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\n[repair]\nheal = true\n", "rereplicate = true moves"),
])
def test_a_config_mistake_is_one_line_naming_the_key_and_exit_status_2(tmp_path, text, named):
    path = tmp_path / "scanner.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="scanner.toml") as caught:
        load_config(path)
    assert named in str(caught.value)
    done = cli("run", "--config", str(path))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and named in done.stderr


def test_rates_in_the_config_take_units(tmp_path):
    path = tmp_path / "scanner.toml"
    base = "[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\n"
    expected = {"50000000": 50e6, "'50MB'": 50e6, "'50 MB/s'": 50e6, "'48MiB'": 48 * 2**20, "'1.5G'": 1.5e9, "0": None}
    for written, rate in expected.items():
        path.write_text(base + f"[throttle]\nbytes_per_second = {written}\nentries_per_second = '10k'\n"
                               "[repair]\ncopy_bytes_per_second = '20 MB/s'\n")
        config = load_config(path, {})
        assert (config.throttle.bytes_per_second, config.throttle.entries_per_second) == (rate, 10_000)
        assert config.copy_bytes_per_second == 20e6
    for written in ("'fast'", "-5", "'50 entries'", "true"):
        path.write_text(base + f"[throttle]\nbytes_per_second = {written}\n")
        with pytest.raises(ConfigError, match=r"\[throttle\] bytes_per_second = .*: expected a number >= 0 or a string"):
            load_config(path, {})


def test_every_key_can_come_from_the_environment_and_wins_over_the_file(tmp_path):
    path = tmp_path / "scanner.toml"
    path.write_text("[bookie]\nconf = 'c'\n[agent]\nstate_dir = 's'\nperiod_days = 7\n")
    config = load_config(path, {"BOOKIE_SCANNER_AGENT_PERIOD_DAYS": "3", "BOOKIE_SCANNER_THROTTLE_BYTES_PER_SECOND": "20MB",
                                "BOOKIE_SCANNER_METADATA_URI": "zk://zk1:2181/ledgers",
                                "BOOKIE_SCANNER_REPAIR_MARK": "true", "BOOKIE_SCANNER_BOOKIE_LOG_FILES": '["a.log", "b.log"]',
                                "OTHER_VARIABLE": "ignored"})
    assert config.period_seconds == 3 * 86400 and config.throttle.bytes_per_second == 20e6
    assert config.metadata_uri == "zk://zk1:2181/ledgers" and config.mark is True
    assert config.log_files == (tmp_path / "a.log", tmp_path / "b.log")
    # Nothing but the environment: an empty file.
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    config = load_config(empty, {"BOOKIE_SCANNER_BOOKIE_CONF": "/etc/bk_server.conf", "BOOKIE_SCANNER_AGENT_STATE_DIR": "/var/lib/s"})
    assert (config.bookie_conf, config.state_dir) == (Path("/etc/bk_server.conf"), Path("/var/lib/s"))
    with pytest.raises(ConfigError, match=r"^BOOKIE_SCANNER_AGENT_PERIOD_DAYS='soon' \(environment, over .*scanner.toml\): "
                                          "expected a number > 0"):
        load_config(path, {"BOOKIE_SCANNER_AGENT_PERIOD_DAYS": "soon"})
    with pytest.raises(ConfigError, match="environment variable BOOKIE_SCANNER_THROTTLE_RATE names no config key"):
        load_config(path, {"BOOKIE_SCANNER_THROTTLE_RATE": "1"})
    done = subprocess.run([sys.executable, "-c", "import sys; from scanner.cli import main; sys.exit(main())",
                           "run", "--config", str(path)], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "BOOKIE_SCANNER_AGENT_LISTEN": "nowhere"})
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "BOOKIE_SCANNER_AGENT_LISTEN='nowhere' (environment" in done.stderr


# -- cursor -------------------------------------------------------------------------------------


def test_a_cursor_survives_a_save_and_a_damaged_one_means_a_fresh_pass(tmp_path, caplog):
    path = tmp_path / "cursor-0.json"
    cursor = Cursor("/d", 100.0, ENTRY_LOGS, ledgers_done=3, ledgers_total=3, last_log_done=1, entry_log_id=2,
                    entry_log_inode=99, offset=4096, vanished_logs=(0,), bytes_done=5000, bytes_total=10000,
                    passes_completed=4)
    save_cursor(path, cursor)
    assert load_cursor(path, "/d") == cursor
    assert 0.5 < cursor.pass_progress < 0.6
    assert load_cursor(path, "/other") is None  # another dir's cursor is not ours
    for damage in (b'{"ledger_dir": "/d", "pha', b"\xff\x00", b'{"ledger_dir": "/d", "phase": "nonsense"}', b"[]"):
        path.write_bytes(damage)
        assert load_cursor(path, "/d") is None
    assert "fresh pass" in caplog.text


def test_progress_only_grows_through_a_pass():
    steps = [Cursor("/d", 0.0, LEDGERS, ledgers_total=4, ledgers_done=n, bytes_total=100) for n in range(5)]
    steps += [Cursor("/d", 0.0, ENTRY_LOGS, ledgers_total=4, ledgers_done=4, bytes_total=100, bytes_done=b)
              for b in (0, 50, 100)]
    progress = [c.pass_progress for c in steps]
    assert progress == sorted(progress) and progress[0] == 0 and progress[-1] == 1


# -- suspects -----------------------------------------------------------------------------------


def test_suspects_survive_a_restart_and_are_deduplicated_within_the_window(tmp_path):
    now = [1000.0]
    queue = SuspectQueue(tmp_path, window_seconds=600, limit=100, clock=lambda: now[0])
    ledger, log = Suspect(LEDGER, 5, 0), Suspect(ENTRY_LOG, 2, 0)
    assert queue.add([ledger, log, ledger]) == 2
    taken = queue.take(0)
    assert taken == ledger
    # A crash now: the taken one was not finished, so it comes back.
    again = SuspectQueue(tmp_path, window_seconds=600, limit=100, clock=lambda: now[0])
    assert again.queued() == 2
    assert again.take(1) is None  # another dir's scanner sees none of them
    first = again.take(0)
    again.done(first)
    assert again.add([first]) == 0  # scanned within the window
    now[0] += 601
    assert again.add([first]) == 1  # the window has passed


def test_a_suspect_whose_scan_keeps_failing_is_dropped_and_counted_never_retried_for_ever(tmp_path):
    from scanner.metadata.store import MetadataUnavailable

    queue = SuspectQueue(tmp_path)
    poison, waiting = Suspect(LEDGER, 7, 0), Suspect(LEDGER, 8, 0)
    queue.add([poison])
    for _ in range(MAX_FAILED_SCANS):
        assert queue.take(0) == poison
        try:
            raise OSError(5, "Input/output error")
        except OSError:
            queue.release(poison)  # as the worker does, while the failure is handled
    assert queue.take(0) is None and queue.failed == 1
    assert queue.add([poison]) == 0  # not queued again within the window
    # Waiting for the metadata, or stopping, never counts as a failure.
    queue.add([waiting])
    for _ in range(MAX_FAILED_SCANS + 2):
        assert queue.take(0) == waiting
        try:
            raise MetadataUnavailable("ZooKeeper is down")
        except MetadataUnavailable:
            queue.release(waiting)
    queue.release(queue.take(0))
    assert queue.take(0) == waiting and queue.failed == 1


def test_a_full_queue_drops_and_counts(tmp_path):
    queue = SuspectQueue(tmp_path, limit=2)
    assert queue.add([Suspect(LEDGER, i, 0) for i in range(5)]) == 2
    assert queue.dropped == 3


def test_the_inbox_left_while_the_agent_was_down_is_drained_into_the_queue(tmp_path):
    append_to_inbox(tmp_path, Suspect(LEDGER, 8))
    append_to_inbox(tmp_path, Suspect(ENTRY_LOG, 3))
    (tmp_path / "suspects.inbox").open("a").write("not json\n")
    queue = SuspectQueue(tmp_path)
    assert queue.drain_inbox(lambda s: [Suspect(s.kind, s.id, 0)]) == 2
    assert (tmp_path / "suspects.inbox").read_text() == ""
    assert {queue.take(0), queue.take(0)} == {Suspect(LEDGER, 8, 0), Suspect(ENTRY_LOG, 3, 0)}


@pytest.mark.parametrize("body", [{"ledger": -1}, {"ledger": "5"}, {"ledger": 1, "entry_log": 2}, {}, [1], {"ledger": True}])
def test_a_malformed_suspect_is_refused(body):
    with pytest.raises(ValueError):
        parse_suspect(body)


# -- the bookie's log lines (formats doc section 10.3) ------------------------------------------

LINES = [
    ("2024-01-02 10:00:00,123 - INFO  - [BookieReadThreadPool-0:ReadEntryProcessorV3@123] - "
     "No ledger found while reading entry: 4 from ledger: 77", {(LEDGER, 77)}),
    ("... - No ledger found(or it has been deleted) reading entry 0 when fencing ledger 78", {(LEDGER, 78)}),
    ("... - No ledger found reading entry 0 when fencing ledger 79", {(LEDGER, 79)}),
    ("ERROR [x:ReadEntryProcessorV3@99] - IOException while reading entry: 3 from ledger 80 ", {(LEDGER, 80)}),
    ("java.io.IOException: Bad entry read from log file id: 26", {(ENTRY_LOG, 26)}),
    ("Caused by: org.apache.bookkeeper.bookie.DefaultEntryLogger$EntryLookupException$MissingEntryException: "
     "pos 1020 (entry 5 for ledgerId 81) past end of entryLog 27", {(LEDGER, 81), (ENTRY_LOG, 27)}),
    ("...WrongEntryException: Found entry 9, ledger 82 at pos 2048 entryLog 28, should have found entry 8 for "
     "ledgerId 83", {(LEDGER, 83), (ENTRY_LOG, 28)}),
    ("Missing entryLog 29 for ledgerId 84, entry 1 at offset 4096", {(LEDGER, 84), (ENTRY_LOG, 29)}),
    ("Invalid entry length at pos 4 (entry 2 for ledgerId 85) for entryLog 30", {(LEDGER, 85), (ENTRY_LOG, 30)}),
    ("Short read for 86@3 in 31@8192(rc!=size)", {(LEDGER, 86), (ENTRY_LOG, 31)}),
    ("WARN - Sanity check failed for entry size of 99999999 at location 1024 in 32", {(ENTRY_LOG, 32)}),
    ("Bad location(location=141733920768,expectedLedger=87,expectedEntry=1,foundLedger=0,foundEntry=0)",
     {(LEDGER, 87), (ENTRY_LOG, 33)}),
    ("ERROR - Digest mismatch for ledger-id: 88, entry-id: 4", {(LEDGER, 88)}),
    # 4.18's structured form: the ids are attributes; entryId must not be taken for a ledger.
    ("INFO - No ledger found while reading entry from ledger {entryId=3, ledgerId=89}", {(LEDGER, 89)}),
    ("ERROR - IOException while reading entry from ledger {entryId=12, ledgerId=90}", {(LEDGER, 90)}),
    ("WARN - Sanity check failed for entry size {entryLogId=34, entrySize=99999999, position=1024}", {(ENTRY_LOG, 34)}),
    # Not read errors: normal after a restart, garbage collection, fencing, v2 debug.
    ("INFO - Failed to get ledgers map index from: 5.log : no ledgers map", set()),
    ("WARN - Cannot find entry log file 1a.log : gone", set()),
    ("INFO - Ledger fence request received for ledger: 91 from address: /10.0.0.1", set()),
    ("DEBUG - Error reading ReadEntry(lid=92, eid=1)", set()),
]


@pytest.mark.parametrize("line, expected", LINES)
def test_read_error_lines_name_their_ledgers_and_entry_logs(line, expected):
    assert {(s.kind, s.id) for s in suspects_in_line(line)} == expected


# -- following the bookie's log -----------------------------------------------------------------


def _wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_the_tail_follows_appends_rotation_and_truncation_but_not_old_lines(tmp_path):
    log_file = tmp_path / "bookie.log"
    log_file.write_text("old line from before the agent\n")
    seen: list[str] = []
    tail = LogTail([log_file, tmp_path / "not-yet.log"], seen.append)
    tail.start()
    try:
        with log_file.open("a") as f:
            f.write("first\nsecond, half")
        assert _wait_for(lambda: seen == ["first"])
        with log_file.open("a") as f:
            f.write(" done\n")
        assert _wait_for(lambda: seen == ["first", "second, half done"])
        # Rotation by rename: what was still written to the old file is read, then the new one.
        os.rename(log_file, tmp_path / "bookie.log.1")
        with (tmp_path / "bookie.log.1").open("a") as f:
            f.write("last of the old file\n")
        log_file.write_text("new file\n")
        tail.poll()
        assert _wait_for(lambda: seen[-2:] == ["last of the old file", "new file"])
        # Copy-and-truncate rotation.
        log_file.write_text("")
        tail.poll()
        log_file.write_text("after truncation\n")
        assert _wait_for(lambda: seen[-1] == "after truncation")
        (tmp_path / "not-yet.log").write_text("created later\n")
        assert _wait_for(lambda: "created later" in seen)
    finally:
        tail.stop()
    assert "old line from before the agent" not in seen


# -- sd_notify ----------------------------------------------------------------------------------


def test_notify_messages_reach_the_socket_and_the_watchdog_pings_at_half_its_timeout(tmp_path):
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(path)
        server.settimeout(5)
        notifier = SystemdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "20000000"})
        assert notifier.watchdog_interval == 10.0
        assert notifier.ready("scanning")
        assert server.recv(1024) == b"READY=1\nSTATUS=scanning"
        assert notifier.watchdog() and server.recv(1024) == b"WATCHDOG=1"
        assert notifier.stopping() and server.recv(1024) == b"STOPPING=1"
    assert not SystemdNotifier({}).enabled and not SystemdNotifier({}).ready("x")
    assert SystemdNotifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "5", "WATCHDOG_PID": "1"}).watchdog_interval is None


# -- an entry log vanishing under the walk ------------------------------------------------------


class _DeletingPacer(Unpaced):
    """Deletes the log being walked the first time the walk pays for bytes (garbage collection)."""

    def __init__(self, victim: Path):
        self.victim = victim

    def take_bytes(self, n):
        if self.victim.exists():
            self.victim.unlink()
        return False

    def take_entries(self, n):
        return False


def test_an_entry_log_deleted_while_it_is_walked_is_not_a_finding(tmp_path):
    sample = build_sample(tmp_path / "sample")  # a copy of our own: the walk deletes from it
    layout = discover_layout(sample.bookie_conf)
    victim = sample.ledger_dir / "current" / "0.log"  # a healthy, finished log
    with open_bookie(layout, work_dir=tmp_path) as storage, SnapshotStore(str(sample.dump)) as store:
        log_file = next(f for f in storage.entry_logs() if f.entry_log_id == 0)
        with BookiePass(storage, store, layout.bookie_id, tmp_path, lambda: open_bookie(layout, work_dir=tmp_path),
                        _DeletingPacer(victim)) as logs:
            offsets = []
            findings = logs.walk(log_file, checkpoint=lambda offset, found: offsets.append(offset) or False)
            assert findings == [] and not victim.exists()
            assert offsets and logs.totals.entries_verified > 0
            # Its turn comes again (a resumed cursor): the file is gone, quietly.
            assert logs.walk(log_file, start=offsets[-1]) == []
