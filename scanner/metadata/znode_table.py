"""Znodes kept in a scratch file of their own, so that a million of them cost the process little memory.

Each znode is one record appended to an unnamed temporary file (gone with the process, whatever ends it), filled
once and then only read with ``pread``: what is hot stays in the page cache, not in the process. The process holds
per znode only where its record starts (8 bytes), its path's hash and number in a column sorted by hash (16
bytes), and its number among its parent's children (4 bytes): reading one node is a bisection and one read, a
batch of nodes a few reads of the records side by side (a dump lists a parent's children together), listing a
node's children the read of theirs. Several threads may read at once, and so may a process forked after the fill.
"""

from __future__ import annotations

import bisect
import os
import struct
import tempfile
import threading
from array import array
from collections.abc import Iterable
from itertools import accumulate, count, groupby, islice, repeat
from operator import itemgetter, ne

from scanner.metadata.store import ZNode
from scanner.native.switch import native_code

# path length, data length (-1: no data), ephemeral, mzxid, version, whether ctime is known, ctime
_HEADER = struct.Struct("<IiBqqBq")
_NO_DATA = -1
_WHOLE, _PATH, _PATH_AND_DATA = 0, 1, 2  # what is read of a record: its ZNode's fields, its path, its path and data
_SPAN_GAP = 1 << 16  # records this close are read in one go with those before them
# Bytes read at once at most (a record longer than this is read alone), and written at once: under glibc's mmap
# threshold as the CLI fixes it (see json_list.READ_CHUNK), so the buffers are the heap's, used again.
_SPAN_LIMIT = 1 << 16
_WRITE_BUFFER = 1 << 16


# Records of several znodes laid end to end, each one's path and each one's length in bytes (the run's records).
RecordRun = tuple[bytes, list[str], array]


def pack_records(nodes: Iterable[ZNode]) -> RecordRun:
    """``nodes`` as a run of records (the Python form of the native ``pack_znodes``)."""
    records, paths, lengths = [], [], array("I")
    for node in nodes:
        path = node.path.encode("utf-8", "surrogatepass")
        data = node.data
        records += (_HEADER.pack(len(path), _NO_DATA if data is None else len(data), node.ephemeral, node.mzxid,
                                 node.version, node.ctime is not None, node.ctime or 0), path, data or b"")
        paths.append(node.path)
        lengths.append(_HEADER.size + len(path) + len(data or b""))
    return b"".join(records), paths, lengths


class ZNodeTable:
    """Znodes by path, written once from runs of records (a path given twice: the last wins); ``close`` frees the
    file."""

    def __init__(self, runs: Iterable[RecordRun]):
        self._file = tempfile.TemporaryFile(prefix="bookie-scanner-znodes-", buffering=0)
        self._fd: int | None = self._file.fileno()
        self._lock = threading.Lock()  # a read and ``close`` do not meet (a closed fd's number may be reused at once)
        self._starts = array("Q")  # per record (by number): where it starts; one more: where the file ends
        keys = array("Q")  # per record: its path's hash
        self._children: dict[str, array] = {}  # parent path -> its children's record numbers
        try:
            position, pending, written = 0, [], 0
            for records, paths, lengths in runs:
                # a run's records a column at a time, in C-speed steps (a dump's million znodes come this way)
                pending.append(records)
                number, run_start = len(self._starts), position
                self._starts.extend(islice(accumulate(lengths, initial=position), len(lengths)))
                position += sum(lengths)
                keys.frombytes(_keys(paths))
                self._note_children(paths, number)
                if position - run_start != len(records):
                    raise ValueError(f"a run of {len(records)} bytes of records said its records took {position - run_start}")
                if position - written >= _WRITE_BUFFER:
                    self._file.write(b"".join(pending))
                    pending, written = [], position
            self._starts.append(position)
            self._file.write(b"".join(pending))
            self._keys, self._numbers = _sorted_by_key(keys)
            self._drop_replaced()
        except BaseException:
            self.close()
            raise

    def _note_children(self, paths: list[str], first: int) -> None:
        """Records ``first``, ``first`` + 1, ... (of ``paths``) among their parents' children; a dump lists a parent's
        children together, so they are noted a parent at a time (found by the native code when it runs: this loop is
        the reference)."""
        native = native_code()
        if native is not None:
            for parent, numbers in native.child_runs(paths, first):
                self._children.setdefault(parent, array("I")).frombytes(numbers)
            return
        split = map(str.rpartition, paths, repeat("/"))
        for parent, children in groupby(zip(split, count(first)), key=_parent):
            numbers = array("I", [number for (_, _, name), number in children if name])
            if numbers:
                self._children.setdefault(parent, array("I")).extend(numbers)

    def node(self, path: str) -> ZNode | None:
        return self.nodes([path])[0]

    def nodes(self, paths: list[str]) -> list[ZNode | None]:
        """Several znodes at once: the records of their paths' hashes read together, each checked for its path."""
        found = {fields[0]: fields for fields in self._records_of(paths)}
        return [None if fields is None else ZNode(*fields) for fields in map(found.get, paths)]

    def data_of(self, paths: list[str]) -> list[bytes | None]:
        """Each path's data as :meth:`nodes` reads it, with no znode object: None for no znode or no data (found in
        C-speed steps: only each record's path and data are made)."""
        return list(map(dict(self._records_of(paths, _PATH_AND_DATA)).get, paths))

    def _records_of(self, paths: list[str], fields: int = _WHOLE) -> list:
        """The records (their ``fields``, as :meth:`_read` gives them) of those of ``paths`` there are (others with the
        same hashes too)."""
        absolute = [path for path in paths if path.startswith("/")]
        native = native_code()
        if native is None:
            return self._read({number for path in absolute for number in self._numbers_of(path)}, fields)
        found = native.find_records(self._keys, self._numbers, array("Q", _keys(absolute)))
        if set(map(type, found)) <= {int}:  # one record a path (the common case: no hash twice, every path there)
            return self._read(set(found), fields)
        candidates = set()
        for numbers in found:
            if type(numbers) is int:
                candidates.add(numbers)
            elif numbers is not None:
                candidates.update(numbers)
        return self._read(candidates, fields)

    def children(self, path: str) -> list[str]:
        if not path.startswith("/"):
            return []
        numbers = self._children.get("" if path == "/" else path)
        if numbers is None or self._fd is None:
            return []
        return sorted(set(map(_NAME, map(str.rpartition, self._read(numbers, _PATH), repeat("/")))))

    def close(self) -> None:
        with self._lock:
            self._fd = None
            self._file.close()

    def _numbers_of(self, path: str) -> list[int]:
        key = _key(path)
        i = bisect.bisect_left(self._keys, key)
        j = i
        while j < len(self._keys) and self._keys[j] == key:
            j += 1
        return list(self._numbers[i:j])

    def _read(self, numbers, fields: int = _WHOLE) -> list:
        """The fields of records ``numbers``: a ZNode's, in order (``_WHOLE``), their paths alone (``_PATH``), or each
        one's path and data (``_PATH_AND_DATA``); read a span of neighbouring records at a time."""
        found = []
        numbers = sorted(numbers)
        starts = self._starts
        i = 0
        while i < len(numbers):
            first = starts[numbers[i]]
            if numbers[-1] - numbers[i] == len(numbers) - 1 - i:
                # The rest are neighbours (a parent's children, as a dump lists them): no gaps, only the limit, found
                # by bisection: the records up to the first whose end lies past it (one at least).
                beyond = bisect.bisect_right(starts, first + _SPAN_LIMIT, numbers[i] + 2, numbers[-1] + 2)
                j = i + max(1, beyond - 1 - numbers[i])
            else:
                j = i + 1
                while (j < len(numbers) and starts[numbers[j]] - starts[numbers[j - 1] + 1] <= _SPAN_GAP
                       and starts[numbers[j] + 1] - first <= _SPAN_LIMIT):
                    j += 1
            with self._lock:
                if self._fd is None:
                    return []
                span = os.pread(self._fd, starts[numbers[j - 1] + 1] - first, first)
            offsets = list(map(first.__rsub__, map(starts.__getitem__, numbers[i:j])))
            native = native_code()
            if native is None:
                found.extend(_record(span, at, fields) for at in offsets)
            else:
                found.extend(native.parse_records(span, offsets, fields))
            i = j
        return found

    def _drop_replaced(self) -> None:
        """A path given more than once keeps its last record: the others leave the index and their parent's children."""
        keys, numbers = self._keys, self._numbers
        if all(map(ne, keys, islice(keys, 1, None))):  # no hash twice (the common case), told in C-speed steps
            return
        replaced = set()
        for i in range(1, len(keys)):
            if keys[i] == keys[i - 1] and (i < 2 or keys[i - 2] != keys[i]):  # the first of a run of equal hashes
                j = i + 1
                while j < len(keys) and keys[j] == keys[i]:
                    j += 1
                run = sorted(numbers[i - 1:j])
                latest = {fields[0]: number for fields, number in zip(self._read(run), run)}  # ascending: the last wins
                replaced.update(set(run) - set(latest.values()))
        if not replaced:
            return
        keep = [i for i in range(len(keys)) if numbers[i] not in replaced]
        self._keys, self._numbers = array("Q", (keys[i] for i in keep)), array("Q", (numbers[i] for i in keep))
        for parent, children in self._children.items():
            if any(number in replaced for number in children):
                self._children[parent] = array("I", (number for number in children if number not in replaced))


_hash = hash  # a path's key is its hash, as uint64


def _key(path: str) -> int:
    return _hash(path) & 0xFFFF_FFFF_FFFF_FFFF


def _keys(paths: Iterable[str]) -> bytes:
    """The keys of ``paths`` (as :func:`_key` gives them) as the bytes of an ``array('Q')``, made in C-speed steps: a
    hash's two's complement is its key."""
    return array("q", map(_hash, paths)).tobytes()


_NAME = itemgetter(2)  # a path's name, of its rpartition("/")


def _parent(numbered: tuple[tuple[str, str, str], int]) -> str:
    return numbered[0][0]


def _record(span: bytes, at: int, fields: int) -> tuple | str:
    path_length, data_length, ephemeral, mzxid, version, has_ctime, ctime = _HEADER.unpack_from(span, at)
    at += _HEADER.size
    path = span[at:at + path_length].decode("utf-8", "surrogatepass")
    if fields == _PATH:
        return path
    at += path_length
    data = None if data_length == _NO_DATA else span[at:at + data_length]
    if fields == _PATH_AND_DATA:
        return path, data
    return path, data, bool(ephemeral), mzxid, version, ctime if has_ctime else None


def _sorted_by_key(keys: array) -> tuple[array, array]:
    """(the keys ascending, the record number of each), sorted natively where the native code runs."""
    numbers = array("Q", range(len(keys)))
    native = native_code()
    if native is not None:
        native.sort_pairs(keys, numbers)
        return keys, numbers
    import pyarrow.compute as pc

    from scanner.storage.location import arrow_view, native_array

    order = pc.sort_indices(arrow_view(keys))
    return native_array(pc.take(arrow_view(keys), order), "Q"), native_array(order, "Q")
