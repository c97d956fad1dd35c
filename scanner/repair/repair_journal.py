"""Every repair attempt, kept in the scanner's state dir: one JSON line each, appended and synced.

A line is written for each attempt that did something or failed (moved, not needed, no target, no
good copy, failed); attempts that found the ledger locked by another repairer, or waiting for it to
close, are not journaled. A crash can cut only the last line. The journal is bounded: past
``MAX_BYTES`` it is renamed to ``repairs.jsonl.1`` (replacing the older one) and a new one begins.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

JOURNAL_FILE = "repairs.jsonl"
MAX_BYTES = 8 << 20


class RepairJournal:
    def __init__(self, state_dir: Path, max_bytes: int = MAX_BYTES):
        self.path = Path(state_dir) / JOURNAL_FILE
        self.max_bytes = max_bytes

    def append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, sort_keys=True).encode() + b"\n"
        try:
            if self.path.stat().st_size + len(line) > self.max_bytes:
                os.replace(self.path, self.path.with_name(JOURNAL_FILE + ".1"))
        except FileNotFoundError:
            pass
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def records(self) -> list[dict]:
        """The journal's lines, oldest first (the rotated file's first); a cut last line is skipped."""
        out = []
        for path in (self.path.with_name(JOURNAL_FILE + ".1"), self.path):
            try:
                text = path.read_text()
            except FileNotFoundError:
                continue
            for line in text.splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out
