"""A CPU budget for a group of processes, as a host of its own would give them: a cgroup with a CPU quota.

``with CpuBudget("worker0", 0.8) as budget:`` makes a cgroup whose members together get at most 0.8 of a CPU
over each 100 ms period; a process joins it by calling ``budget.join()`` (e.g. as a ``preexec_fn``), and everything
it starts inherits the group. Leaving the block removes the cgroup (its members must have ended by then).
Needs write access to the cgroup filesystem (root): cgroup v2's ``cpu.max`` or cgroup v1's ``cpu`` controller.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

PERIOD_US = 100_000
CGROUPS = Path("/sys/fs/cgroup")


class CpuBudgetError(RuntimeError):
    """No cgroup CPU controller this process may write to."""


class CpuBudget:
    def __init__(self, name: str, cpus: float):
        if not 0 < cpus <= os.cpu_count():
            raise ValueError(f"a CPU budget must be above 0 and at most {os.cpu_count()} CPUs, not {cpus}")
        self.quota_us = round(cpus * PERIOD_US)
        unified = "cpu" in _read(CGROUPS / "cgroup.controllers").split()
        parent = CGROUPS if unified else CGROUPS / "cpu"
        if not os.access(parent, os.W_OK) or not (unified or (parent / "cpu.cfs_quota_us").exists()):
            raise CpuBudgetError(f"a CPU budget needs a writable cgroup CPU controller (root), none at {parent}")
        self.unified = unified
        self.path = parent / f"{name}-{os.getpid()}"

    def __enter__(self) -> CpuBudget:
        self.path.mkdir()
        try:
            if self.unified:
                control = self.path.parent / "cgroup.subtree_control"
                if "cpu" not in control.read_text().split():
                    control.write_text("+cpu")
                (self.path / "cpu.max").write_text(f"{self.quota_us} {PERIOD_US}")
            else:
                (self.path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (self.path / "cpu.cfs_quota_us").write_text(str(self.quota_us))
        except BaseException:
            self.path.rmdir()
            raise
        return self

    def join(self) -> None:
        """Put the calling process in the group."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def members(self) -> list[int]:
        return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]

    def __exit__(self, *exc_info) -> None:
        """Remove the group once its members have ended; members still there after 30 s are killed."""
        deadline = time.monotonic() + 30
        while self.members() and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in self.members():
            os.kill(pid, signal.SIGKILL)
        while self.members():
            time.sleep(0.05)
        self.path.rmdir()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
