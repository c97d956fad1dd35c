"""A one-shot scan (or export) rides out a ZooKeeper outage shorter than the session timeout: it says so on
stderr, waits, and ends with the findings a scan without the outage gives."""

from __future__ import annotations

import json
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


def test_a_scan_waits_for_zookeeper_through_an_outage_and_keeps_its_work(own_zookeeper):  # noqa: F811
    server, _, sample = own_zookeeper()
    status, report, err = scan(sample, server.connect_string, "--full-speed")
    assert status == 1 and err == ""

    # About 50 KB of entry logs at 2500 B/s: a walk of ~20 s. ZooKeeper goes away from second 8 to second 28
    # (within the 30 s session timeout), so the reads at the end of the pass (confirming what the walk found,
    # naming the ledgers) meet it down and wait.
    def outage():
        time.sleep(8)
        server.stop()
        time.sleep(20)
        server.restart()

    down = threading.Thread(target=outage)
    started = time.monotonic()
    down.start()
    try:
        status_through, report_through, err_through = scan(sample, server.connect_string, "--rate", "2500")
    finally:
        down.join()
    assert time.monotonic() - started > 28, "the scan ended before ZooKeeper came back"
    assert status_through == status, err_through
    assert timeless(json.loads(report_through))["findings"] == timeless(json.loads(report))["findings"]
    lost, back = err_through.splitlines()
    assert lost == (f"ZooKeeper {server.connect_string}: connection lost; reads wait up to 30s for it to come back "
                    "(what was done so far is kept)")
    assert back.startswith(f"ZooKeeper {server.connect_string}: connected again after ")


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

        reader = threading.Thread(target=read_all_the_time)
        reader.start()
        try:
            wait_for(lambda: len(reads) >= 20, 30, "no reads")
            server.stop()
            time.sleep(8)
            server.restart()
            before = len(reads)
            wait_for(lambda: len(reads) > before + 20 or not reader.is_alive(), 60, "reads did not resume")
        finally:
            stop.set()
            reader.join(60)
        assert len(reads) > before  # the reader did not die
        assert all(read == expected for read in reads)
