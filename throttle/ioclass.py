"""Giving way to the bookie's own I/O: the idle I/O scheduling class (``ionice -c 3``), from Python.

Linux has no C library wrapper for ``ioprio_set``/``ioprio_get``; they are called by number. The
class applies to the calling thread and to the threads and processes it starts afterwards (and it
survives ``exec``), so it is set first thing in a command, before any helper thread or process.
"""

from __future__ import annotations

import ctypes
import os
import platform

# (ioprio_set, ioprio_get) by machine, from the kernel's syscall tables.
_SYSCALLS = {"x86_64": (251, 252), "aarch64": (30, 31), "riscv64": (30, 31), "i386": (289, 290), "i686": (289, 290),
             "armv7l": (314, 315), "ppc64le": (273, 274), "s390x": (282, 283)}
_WHO_PROCESS = 1  # "who" is a thread id; 0: the calling thread
_CLASS_SHIFT = 13
_CLASSES = {0: "none", 1: "realtime", 2: "best-effort", 3: "idle"}
IDLE = 3


def use_idle_io_class() -> str | None:
    """Put the calling thread in the idle I/O class; None when done, else why not (one line)."""
    calls = _SYSCALLS.get(platform.machine())
    if calls is None:
        return f"ioprio_set is not known on {platform.machine()}"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(calls[0], _WHO_PROCESS, 0, IDLE << _CLASS_SHIFT) != 0:
        return f"ioprio_set: {os.strerror(ctypes.get_errno())}"
    return None


def io_class() -> str:
    """The calling thread's I/O scheduling class: ``"none"`` (the default), ``"best-effort"``, ``"idle"``..."""
    calls = _SYSCALLS.get(platform.machine())
    if calls is None:
        return "unknown"
    value = ctypes.CDLL(None, use_errno=True).syscall(calls[1], _WHO_PROCESS, 0)
    return "unknown" if value < 0 else _CLASSES.get(value >> _CLASS_SHIFT, "unknown")
