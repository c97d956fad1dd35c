"""Exit statuses a script or systemd can tell apart: findings, usage, a crash, a reader that stopped reading."""

from __future__ import annotations

import configparser
import subprocess
import sys
from pathlib import Path

import scanner.commands.scan as scan_command
from scanner.cli import EXIT_BROKEN_PIPE, EXIT_CRASH, EXIT_USAGE, main
from scanner.sample.sample_cluster import build_sample

REPO = Path(__file__).resolve().parents[1]
MAIN = "import sys; from scanner.cli import main; sys.exit(main())"
UNIT = REPO / "systemd" / "bookie-scanner.service"


def test_an_unexpected_error_is_one_line_and_its_own_exit_status(monkeypatch, capsys):
    def bug(args):
        raise RuntimeError("something nobody foresaw\nsecond line")

    monkeypatch.setattr(scan_command, "run", bug)
    assert main(["scan", "--full-speed", "--ledger-dirs", "/nonexistent"]) == EXIT_CRASH
    captured = capsys.readouterr()
    assert captured.err == ("bookie-scanner scan: unexpected RuntimeError: something nobody foresaw "
                            "(run with --verbose for the traceback)\n")
    assert main(["--verbose", "scan", "--ledger-dirs", "/nonexistent"]) == EXIT_CRASH
    assert "Traceback" in capsys.readouterr().err


def test_exit_statuses_are_distinct():
    assert len({0, 1, EXIT_USAGE, EXIT_CRASH, EXIT_BROKEN_PIPE}) == 5


def test_a_reader_that_stops_reading_is_a_broken_pipe_not_a_clean_scan(tmp_path):
    sample = build_sample(tmp_path / "sample")
    read, write = subprocess.os.pipe()
    subprocess.os.close(read)  # the reader is gone before the report is written, as with `| head -1` on a long one
    done = subprocess.run([sys.executable, "-c", MAIN, "scan", "--bookie-conf", str(sample.bookie_conf),
                           "--metadata", f"file:{sample.dump}", "--format", "json"],
                          cwd=REPO, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    subprocess.os.close(write)
    assert done.returncode == EXIT_BROKEN_PIPE
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr


def test_the_unit_restarts_a_crash_and_not_a_configuration_error():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string(UNIT.read_text())
    service = unit["Service"]
    assert service["Restart"] == "on-failure"
    assert service["RestartPreventExitStatus"].split() == [str(EXIT_USAGE)]
