"""The C allocator's set-up: freed buffers go back to the system, so a pass does not keep its busiest moment."""

from __future__ import annotations

import subprocess
import sys

import pytest

# In a fresh interpreter: free a 16 MiB block (glibc then raises its mmap threshold to it), allocate 64 blocks of
# 1 MiB and one above them, free the 64, and print how many MiB of anonymous memory the process still holds.
PROBE = """
import sys
from scanner import allocator
if sys.argv[1] == "keep":
    assert allocator.keep_mmap_threshold()
def anon_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))
big = b"x" * (16 << 20)
del big
before = anon_kib()
blocks = [b"y" * (1 << 20) for _ in range(64)]
last = b"z" * (1 << 20)
del blocks
print((anon_kib() - before) // 1024)
"""


def held_mib(mode: str) -> int:
    return int(subprocess.run([sys.executable, "-c", PROBE, mode], check=True, capture_output=True, text=True).stdout)


def test_freed_megabyte_buffers_are_given_back_once_the_threshold_is_kept():
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc")
    if held_mib("default") < 32:
        pytest.skip("this C library gives freed heap blocks back by itself")
    assert held_mib("keep") <= 4  # the block still in use, not the 64 freed
