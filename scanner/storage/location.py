"""Where an entry sits: the 64-bit location stored in `.idx` slots and DbLedgerStorage's index."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from itertools import compress

_ARROW_TYPES = {"Q": "uint64", "I": "uint32", "B": "uint8"}  # array typecodes of the unsigned ints used here

# Below this many slots a Python comprehension beats the set-up of a vectorised filter.
_VECTOR_THRESHOLD = 512


@dataclass(frozen=True, slots=True)
class EntryLocation:
    """Entry log id and ``pos``, the file offset of the entry's first byte (its length prefix is at pos - 4)."""

    entry_log_id: int
    pos: int

    @classmethod
    def decode(cls, raw: int) -> "EntryLocation":
        return cls(raw >> 32, raw & 0xFFFFFFFF)

    def encode(self) -> int:
        return (self.entry_log_id << 32) | self.pos


def nonzero_slots(slots: array, first_entry_id: int) -> tuple[array, array]:
    """(entry ids, values) of the non-zero values of ``slots`` (``array('Q')``, slot i = entry first_entry_id + i)."""
    found = array("Q", filter(None, slots))
    if len(found) == len(slots):  # most ledgers: every slot used (the empty ones at the end are cut off already)
        return array("Q", range(first_entry_id, first_entry_id + len(slots))), found
    if len(slots) < _VECTOR_THRESHOLD:  # sifted by the interpreter's own iterators, without a Python loop
        return array("Q", compress(range(first_entry_id, first_entry_id + len(slots)), slots)), found
    import pyarrow as pa
    import pyarrow.compute as pc

    values = arrow_view(slots)
    where = pc.indices_nonzero(values)
    found = pc.take(values, where)
    ids = pc.add(where, pa.scalar(first_entry_id, pa.uint64())) if first_entry_id else where
    return uint64_array(ids), uint64_array(found)


def zeroed_uint64(n: int) -> array:
    """``n`` zeros as ``array('Q')``: one allocation, no Python object per value."""
    return array("Q", bytes(8)) * n


def uint64_array(values) -> array:
    """A pyarrow uint64 array without nulls as ``array('Q')`` (one copy, no Python object per value)."""
    return native_array(values, "Q")


def native_array(values, typecode: str) -> array:
    """A pyarrow array of fixed-width numbers without nulls as ``array(typecode)`` of the same width."""
    out = array(typecode)
    if len(values):
        width = out.itemsize
        out.frombytes(memoryview(values.buffers()[1])[values.offset * width:(values.offset + len(values)) * width])
    return out


def arrow_view(values: array | memoryview):
    """An ``array`` of unsigned ints (or a memoryview of one) as a pyarrow array over the same memory (no copy: keep
    ``values`` unchanged)."""
    import pyarrow as pa

    kind = getattr(pa, _ARROW_TYPES[values.typecode if isinstance(values, array) else values.format])()
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])
