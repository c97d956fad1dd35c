"""The C allocator told to give freed buffers back, so a long pass does not keep what its busiest moment took.

glibc's malloc raises its mmap threshold each time a block above it is freed (up to 32 MiB). A pass allocates
and frees megabyte buffers over and over (index batches, sorted runs, windows of locations, `.idx` chunks):
after the first is freed, the rest come from the heap, where the holes they leave stay part of the process
and the next buffer may not fit in them. Fixed at its initial value, the threshold keeps such buffers in
mappings of their own, unmapped when freed. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes

_M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h
_MMAP_THRESHOLD = 128 << 10  # glibc's initial value


def keep_mmap_threshold() -> bool:
    """From now on, blocks of 128 KiB and more get mappings of their own; False where the C library is not glibc."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc's own: other C libraries' mallopt differ or are absent
        mallopt = libc.mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) == 1
