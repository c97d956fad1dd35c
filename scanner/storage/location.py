"""Where an entry sits: the 64-bit location stored in `.idx` slots and DbLedgerStorage's index."""

from __future__ import annotations

from array import array
from dataclasses import dataclass

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
    if len(slots) < _VECTOR_THRESHOLD:
        ids = array("Q", [first_entry_id + i for i, raw in enumerate(slots) if raw])
        return ids, array("Q", [raw for raw in slots if raw])
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pa.Array.from_buffers(pa.uint64(), len(slots), [None, pa.py_buffer(slots)])
    where = pc.indices_nonzero(values)
    found = pc.take(values, where)
    ids = pc.add(where, pa.scalar(first_entry_id, pa.uint64())) if first_entry_id else where
    return uint64_array(ids), uint64_array(found)


def uint64_array(values) -> array:
    """A pyarrow uint64 array without nulls as ``array('Q')`` (one copy, no Python object per value)."""
    out = array("Q")
    if len(values):
        buffer = values.buffers()[1]
        out.frombytes(memoryview(buffer)[values.offset * 8:(values.offset + len(values)) * 8])
    return out
