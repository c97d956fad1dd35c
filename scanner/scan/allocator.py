"""The process's allocators told to give freed buffers back, so a pass does not keep what its busiest moment took.

A pass allocates and frees megabyte buffers over and over (index batches, sorted runs, windows of locations,
`.idx` chunks, the ledger table's sort). Two allocators would keep them:

- glibc's malloc raises its mmap threshold each time a block above it is freed (up to 32 MiB): after the first
  big buffer is freed, the rest come from the heap, where the holes they leave stay part of the process.
  Fixed at its initial value, the threshold keeps such buffers in mappings of their own, unmapped when freed.
- pyarrow's default pool (mimalloc or jemalloc) keeps freed pages for reuse until it next runs: after the
  ledger table's sort, tens of MB at a million ledgers, into the walk. Its system pool is glibc's malloc.
"""

from __future__ import annotations

import ctypes
import os

_M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h
_MMAP_THRESHOLD = 128 << 10  # glibc's initial value
_ARROW_POOL = "ARROW_DEFAULT_MEMORY_POOL"  # read by pyarrow when it first needs its default pool


def give_back_freed_buffers() -> None:
    """Set up this process (before its first pass) so that freed buffers leave it at once.

    Where the C library is not glibc, only pyarrow's pool is changed. A pool named in the environment is kept.
    """
    os.environ.setdefault(_ARROW_POOL, "system")
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc's own: other C libraries' mallopt differ or are absent
        mallopt = libc.mallopt
    except (AttributeError, OSError):
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
