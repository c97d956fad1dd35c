"""What of a file sits in the page cache: mincore(2) on a mapping that is never touched.

Tests own the files they ask about, and mincore answers a file's owner (to others it may claim
every page is cached).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_MAP_FAILED = ctypes.c_void_p(-1).value


def cached_pages(path: Path) -> tuple[int, int]:
    """(pages of the file in the page cache, pages of the file)."""
    cached, pages = cached_page_numbers(path)
    return len(cached), pages


def cached_page_numbers(path: Path) -> tuple[set[int], int]:
    """(which pages of the file are in the page cache, pages of the file)."""
    size = path.stat().st_size
    pages = -(-size // _PAGE)
    if not size:
        return set(), 0
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address == _MAP_FAILED:
            raise OSError(ctypes.get_errno(), f"mmap of {path}")
        try:
            vector = ctypes.create_string_buffer(pages)
            if _libc.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path}")
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)
    return {page for page, byte in enumerate(vector.raw) if byte & 1}, pages

