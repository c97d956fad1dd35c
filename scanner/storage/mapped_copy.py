"""Copying a range of a file out of a mapping of it that never sets the kernel's read-ahead going.

A read(2) that passes a cached page carrying the kernel's read-ahead mark starts an asynchronous
read-ahead past it (up to the device's read-ahead size), even on a descriptor advised
``POSIX_FADV_RANDOM``. A page fault in a mapping advised ``MADV_RANDOM`` does not: it waits for the
page it needs, reads that one page when it is missing, and leaves the mark where it is. The bytes
are copied out of the mapping by the kernel (``process_vm_readv`` on this process): a page that
is gone because the file was cut meanwhile ends the copy short, where touching it would be
``SIGBUS``.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os

_PAGE = os.sysconf("SC_PAGE_SIZE")


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_process_vm_readv = getattr(_libc, "process_vm_readv", None)
if _process_vm_readv is not None:
    _process_vm_readv.restype = ctypes.c_ssize_t
    _process_vm_readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec),
                                  ctypes.c_ulong, ctypes.c_ulong]
_MAP_FAILED = ctypes.c_void_p(-1).value
_refused = _process_vm_readv is None  # this system will not copy this way (then the caller reads plainly)


def copy_out_of_mapping(fd: int, view: memoryview, offset: int, size: int) -> int | None:
    """Bytes of the file (of ``size`` bytes) from ``offset`` copied into ``view`` (fewer at its end); None when this
    system refuses to map the file or to copy this way."""
    global _refused
    if _refused:
        return None
    length = min(len(view), size - offset)  # past the end of the file, a mapped page reads as zeros
    if length <= 0:
        return 0
    first = offset // _PAGE * _PAGE
    span = offset + length - first
    address = _libc.mmap(None, span, mmap.PROT_READ, mmap.MAP_SHARED, fd, first)
    if address == _MAP_FAILED:
        return None
    try:
        _libc.madvise(address, span, mmap.MADV_RANDOM)
        target = (ctypes.c_char * length).from_buffer(view)
        try:
            local = _IoVec(ctypes.addressof(target), length)
            remote = _IoVec(address + offset - first, length)
            copied = _process_vm_readv(os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        finally:
            del target
    finally:
        _libc.munmap(address, span)
    if copied >= 0:
        return copied
    if ctypes.get_errno() == errno.EFAULT:
        return 0  # its first page is gone: the file was cut before offset
    _refused = True  # not allowed here (a sandbox's system call filter, say)
    return None
