"""Reading a bookie's files as a guest of its page cache: prefetch ahead of the walk, drop behind what we brought in.

The bookie's hot data (the log it is writing, entries its readers tail) sits in the page cache; a
scan that read terabytes through it would push all of that out. So whatever this reader brings
in from disk is dropped again (``POSIX_FADV_DONTNEED``) once the walk is past it, as HDFS's block
scanner drops behind, and what the bookie had cached is left alone.

Telling the two apart: before a range is read, a non-blocking read (``RWF_NOWAIT``) says whether
it is cached already. That answer is only worth something if nothing of ours has touched the
range yet, and the kernel's read-ahead would: it reads far ahead of a sequential reader (megabytes),
so every later chunk would look cached and stay. So the reader turns the kernel's read-ahead off
for its own file descriptor (``POSIX_FADV_RANDOM``; the bookie's descriptors keep theirs) and
reads ahead itself: while it reads from disk, it asks for the next ``PREFETCH`` bytes
(``POSIX_FADV_WILLNEED``), which the disk fetches while the walk verifies, and counts them as its
own. A range it prefetched is not probed again; a chunk met in a cached stretch is probed, and left
alone when it was all cached. Only a walk prefetches: a random read of one record reads just that.
Small files read one after another (``.idx``) are asked for a window of files ahead, each first
probed the same way (``fetch_ahead``): the disk then fetches many at once. (An unprivileged reader
cannot ask the page cache otherwise: ``mincore`` and ``cachestat`` answer only a file's owner or
writers, and the agent runs as a user of its own.)

Where a stretch fetched from disk runs into one the bookie had cached, the prefetch may count up
to ``PREFETCH`` bytes of the bookie's pages as ours and drop them: a bounded cost at a boundary.
"""

from __future__ import annotations

import os

CHUNK_SIZE = 1 << 20  # a record larger than this gets a read of its own size
PREFETCH = 2 * CHUNK_SIZE  # how far ahead of the walk the disk is kept busy while reading from it
_PAGE = os.sysconf("SC_PAGE_SIZE")
_NOWAIT = getattr(os, "RWF_NOWAIT", None)


class PageCacheGuest:
    """Reads of one open file (``fd``, owned by the caller, read mostly front to back) that leave the page cache
    as found."""

    __slots__ = ("fd", "_ours", "_nowait", "_stretch_from", "_stretch_to")

    def __init__(self, fd: int):
        self.fd = fd
        self._ours: list[tuple[int, int]] = []  # ranges this reader brought in, not yet dropped
        self._nowait = _NOWAIT is not None
        # The stretch being fetched from disk: what was read cold and what is prefetched after it.
        self._stretch_from = self._stretch_to = 0
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no kernel read-ahead on our descriptor
        except OSError:
            pass

    def read(self, offset: int, length: int, ahead: bool = False, into: bytearray | None = None) -> memoryview:
        """``length`` bytes from ``offset`` (fewer only at the end of the file), in a buffer of their own, or in
        ``into`` when it is large enough (a walk reuses one buffer: a fresh megabyte each time is page faults).

        ``ahead``: the walk goes on from here, so while reading from disk keep the next ``PREFETCH`` bytes
        coming (a random read of one record must not cost megabytes of disk reads).
        """
        view = memoryview(into if into is not None and len(into) >= length else bytearray(length))[:length]
        ours = self._stretch_from <= offset < self._stretch_to
        cached = 0 if ours else self._read_cached(view, offset)
        got = cached
        while got < length:
            n = os.preadv(self.fd, [view[got:]], offset + got)
            if n == 0:
                break
            got += n
        if ours or got > cached:  # fetched (at least partly) from disk: ours whole, to the file's end if it ended here
            if not self._stretch_from <= offset <= self._stretch_to:
                self._stretch_from = offset  # a new stretch (the walk crossed one the bookie had cached)
            # Every page the read touched came from disk or was cached with it: ours whole.
            self._ours.append((offset // _PAGE * _PAGE, -(-(offset + max(got, 1)) // _PAGE) * _PAGE))
            if ahead:
                self._prefetch(max(self._stretch_to, offset + got), offset + got + PREFETCH)
        return view[:got]

    def fetch_ahead(self, length: int) -> None:
        """Before the first read of a small file the walk will come to soon: have the disk fetch its first
        ``length`` bytes now, unless the bookie has them cached (their first page is). Counted as ours."""
        if not self._read_cached(memoryview(bytearray(1)), 0):
            self._prefetch(0, length)

    def _prefetch(self, start: int, end: int) -> None:
        """Have the disk fetch [start, end) while the walk verifies what it has; counted as ours."""
        if end <= start:
            return
        start = start // _PAGE * _PAGE
        try:
            os.posix_fadvise(self.fd, start, end - start, os.POSIX_FADV_WILLNEED)
        except OSError:
            return
        self._ours.append((start, end))
        self._stretch_to = end

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
        """Drop from the page cache what this reader brought in below ``upto`` (the walk is past it)."""
        cut = upto // _PAGE * _PAGE  # the page the walk is in stays until it is past it
        keep = []
        for start, end in _merged(self._ours):
            if end <= cut:
                _drop(self.fd, start, end)
            elif start < cut:
                _drop(self.fd, start, cut)
                keep.append((cut, end))
            else:
                keep.append((start, end))
        self._ours = keep

    def release_all(self) -> None:
        for start, end in _merged(self._ours):
            _drop(self.fd, start, end)
        self._ours = []


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges sorted and joined where they touch: a page split between two of them is dropped too."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _drop(fd: int, start: int, end: int) -> None:
    if end > start:
        try:
            os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
