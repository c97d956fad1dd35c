"""What a scan counts as it goes: the report's summary figures."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class ScanTotals:
    ledgers_checked: int = 0
    entry_logs_scanned: int = 0
    entries_verified: int = 0
    bytes_scanned: int = 0
    journaled: int = 0  # entries the index lacked that the journal holds unflushed (not missing)

    def add(self, other: "ScanTotals") -> None:
        for field in fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
