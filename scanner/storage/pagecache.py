"""Reading a bookie's files as a guest of its page cache: drop behind what we brought in.

The bookie's hot data (the log it is writing, entries its readers tail) sits in the page cache; a
scan that read terabytes through it would push all of that out. So before each chunk is read, a
non-blocking read (``RWF_NOWAIT``) tells whether the chunk was already cached: a cached chunk was
someone else's and is left alone, a chunk this scan had to fetch from disk is dropped again
(``POSIX_FADV_DONTNEED``) once the walk is past it, as HDFS's block scanner drops behind.

Read-ahead is the kernel's own: it detects the sequential walk and reads ahead asynchronously
while the walk verifies. ``POSIX_FADV_SEQUENTIAL`` (a doubled window) made cold walks slower, not
faster, on the machine the benchmarks ran on, so it is not used.
"""

from __future__ import annotations

import os

CHUNK_SIZE = 1 << 20  # a record larger than this gets a read of its own size
_PAGE = os.sysconf("SC_PAGE_SIZE")
_NOWAIT = getattr(os, "RWF_NOWAIT", None)


class PageCacheGuest:
    """Chunked sequential reads of one open file (``fd``, owned by the caller) that leave the page cache as found."""

    __slots__ = ("fd", "drop_behind", "_cold", "_nowait")

    def __init__(self, fd: int, drop_behind: bool = True):
        self.fd = fd
        self.drop_behind = drop_behind
        self._cold: list[tuple[int, int]] = []  # ranges this reader fetched from disk, not yet dropped
        self._nowait = _NOWAIT is not None

    def read(self, offset: int, length: int) -> memoryview:
        """``length`` bytes from ``offset`` (fewer only at the end of the file), in a buffer of their own."""
        buffer = bytearray(length)
        view = memoryview(buffer)
        cached = self._read_cached(view, offset)
        got = cached
        while got < length:
            n = os.preadv(self.fd, [view[got:]], offset + got)
            if n == 0:
                break
            got += n
        if got > cached and self.drop_behind:
            # A chunk only partly cached (read-ahead of our previous chunk reaches into it) counts as ours whole.
            self._cold.append((offset, offset + got))
        return view[:got]

    def _read_cached(self, view: memoryview, offset: int) -> int:
        """How much of the range is already in the page cache (read into ``view`` without touching the disk)."""
        if not self._nowait:
            return 0
        try:
            return os.preadv(self.fd, [view], offset, _NOWAIT)
        except BlockingIOError:
            return 0
        except OSError:  # a filesystem without non-blocking reads: treat every chunk as fetched by us
            self._nowait = False
            return 0

    def release(self, upto: int) -> None:
        """Drop from the page cache what this reader fetched below ``upto`` (the walk is past it)."""
        keep = []
        for start, end in self._cold:
            if end <= upto:
                _drop(self.fd, start, end)
            elif start < upto:
                _drop(self.fd, start, upto)
                keep.append((upto, end))
            else:
                keep.append((start, end))
        self._cold = keep

    def release_all(self) -> None:
        for start, end in self._cold:
            _drop(self.fd, start, end)
        self._cold = []


def _drop(fd: int, start: int, end: int) -> None:
    first = -(-start // _PAGE) * _PAGE  # whole pages only: a page shared with a cached neighbour stays
    last = end // _PAGE * _PAGE
    if last > first:
        try:
            os.posix_fadvise(fd, first, last - first, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
