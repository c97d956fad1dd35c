"""A bookie's journal as the tests write it: files of BookKeeper's journal format (version 5) and the last mark."""

from __future__ import annotations

import struct
from pathlib import Path

HEADER = b"BKLG" + struct.pack(">i", 5) + bytes(504)  # V5+: records from byte 512


def journal_record(ledger_id: int, entry_id: int) -> bytes:
    """One journal record of (ledger, entry): its length, then the entry's first 56 bytes (ids and header)."""
    body = struct.pack(">qq", ledger_id, entry_id) + bytes(40)
    return struct.pack(">i", len(body)) + body


def journal_holds(bookie: Path, layout, entries) -> None:
    """The journal of the bookie under ``bookie`` holds ``entries`` (ledger, entry) after its last mark:
    acknowledged, not yet flushed to the entry logs."""
    journal = bookie / "journal" / "current"
    journal.mkdir(parents=True, exist_ok=True)
    (journal / "10.txn").write_bytes(HEADER + b"".join(journal_record(*entry) for entry in sorted(entries)))
    for current in layout.ledger_current_dirs:
        (current / "lastMark").write_bytes(struct.pack(">qq", 0x10, len(HEADER)))
