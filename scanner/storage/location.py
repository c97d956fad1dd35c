"""Where an entry sits: the 64-bit location stored in `.idx` slots and DbLedgerStorage's index."""

from __future__ import annotations

from dataclasses import dataclass


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
