"""What a bookie has acknowledged but not yet flushed: its journal since the last mark.

A bookie acknowledges an entry once it is in the journal; its ledger storage (index, entry logs,
DbLedgerStorage's write cache) reaches the disk at the next checkpoint, which then moves
``lastMark`` past it. Until then the entry is in the journal only, and a restart replays it. So an
entry the index lacks but the journal holds after ``lastMark`` is not missing: the bookie would
serve it (from memory now, from the replayed journal after a crash).

Journal files ``<hex id>.txn``: ``"BKLG"``, a version, records from byte 8 (V4) or 512 (V5+);
a record is ``>i length`` + the entry (``>q ledgerId, >q entryId, ...``); length 0 ends the data,
length -256 announces padding of the length that follows.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import Iterable

from scanner.storage.layout import BookieLayout, conf_list, conf_string

_TXN_NAME = re.compile(r"([0-9a-f]{1,16})\.txn")
_MARK = struct.Struct(">qq")
_FILE_HEADER = struct.Struct(">4si")
_RECORD = struct.Struct(">iqq")
_PADDING = -0x100
_MAX_RECORD = 64 << 20  # a length past this is damage or the end of what was written, not an entry
_CHUNK = 4 << 20


def pending_entries(layout: BookieLayout, ledger_ids: Iterable[int]) -> set[tuple[int, int]]:
    """(ledger, entry) pairs of ``ledger_ids`` that the journals hold after the bookie's last mark."""
    wanted = set(ledger_ids)
    pending: set[tuple[int, int]] = set()
    if not wanted:
        return pending
    journals = _journal_dirs(layout)
    for index, journal in enumerate(journals):
        mark = _last_mark(layout, None if len(journals) == 1 else index)
        if mark is not None:
            _collect(journal / "current", mark, wanted, pending)
    return pending


def _journal_dirs(layout: BookieLayout) -> list[Path]:
    names = conf_list(layout.conf, "journalDirectories") or [conf_string(layout.conf, "journalDirectory")]
    return [Path(name) for name in names if name]


def _last_mark(layout: BookieLayout, journal_index: int | None) -> tuple[int, int] | None:
    """The oldest mark any ledger dir holds for that journal: from there on, nothing is sure to be flushed."""
    name = "lastMark" if journal_index is None else f"lastMark.{journal_index}"
    marks = []
    for current in layout.ledger_current_dirs:
        try:
            raw = (current / name).read_bytes()
        except OSError:
            continue
        if len(raw) >= _MARK.size:
            marks.append(_MARK.unpack_from(raw))
    return min(marks) if marks else None


def _collect(current: Path, mark: tuple[int, int], wanted: set[int], pending: set[tuple[int, int]]) -> None:
    try:
        names = os.listdir(current)
    except OSError:
        return
    files = sorted(int(m.group(1), 16) for m in map(_TXN_NAME.fullmatch, names) if m)
    for file_id in files:
        if file_id < mark[0]:
            continue
        try:
            fd = os.open(current / f"{file_id:x}.txn", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # removed once it was no longer needed
        try:
            _collect_file(fd, mark[1] if file_id == mark[0] else None, wanted, pending)
        finally:
            os.close(fd)


def _collect_file(fd: int, start: int | None, wanted: set[int], pending: set[tuple[int, int]]) -> None:
    head = os.pread(fd, _FILE_HEADER.size, 0)
    if len(head) < _FILE_HEADER.size or head[:4] != b"BKLG":
        return
    version = _FILE_HEADER.unpack(head)[1]
    first = 512 if version >= 5 else 8
    # A mark before the first record (negative: BookKeeper's "start of file", or damaged) reads from the first.
    pos = start if start is not None and start >= first else first
    if pos >= os.fstat(fd).st_size:
        return  # nothing after the mark (and an offset past any file must not reach pread)
    buffer, base = b"", pos
    while True:
        at = pos - base
        if at + _RECORD.size > len(buffer):
            buffer, base = os.pread(fd, _CHUNK, pos), pos
            at = 0
            if len(buffer) < 4:
                return
        (length,) = struct.unpack_from(">i", buffer, at)
        if length == _PADDING:
            if at + 8 > len(buffer):
                buffer, base, at = os.pread(fd, _CHUNK, pos), pos, 0
                if len(buffer) < 8:
                    return
            padding = struct.unpack_from(">i", buffer, at + 4)[0]
            if padding < 0:
                return
            pos += 8 + padding
            continue
        if length < 16 or length > _MAX_RECORD:
            return  # the end of what was written (zeros), or a torn tail
        if at + _RECORD.size > len(buffer):
            return
        _, ledger_id, entry_id = _RECORD.unpack_from(buffer, at)
        if ledger_id in wanted and entry_id >= 0:
            pending.add((ledger_id, entry_id))
        pos += 4 + length
