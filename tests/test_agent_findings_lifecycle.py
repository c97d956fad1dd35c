"""The agent's findings have a lifecycle: a finding ends when a later pass, a suspect's scan or the repair
follow-up shows the damage gone; open findings are what is damaged now; ended ones go to a bounded,
rotated history; one change never rewrites the whole record."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import pytest

from scanner.agent.cached_metadata import CachedMetadata
from scanner.agent.findingbook import DATABASE_FILE, HISTORY_FILE, LEGACY_FILE, FindingBook, FindingKey
from scanner.agent.marking import Marking
from scanner.checks.findings import Category, Finding
from scanner.metadata.ledger_paths import LedgerManager, ledger_path
from scanner.metadata.uri import open_metadata
from scanner.repair.marks import mark_path
from scanner.storage.indexfile import index_file_path
from scanner.sample.sample_cluster import SAMPLE_BOOKIE, build_sample
from test_agent_service import EXPECTED, AgentProcess, book_entries, book_history, cli, wait_for, write_config
from test_exit_status import REPO

DIR_A, DIR_B = "/data/a/ledgers", "/data/b/ledgers"


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def corrupt(ledger_id: int, entry_id: int, entry_log: int = 0) -> Finding:
    return Finding(Category.CORRUPT_ENTRY, ledger_id, ((entry_id, entry_id),), entry_log, 100 + entry_id,
                   f"entry {entry_id}: CRC32 digest mismatch")


def missing(ledger_id: int, first: int, last: int) -> Finding:
    return Finding(Category.MISSING_ENTRY, ledger_id, ((first, last),), None, None, "not in the local index")


@pytest.fixture
def book(tmp_path):
    clock = Clock()
    book = FindingBook(tmp_path, [DIR_A, DIR_B], clock=clock)
    book.clock = clock
    yield book
    book.close()


def history(tmp_path) -> list[dict]:
    path = tmp_path / HISTORY_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_finding_met_again_is_the_same_one_and_its_entries_are_what_the_latest_pass_found(book):
    book.begin_pass(DIR_A)
    assert book.record(DIR_A, [corrupt(2, 7), corrupt(2, 9)]) == [corrupt(2, 7)]  # one finding: ledger 2 in log 0
    [entry] = book.open_findings()
    assert entry.key == FindingKey(DIR_A, Category.CORRUPT_ENTRY, 2, 0)
    assert entry.finding.entries == ((7, 7), (9, 9)) and entry.first_seen == entry.last_seen == 1000.0
    book.clock.now = 2000.0
    book.begin_pass(DIR_A)
    assert book.record(DIR_A, [corrupt(2, 9)]) == []  # seen before: not new, not handed to repair again
    [entry] = book.open_findings()
    assert entry.finding.entries == ((9, 9),)  # entry 7 was healed: the latest pass's word
    assert (entry.first_seen, entry.last_seen) == (1000.0, 2000.0)
    assert book.counts() == {"corrupt_entry": 1} and book.new_by_category == {"corrupt_entry": 1}


def test_a_pass_that_does_not_meet_a_finding_again_ends_it_into_the_history(book, tmp_path):
    book.begin_pass(DIR_A)
    book.record(DIR_A, [corrupt(2, 7), missing(5, 11, 12)])
    book.record(DIR_B, [missing(8, 0, 3)])
    book.record(DIR_A, [Finding(Category.UNREPAIRED, 6, ((1, 1),), None, None, "a mark was cleared")])
    book.end_pass(DIR_A, "not found again by pass 1")  # all met in this pass: nothing ends
    assert sum(book.counts().values()) == 4
    book.clock.now = 2000.0
    book.begin_pass(DIR_A)
    book.record(DIR_A, [missing(5, 11, 12)])
    ended = book.end_pass(DIR_A, "not found again by pass 2")
    assert [e.key for e in ended] == [FindingKey(DIR_A, Category.CORRUPT_ENTRY, 2, 0)]
    # The other dir's findings wait for that dir's pass; the follow-up's own word waits for the follow-up.
    assert book.counts() == {"missing_entry": 2, "unrepaired": 1}
    assert book.ended_by_category == {"corrupt_entry": 1}
    [line] = history(tmp_path)
    assert (line["ledger_dir"], line["category"], line["ledger_id"], line["entry_log"], line["entries"]) == (
        DIR_A, "corrupt_entry", 2, 0, [[7, 7]])
    assert (line["first_seen"], line["last_seen"], line["ended"], line["why"]) == (
        1000.0, 1000.0, 2000.0, "not found again by pass 2")
    # Met again later: a finding of its own, new again, counted and handed to repair again.
    assert book.record(DIR_A, [corrupt(2, 7)]) == [corrupt(2, 7)]
    assert [e.finding for e in book.awaiting_marks() if e.finding.ledger_id == 2] == [corrupt(2, 7)]


def test_a_pass_does_not_end_the_findings_of_a_ledger_it_could_not_judge(book):
    # During a ZooKeeper outage a pass walks past the records of a ledger whose metadata it never read: it did not
    # look for that ledger's damage, so it cannot say the damage is gone.
    orphan = Finding(Category.ORPHAN_LEDGER, 9, (), None, None, "deleted; records in entry log 0")
    book.begin_pass(DIR_A)
    book.record(DIR_A, [orphan, corrupt(2, 7)])
    book.clock.now = 2000.0
    book.begin_pass(DIR_A)
    ended = book.end_pass(DIR_A, "not found again by pass 2", unjudged={9})
    assert [e.key.ledger_id for e in ended] == [2]
    assert [e.finding for e in book.open_findings()] == [orphan]
    book.begin_pass(DIR_A)
    assert [e.key.ledger_id for e in book.end_pass(DIR_A, "not found again by pass 3")] == [9]


def test_a_narrower_scan_ends_what_it_covers_and_no_longer_finds(book):
    book.begin_pass(DIR_A)
    damaged_log = Finding(Category.DAMAGED_ENTRY_LOG, None, None, 3, 8, "ledgers map offset outside the data")
    book.record(DIR_A, [corrupt(2, 7, entry_log=3), missing(2, 20, 21), damaged_log, corrupt(4, 1, entry_log=3)])
    # A suspect ledger 2, scanned again: its missing entries are still missing, its corrupt entry is not.
    book.settle(DIR_A, [missing(2, 20, 21)], (Category.CORRUPT_ENTRY, Category.MISSING_ENTRY), ledger_id=2,
                why="not found again by a scan of suspect ledger 2")
    assert {(e.key.category, e.key.ledger_id) for e in book.open_findings()} == {
        (Category.MISSING_ENTRY, 2), (Category.DAMAGED_ENTRY_LOG, None), (Category.CORRUPT_ENTRY, 4)}
    # A suspect entry log 3, scanned again after it was rewritten: nothing there any more.
    book.settle(DIR_A, [], (Category.DAMAGED_ENTRY_LOG, Category.CORRUPT_ENTRY), entry_log=3,
                why="not found again by a scan of suspect entry log 3")
    assert book.counts() == {"missing_entry": 1}
    # The repair follow-up ends a ledger everywhere: repaired.
    book.record(DIR_B, [missing(2, 30, 30)])
    book.end_ledger(2, (Category.MISSING_ENTRY,), "repair follow-up: no damage left on this bookie: repaired")
    assert book.counts() == {}


def test_the_history_is_rotated_and_bounded(tmp_path):
    book = FindingBook(tmp_path, [DIR_A], history_bytes=2000, history_files=2)
    try:
        for n in range(60):
            book.begin_pass(DIR_A)
            book.record(DIR_A, [corrupt(n, n)])
            book.begin_pass(DIR_A)
            book.end_pass(DIR_A, f"not found again by pass {n}")
    finally:
        book.close()
    files = sorted(p.name for p in tmp_path.glob(HISTORY_FILE + "*"))
    assert files == [HISTORY_FILE, HISTORY_FILE + ".1", HISTORY_FILE + ".2"]
    assert all(p.stat().st_size <= 2000 for p in tmp_path.glob(HISTORY_FILE + "*"))
    kept = [entry["ledger_id"] for entry in book_history(tmp_path)]  # oldest first, the oldest rotated away
    assert kept == list(range(kept[0], 60)) and kept[0] > 0
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in tmp_path.iterdir() if p.is_file())


def test_recording_a_finding_writes_about_that_finding_not_every_finding_known(tmp_path):
    # Bytes written through write(2) while one finding is recorded into a book that holds 20000.
    probe = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from scanner.agent.findingbook import FindingBook
        from scanner.checks.findings import Category, Finding

        def written():
            return int(next(l for l in open("/proc/self/io") if l.startswith("wchar")).split()[1])

        book = FindingBook(Path(sys.argv[1]), ["{DIR_A}"])
        book.record("{DIR_A}", [Finding(Category.MISSING_LEDGER, n, ((0, 99),), None, None, "no local index " * 8)
                              for n in range(20000)])
        before = written()
        book.record("{DIR_A}", [Finding(Category.CORRUPT_ENTRY, 7, ((3, 3),), 1, 5, "entry 3: CRC32 digest mismatch")])
        print(written() - before)
    """)
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=True)
    database = (tmp_path / DATABASE_FILE).stat().st_size
    assert database > 2_000_000  # what a whole rewrite would write
    assert int(done.stdout) < 64 * 1024


def test_a_database_that_cannot_be_written_is_an_os_error_naming_it_and_health_says_so(tmp_path):
    # The file-size limit stands in for a full disk: writes past it fail as they would there (EFBIG).
    probe = textwrap.dedent(f"""
        import resource, signal, sys
        from pathlib import Path
        from scanner.agent.findingbook import FindingBook
        from scanner.checks.findings import Category, Finding
        from scanner.statefile import write_problem

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        state = Path(sys.argv[1])
        book = FindingBook(state, ["{DIR_A}"])
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.RLIM_INFINITY))
        try:
            for n in range(100000):
                book.record("{DIR_A}", [Finding(Category.MISSING_LEDGER, n, ((0, 9),), None, None, "x" * 200)])
        except OSError as exc:
            print("failed", n > 0, exc.filename == str(state / "findings.db"), write_problem(state) is not None)
    """)
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.split() == ["failed", "True", "True", "True"], done.stdout + done.stderr


def test_findings_of_an_earlier_version_are_imported_once_with_their_marks_still_waiting(tmp_path):
    lost = Finding(Category.LOST_ENTRY, 3, ((0, 4),), 1, 40, "records gone")
    orphan = Finding(Category.ORPHAN_LEDGER, 8, None, None, None, "no ledger metadata")
    (tmp_path / LEGACY_FILE).write_text(json.dumps({
        "known": {"k1": {"finding": lost.to_json(), "first_seen": 10.0, "last_seen": 20.0},
                  "k2": {"finding": orphan.to_json(), "first_seen": 11.0, "last_seen": 21.0}},
        "to_mark": ["k1"]}))
    book = FindingBook(tmp_path, [DIR_A, DIR_B])
    try:
        entries = {e.finding.category: e for e in book.open_findings()}
        assert entries[Category.LOST_ENTRY].key.ledger_dir == DIR_B  # ledger 3 belongs to the second dir
        assert (entries[Category.LOST_ENTRY].first_seen, entries[Category.LOST_ENTRY].last_seen) == (10.0, 20.0)
        assert [e.finding for e in book.awaiting_marks()] == [lost]
        assert not (tmp_path / LEGACY_FILE).exists()
    finally:
        book.close()


@pytest.mark.slow
def test_damage_repaired_or_deleted_ends_its_findings_and_health_status_and_the_alert_clear(
        tmp_path, zookeeper, zk_client, zk_load_dump):
    sample = build_sample(tmp_path / "sample")
    chroot = zk_load_dump(sample.dump)
    state_dir = tmp_path / "state"
    config = write_config(tmp_path, sample, f"zk://{zookeeper.connect_string}{chroot}/ledgers",
                          period_days=2 / 86400)  # a pass every two seconds
    agent = AgentProcess(config, state_dir, tmp_path / "agent.err").start()

    def drop_ledger(ledger_id: int) -> None:
        zk_client.delete(ledger_path(LedgerManager.HIERARCHICAL, f"{chroot}/ledgers", ledger_id))

    def passes() -> int:
        return agent.scanner()["passes_completed"]

    try:
        agent.wait_ready()
        wait_for(lambda: passes() >= 1, 60, "no pass finished")
        damage = {category: 1 for category in EXPECTED} | {"damaged_entry_log": 2}
        assert agent.health()["findings"] == damage
        assert cli(config, "status").returncode == 1

        # Ledger 2 deleted, then named a suspect: its corrupt entry ends now, not a pass later.
        drop_ledger(2)
        assert agent.post_suspect({"ledger": 2})["queued"] == 1
        wait_for(lambda: "corrupt_entry" not in agent.health()["findings"], 30, "the suspect's scan did not end it")

        # The rest: ledgers 3, 5 and 6 deleted, and ledger 6's index and entry log 1 (only ledger 6's) collected as
        # GC would (BookKeeper's GarbageCollectorThread deletes a deleted ledger's index, then the logs it alone used).
        for ledger_id in (3, 5, 6):
            drop_ledger(ledger_id)
        (sample.ledger_dir / "current" / index_file_path(6)).unlink()
        (sample.ledger_dir / "current" / "1.log").unlink()
        seen = passes()
        wait_for(lambda: passes() >= seen + 2, 60, "no pass began and ended after the repair")
        health = agent.health()
        assert health["findings"] == {"orphan_ledger": 4}  # 9 as before, and the deleted 2, 3, 5 (6 is all gone)
        assert health["findings_ended_since_start"] == {c: n for c, n in damage.items() if c != "orphan_ledger"}
        assert not re.search(r'^bookie_scanner_findings\{[^}]*category="(?!orphan_ledger)[^"]*"\} [1-9]',
                             agent.metrics(), re.M)  # what the damage alert sums
        status = cli(config, "status")
        assert status.returncode == 0 and status.stdout.splitlines()[0].endswith(": HEALTHY")
        assert agent.terminate() == 0
        agent.start().wait_ready()  # what ended stays ended
        assert agent.health()["findings"] == {"orphan_ledger": 4}
        assert agent.terminate() == 0
    finally:
        if agent.process.poll() is None:
            agent.kill()
    ended = {(line["category"], line["ledger_id"]): line["why"] for line in history(state_dir)}
    assert ended[("corrupt_entry", 2)] == "not found again by a scan of suspect ledger 2"
    assert re.fullmatch(r"not found again by pass \d+", ended[("missing_ledger", 3)])
    assert set(ended) == {("corrupt_entry", 2), ("missing_ledger", 3), ("missing_entry", 5), ("lost_entry", 6),
                          ("damaged_entry_log", None), ("damaged_entry_log", 6)}
    assert {e["finding"]["category"] for e in book_entries(state_dir)} == {"orphan_ledger"}


def test_the_repair_follow_up_ends_a_ledgers_findings_everywhere_and_keeps_its_own_until_then(
        tmp_path, zookeeper, zk_client, zk_load_dump):
    sample = build_sample(tmp_path / "sample")
    root = f"{zk_load_dump(sample.dump)}/ledgers"
    metadata = CachedMetadata(open_metadata(f"zk://{zookeeper.connect_string}{root}"))
    (tmp_path / "state").mkdir()
    book = FindingBook(tmp_path / "state", [DIR_A, DIR_B])
    try:
        marking = Marking(metadata, book, SAMPLE_BOOKIE, tmp_path / "state", None, ledger_dirs=[DIR_A, DIR_B],
                          rereplicate=False)
        damage = missing(5, 11, 12)  # what the sample's ledger 5 lacks here
        book.record(DIR_B, [damage])
        assert marking.file_pending() == 1 and book.awaiting_marks() == []

        # A worker cleared the mark, the damage is still there: the follow-up's own finding, in ledger 5's dir.
        zk_client.delete(mark_path(root, 5))
        marking.follow_up(lambda ledger_id: [damage])
        assert {(e.key.ledger_dir, e.key.category) for e in book.open_findings()} == {
            (DIR_B, Category.MISSING_ENTRY), (DIR_B, Category.UNREPAIRED)}
        book.begin_pass(DIR_B)
        book.record(DIR_B, [damage])
        book.end_pass(DIR_B, "not found again by pass 2")  # a pass does not end the follow-up's word
        assert book.counts() == {"missing_entry": 1, "unrepaired": 1}

        # The ledger deleted: the follow-up ends, and with it every finding of the ledger it followed.
        zk_client.delete(mark_path(root, 5))
        zk_client.delete(ledger_path(LedgerManager.HIERARCHICAL, root, 5))
        marking.follow_up(lambda ledger_id: [damage])
        assert book.counts() == {}
        assert {line["why"] for line in history(tmp_path / "state")} == {"repair follow-up: ledger deleted"}
    finally:
        book.close()
        metadata.close()


def test_damage_opened_is_a_warning_an_orphan_ledger_only_information(book, caplog):
    orphan = Finding(Category.ORPHAN_LEDGER, 77, None, None, None, "data of a ledger the metadata no longer has")
    with caplog.at_level("INFO", logger="scanner.agent.findingbook"):
        book.record(DIR_A, [corrupt(7, 3), orphan])
    levels = {record.getMessage().split(":")[1].strip(): record.levelname for record in caplog.records}
    assert levels == {"corrupt_entry ledger 7 entry log 0": "WARNING", "orphan_ledger ledger 77": "INFO"}


def test_the_spread_of_open_damage_counts_distinct_ledgers_and_entry_logs_per_ledger_dir(book):
    # What the failed-disk breaker weighs every follow-up cycle: counted in the database, as reading them would.
    from scanner.agent.marking import DISK_DAMAGE, REREPLICATED

    assert book.spread(REREPLICATED, DISK_DAMAGE) == (0, 0)
    book.record(DIR_A, [corrupt(7, 1, entry_log=3), corrupt(7, 2, entry_log=3), corrupt(8, 1, entry_log=4)])
    book.record(DIR_B, [corrupt(9, 1, entry_log=3), missing(10, 0, 4)])
    book.record(DIR_B, [Finding(Category.ORPHAN_LEDGER, 11, (), 5, None, "not in the metadata")])
    ledgers, logs = book.spread(REREPLICATED, DISK_DAMAGE)
    expected_ledgers = {f.ledger_id for f in book.findings() if f.category.needs_rereplication}
    expected_logs = {(e.key.ledger_dir, e.finding.entry_log) for e in book.open_findings()
                     if e.finding.category in DISK_DAMAGE and e.finding.entry_log is not None}
    assert (ledgers, logs) == (len(expected_ledgers), len(expected_logs)) == (4, 3)
    book.end_ledger(7, REREPLICATED, "moved")
    assert book.spread(REREPLICATED, DISK_DAMAGE) == (3, 2)
