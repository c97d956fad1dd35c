"""Every heal attempt, kept in the scanner's state dir: one JSON line each, appended and synced.

A line is written for each entry the healer decided about for real (healed, failed, or left alone
as write-path damage, divergent or unresolved); a dry run writes nothing. A crash can cut only the
last line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

JOURNAL_FILE = "heals.jsonl"


class HealJournal:
    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / JOURNAL_FILE

    def append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, sort_keys=True).encode() + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
