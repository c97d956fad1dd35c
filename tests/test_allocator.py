"""The process's allocators set up to give freed buffers back, so a pass does not keep its busiest moment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# In a fresh interpreter, set up or not: allocate 64 buffers of 1 MiB (and one more above them), free the 64,
# and print how many MiB of anonymous memory the process still holds.
PROBE = """
import sys
from scanner.scan import allocator
if sys.argv[1] == "set-up":
    allocator.give_back_freed_buffers()
def anon_mib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssAnon:")) // 1024
if sys.argv[2] == "malloc":
    big = b"x" * (16 << 20)
    del big  # glibc now serves blocks of up to 16 MiB from its heap, unless told otherwise
    before = anon_mib()
    blocks = [b"y" * (1 << 20) for _ in range(64)]
    last = b"z" * (1 << 20)  # above the others in the heap: the heap cannot shrink from its top
else:
    import pyarrow as pa
    before = anon_mib()
    blocks = [pa.allocate_buffer(1 << 20) for _ in range(64)]
    for block in blocks:
        memoryview(block).cast("B")[:] = b"y" * (1 << 20)
    last = block = None
del blocks
print(anon_mib() - before)
"""


def held_mib(set_up: bool, allocation: str) -> int:
    command = [sys.executable, "-c", PROBE, "set-up" if set_up else "as-is", allocation]
    as_is = {name: value for name, value in os.environ.items() if name != "ARROW_DEFAULT_MEMORY_POOL"}
    return int(subprocess.run(command, check=True, capture_output=True, text=True, env=as_is).stdout)


@pytest.mark.parametrize("allocation", ["malloc", "pyarrow"])
def test_freed_megabyte_buffers_leave_a_process_set_up(allocation):
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc")
    if held_mib(False, allocation) < 32:
        pytest.skip(f"this {allocation} gives freed buffers back by itself")
    assert held_mib(True, allocation) <= 4  # at most the buffer still in use, not the 64 freed
