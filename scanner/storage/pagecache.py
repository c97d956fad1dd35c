"""Reading a bookie's files as a guest of its page cache: fetch ahead of the walk, drop behind what we brought in.

The bookie's hot data (the log it is writing, entries its readers tail) sits in the page cache; a
scan that read terabytes through it would push all of that out. So whatever this reader brings
in from disk is dropped again (``POSIX_FADV_DONTNEED``) once the walk is past it, as HDFS's block
scanner drops behind, and what the bookie had cached is left alone.

Telling the two apart: every range is asked of the disk before it is read
(``POSIX_FADV_WILLNEED``, which reads what is missing of it and nothing else), and the kernel's
count of this thread's reads from disk (``getrusage``'s blocks in) says what that brought in:
nothing (all of it was cached: the bookie's), or something (ours, all of the range: so pages of the
bookie's in a range that was partly missing are dropped with it). A walk asks piece by piece,
``ASK_SIZE`` at a time (that cost is bounded by a piece at each edge of a stretch the bookie has
cached), and ahead of itself, so the disk fetches while the walk verifies.

Reading without setting the kernel's read-ahead going, which would bring in megabytes nobody
counts: it is off for this reader's descriptor (``POSIX_FADV_RANDOM``; the bookie's descriptors
keep theirs), but a read that passes a cached page carrying the read-ahead mark (left by whoever
read the file before: the bookie's own readers) starts the kernel's read-ahead past it all the
same, even a non-blocking read (Linux 6.18 here). That read-ahead reads only what is missing within
its reach (the device's read-ahead size) past the mark, and never past the end of the file. So a
walk keeps everything up to that reach past where it reads asked for (and counted) first; a read on
its own (one record, a header, an index file) asks for the rest of the file too when little is left
of it (``CHUNK_SIZE`` at most), and else is copied out of a mapping of the file, where a page fault
never reads ahead (:mod:`.mapped_copy`). (An unprivileged reader
cannot ask the page cache otherwise: ``mincore`` and ``cachestat`` answer only a file's owner or
writers, and the agent runs as a user of its own.)
"""

from __future__ import annotations

import os
import resource

from .mapped_copy import copy_out_of_mapping

CHUNK_SIZE = 1 << 20  # a record larger than this gets a read of its own size
ASK_SIZE = 256 << 10  # a walk asks the disk for this much at a time, each piece counted ours or not on its own
PREFETCH = 2 * CHUNK_SIZE  # the least a walk keeps asked ahead of itself, so the disk is busy while it verifies
_PAGE = os.sysconf("SC_PAGE_SIZE")
_READS_COUNTED = os.path.exists("/proc/self/io")  # the kernel keeps each task's count of bytes read from disk
_UNKNOWN_READ_AHEAD = 16 << 20  # a device whose read-ahead size is not to be found: assume a large one
_read_ahead_sizes: dict[int, int] = {}


class PageCacheGuest:
    """Reads of one open file (``fd``, owned by the caller, read mostly front to back) that leave the page cache
    as found."""

    __slots__ = ("fd", "_ours", "_asked_from", "_asked_to", "_reach")

    def __init__(self, fd: int):
        self.fd = fd
        self._ours: list[tuple[int, int]] = []  # ranges this reader brought in, not yet dropped
        self._asked_from = self._asked_to = 0  # the stretch asked of the disk and not yet let go of
        self._reach = 0  # how far ahead of a walk's read everything must be asked (known at its first read)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no kernel read-ahead on our descriptor
        except OSError:
            pass

    def read(self, offset: int, length: int, ahead: bool = False, into: bytearray | None = None) -> memoryview:
        """``length`` bytes from ``offset`` (fewer only at the end of the file), in a buffer of their own, or in
        ``into`` when it is large enough (a walk reuses one buffer: a fresh megabyte each time is page faults).

        ``ahead``: a walk goes on from here, so keep what it comes to next asked of the disk (a read on its own,
        of one record, must not cost megabytes of disk reads: it asks for at most ``CHUNK_SIZE`` more).
        """
        view = memoryview(into if into is not None and len(into) >= length else bytearray(length))[:length]
        end = offset + length
        size = os.fstat(self.fd).st_size
        if ahead:
            self._ask_ahead_of_walk(offset, end, size)
            return view[:self._read_plainly(view, offset)]
        if size - end > CHUNK_SIZE:  # a read-ahead started past this range could bring in what nobody counts
            self._ask_once(offset, end)
            copied = copy_out_of_mapping(self.fd, view, offset, size)
            if copied is not None:
                return view[:copied]
        else:
            self._ask_once(offset, size)  # the rest of the file, little: then a read-ahead has nothing left to read
        return view[:self._read_plainly(view, offset)]

    def fetch_ahead(self, length: int) -> None:
        """Before the first read of a small file the walk will come to soon: have the disk fetch its first
        ``length`` bytes now (counted ours if that brings anything in)."""
        self._ask_once(0, length)

    def _ask_ahead_of_walk(self, offset: int, end: int, size: int) -> None:
        """Before a walk reads [offset, end) of a file of ``size`` bytes: everything from there to a read-ahead's
        reach past it (or to the end of the file) asked of the disk, piece by piece, so a read-ahead mark the read
        passes finds nothing missing to read."""
        if not self._reach:
            self._reach = max(PREFETCH, _read_ahead_size(self.fd))
        self._ask_once(offset, max(end, min(end + max(self._reach, end - offset), size)), ASK_SIZE)

    def _ask_once(self, start: int, end: int, piece: int = 0) -> None:
        """``_ask`` but for what was asked already and not let go of since: the stretch asked goes on from
        ``start``, or a new one starts there (the first read, or one elsewhere)."""
        end = -(-end // _PAGE) * _PAGE
        if not self._asked_from <= start <= self._asked_to:
            self._asked_from = self._asked_to = start // _PAGE * _PAGE
        if end > self._asked_to:
            self._ask(self._asked_to, end, piece)
            self._asked_to = end

    def _ask(self, start: int, end: int, piece: int = 0) -> None:
        """Have the disk fetch what is missing of [start, end) (whole pages, ``end`` past ``start``), in pieces of
        ``piece`` bytes (0: at once); each piece that brought anything in is counted ours, a piece that brought
        nothing in was all cached: the bookie's."""
        fd, ours, step = self.fd, self._ours, piece or end - start
        blocks = _blocks_read()
        for at in range(start, end, step):
            upto = min(at + step, end)
            try:
                os.posix_fadvise(fd, at, upto - at, os.POSIX_FADV_WILLNEED)
            except OSError:  # then the read that follows fetches it: counted ours, as nothing says otherwise
                ours.append((at, upto))
                continue
            now = _blocks_read()
            if now != blocks or not _READS_COUNTED:
                ours.append((at, upto))
                blocks = now

    def _read_plainly(self, view: memoryview, offset: int) -> int:
        got = 0
        while got < len(view):
            n = os.preadv(self.fd, [view[got:]], offset + got)
            if n == 0:
                break
            got += n
        return got

    def release(self, upto: int) -> None:
        """Drop from the page cache what this reader brought in below ``upto`` (the walk is past it)."""
        cut = upto // _PAGE * _PAGE  # the page the walk is in stays until it is past it
        self._asked_from = max(self._asked_from, cut)
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
        self._asked_from = self._asked_to = 0


def _blocks_read() -> int:
    """This thread's reads from disk so far, in blocks (a read-ahead it asks for is counted when it is asked)."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_inblock


def _read_ahead_size(fd: int) -> int:
    """The kernel's read-ahead size for the device the file is on, in bytes (its block queue's, or the backing
    device's when it has no queue of its own: device-mapper, a partition's disk)."""
    device = os.fstat(fd).st_dev
    if device not in _read_ahead_sizes:
        number = f"{os.major(device)}:{os.minor(device)}"
        block = os.path.realpath(f"/sys/dev/block/{number}")
        size = _UNKNOWN_READ_AHEAD
        for path in (f"/sys/class/bdi/{number}/read_ahead_kb", f"{block}/queue/read_ahead_kb",
                     f"{os.path.dirname(block)}/queue/read_ahead_kb"):
            try:
                with open(path) as sysfs:
                    size = int(sysfs.read()) * 1024
                break
            except (OSError, ValueError):
                continue
        _read_ahead_sizes[device] = size
    return _read_ahead_sizes[device]


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
