"""`scan` beside a live bookie gives way by default (a rate, the idle I/O class, nice 10); --full-speed does not."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scanner.cli import build_parser, main
from scanner.sample.sample_cluster import build_sample
from test_exit_status import REPO
from throttle import io_class

# The scan in a process of its own (it changes the priorities of the process it runs in), then what it left.
PROBE = ("import os, sys; from scanner.cli import main; from throttle import io_class; status = main(sys.argv[1:]); "
         "print('probe', status, io_class(), os.getpriority(os.PRIO_PROCESS, 0))")


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return build_sample(tmp_path_factory.mktemp("guest") / "sample")


def probe(sample, *options: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, "scan", *options, "--bookie-conf", str(sample.bookie_conf),
                           "--metadata", f"file:{sample.dump}"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.stderr == ""
    return done.stdout.splitlines()[-1].split()[1:]


def test_a_scan_reads_at_idle_io_priority_and_nice_10_by_default(sample):
    niceness = os.getpriority(os.PRIO_PROCESS, 0)
    assert probe(sample) == ["1", "idle", str(max(10, niceness))]


def test_full_speed_keeps_the_priorities_it_was_given(sample):
    assert probe(sample, "--full-speed") == ["1", io_class(), str(os.getpriority(os.PRIO_PROCESS, 0))]


def test_the_default_rate_is_the_agents_and_rates_take_units():
    def rate(*options: str):
        return build_parser().parse_args(["scan", "--ledger-dirs", "d", *options]).rate

    assert rate() == 50_000_000
    assert [rate("--rate", text) for text in ("20M", "20MB/s", "20 MB/s", "20000000", "1MiB")] == [
        20_000_000, 20_000_000, 20_000_000, 20_000_000, 1_048_576]


@pytest.mark.parametrize("options, message", [
    (["--rate", "50M", "--full-speed"], "not allowed with argument"),
    (["--rate", "0"], "at least 1 byte per second"),
    (["--rate", "fast"], "expected a number"),
    (["--rate", "50 entries"], "expected a number"),
])
def test_a_bad_rate_is_one_line_and_exit_2(options, message, capsys):
    assert main(["scan", "--ledger-dirs", "d", *options]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert message in line
