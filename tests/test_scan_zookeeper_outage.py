"""A one-shot scan (or export) rides out a ZooKeeper outage shorter than the session timeout: it says so on
stderr, waits, and ends with the findings a scan without the outage gives."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time

import pytest

from corpus import timeless
from scanner.metadata.uri import open_metadata
from test_agent_zookeeper_outage import ROOT, own_zookeeper  # noqa: F401 (the fixture)
from test_agent_service import wait_for
from test_exit_status import MAIN, REPO

pytestmark = pytest.mark.slow  # a ZooKeeper of its own, down for seconds on purpose


def scan(sample, connect: str, *options: str) -> tuple[int, str, str]:
    """The whole command in a process of its own: its stderr is what an operator sees."""
    done = subprocess.run([sys.executable, "-c", MAIN, "scan", "--bookie-conf", str(sample.bookie_conf),
                           "--metadata", f"zk://{connect}{ROOT}", "--format", "json", *options],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


class ThreadOf(threading.Thread):
    """``target`` run in a thread started at once; :meth:`join` waits for it and raises what it raised."""

    def __init__(self, target):
        super().__init__(target=self._run_catching, args=(target,), daemon=True)
        self.raised: BaseException | None = None
        self.start()

    def _run_catching(self, target) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 (handed to the joining thread)
            self.raised = exc

    def join(self, timeout: float = 90) -> None:
        super().join(timeout)
        assert not self.is_alive(), f"{self.name} did not end within {timeout:g}s"
        if self.raised is not None:
            raise self.raised


def test_a_scan_waits_for_zookeeper_through_an_outage_and_keeps_its_work(own_zookeeper):  # noqa: F811
    server, _, sample = own_zookeeper()
    status, report, err = scan(sample, server.connect_string, "--full-speed")
    assert status == 1 and err == ""

    # About 50 KB of entry logs at 5000 B/s: a walk of ~10 s. ZooKeeper goes away from second 3 to second 15
    # (within the 30 s session timeout), so the reads at the end of the pass (confirming what the walk found,
    # naming the ledgers) meet it down and wait.
    coming_back_at = []

    def outage():
        time.sleep(3)
        server.stop()
        time.sleep(12)
        coming_back_at.append(time.monotonic())
        server.restart()

    down = ThreadOf(outage)
    try:
        status_through, report_through, err_through = scan(sample, server.connect_string, "--rate", "5000")
        ended_at = time.monotonic()
    finally:
        down.join()
    assert status_through == status, err_through
    assert ended_at > coming_back_at[0], "the scan ended before ZooKeeper came back"
    assert timeless(json.loads(report_through))["findings"] == timeless(json.loads(report))["findings"]
    lost, back = err_through.splitlines()
    assert lost == (f"ZooKeeper {server.connect_string}: connection lost; reads wait up to 30s for it to come back "
                    "(what was done so far is kept)")
    waited = re.fullmatch(f"ZooKeeper {re.escape(server.connect_string)}: connected again after ([0-9]+)s", back)
    assert waited and int(waited[1]) >= 10, back  # the 12 s ZooKeeper was away (less what its stop took)


def test_reads_in_flight_when_zookeeper_goes_away_wait_for_it_instead_of_failing(own_zookeeper):  # noqa: F811
    server, _, _ = own_zookeeper()
    # Reading all the time: some reads are in flight when the server stops (before, those failed at once
    # with ConnectionLoss, and a scan or an export died with them).
    with open_metadata(f"zk://{server.connect_string}{ROOT}") as store:
        ledger_ids = list(store.ledger_ids())
        expected = store.ledger_batch(ledger_ids)
        stop = threading.Event()
        reads = []

        def read_all_the_time():
            while not stop.is_set():
                reads.append(store.ledger_batch(ledger_ids))

        reader = ThreadOf(read_all_the_time)
        try:
            wait_for(lambda: len(reads) >= 20 or not reader.is_alive(), 30, "no reads")
            server.stop()
            time.sleep(8)
            server.restart()
            before = len(reads)
            wait_for(lambda: len(reads) > before + 20 or not reader.is_alive(), 60, "reads did not resume")
        finally:
            stop.set()
            reader.join()  # raises what the reader raised
        assert len(reads) > before + 20
        assert all(read == expected for read in reads)

