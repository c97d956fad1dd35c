"""A child process measured as a whole: its output, exit status, wall time, CPU time and peak RSS."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ChildRun:
    output: bytes
    exit_status: int
    seconds: float
    cpu_seconds: float  # user + system, the child's own (wait4): what a loaded machine's wall time hides
    peak_rss_mib: float  # the child's own high-water mark (wait4), not this process's
    error_tail: str  # the last line it wrote to stderr


def pinned_to(cpu: int | None):
    """A ``preexec_fn`` that pins the child to one CPU (None: no pinning)."""
    return None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))


def run_measured(command: list[str], cpu: int | None = None) -> ChildRun:
    """Run ``command`` (pinned to ``cpu`` if given) to its end; stdout is kept, stderr only its last line.

    The child may write bytecode, as an installed package has it: a shell that sets
    PYTHONDONTWRITEBYTECODE would otherwise charge every run with compiling the whole program.
    """
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, preexec_fn=pinned_to(cpu),
                                 env=environment)
        output = child.stdout.read()
        child.stdout.close()
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        tail = errors.read().decode(errors="replace").strip().splitlines()[-1:]
    return ChildRun(output, child.returncode, seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
                    " ".join(tail))
