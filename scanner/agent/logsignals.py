"""Read-error lines of a bookie's own log, turned into suspects (ledger ids, entry log ids).

Matched on message substrings, never on whole lines: operators change the line layout. Ids in
these messages are decimal, entry log ids included. 4.18's structured form carries the ids as
``{entryId=3, ledgerId=7}`` attributes after a fixed phrase.
"""

from __future__ import annotations

import re

from scanner.agent.suspects import ENTRY_LOG, LEDGER, Suspect

_N = r"(-?\d+)"
# (pattern, group of the ledger id or None, group of the entry log id or None)
_CLASSIC = [
    (re.compile(rf"No ledger found while reading entry: {_N} from ledger: {_N}"), 2, None),
    (re.compile(rf"No ledger found(?: ?\(or it has been deleted\))? reading entry {_N} when fencing ledger {_N}"), 2, None),
    (re.compile(rf"IOException while reading entry: {_N} from ledger:? {_N}"), 2, None),
    (re.compile(rf"Unexpected exception reading at {_N}:{_N}"), 1, None),
    (re.compile(rf"(?:Digest|Mac) mismatch for ledger-id: {_N}, entry-id: {_N}"), 1, None),
    (re.compile(rf"(?:No ledger found|IOException) while performing getListOfEntriesOfLedger from ledger: {_N}"), 1, None),
    (re.compile(rf"Cannot find ledger {_N}, should exist"), 1, None),
    (re.compile(rf"Ledger {_N}, entry {_N}: "), 1, None),  # one item of the local scrubber's inconsistency list
    (re.compile(rf"Bad entry read from log file id: {_N}"), None, 1),
    (re.compile(rf"Missing entryLog {_N} for ledgerId {_N}, entry {_N}"), 2, 1),
    (re.compile(rf"pos {_N} \(entry {_N} for ledgerId {_N}\) past end of entryLog {_N}"), 3, 4),
    (re.compile(rf"Invalid entry length at pos {_N} \(entry {_N} for ledgerId {_N}\) for entryLog {_N}"), 3, 4),
    (re.compile(rf"Found entry {_N}, ledger {_N} at pos {_N} entryLog {_N}, should have found entry {_N} for ledgerId {_N}"), 6, 4),
    (re.compile(rf"Short read for {_N}@{_N} in {_N}@{_N}"), 1, 3),
    (re.compile(rf"Sanity check failed for entry size of {_N} at location {_N} in {_N}"), None, 3),
    (re.compile(rf"Short read for entry size from entrylog {_N}"), None, 1),
    (re.compile(rf"Short read for ledger entry from entryLog {_N}@"), None, 1),
    (re.compile(rf"Bad location\(location={_N},expectedLedger={_N}"), 2, 1),  # the log id is location >> 32
]
# Fixed phrases of 4.18's structured messages that name a read error; the ids are attributes.
_STRUCTURED_PHRASES = (
    "No ledger found while reading entry from ledger",
    "No ledger found (or it has been deleted) reading entry when fencing ledger",
    "IOException while reading entry from ledger",
    "Unexpected exception reading",
    "Digest mismatch",
    "Mac mismatch",
    "Inconsistency detected",
    "Cannot find ledger that should exist",
    "while performing getListOfEntriesOfLedger",
    "Sanity check failed for entry size",
    "Short read for entry size from entrylog",
    "Short read for ledger entry from entryLog",
)
_ATTRIBUTES = re.compile(r"\{([^{}]*)\}")
_LEDGER_ATTRIBUTE = re.compile(r"(?<![A-Za-z])ledgerId=(\d+)")
_LOG_ATTRIBUTE = re.compile(r"(?<![A-Za-z])entryLogId=(\d+)")


def suspects_in_line(line: str) -> list[Suspect]:
    """The ledgers and entry logs a bookie log line names as unreadable (unrouted; often none)."""
    found: list[Suspect] = []
    for pattern, ledger_group, log_group in _CLASSIC:
        match = pattern.search(line)
        if match is None:
            continue
        if ledger_group is not None:
            _add(found, LEDGER, int(match.group(ledger_group)))
        if log_group is not None:
            value = int(match.group(log_group))
            _add(found, ENTRY_LOG, value >> 32 if pattern.pattern.startswith("Bad location") else value)
    if not found and any(phrase in line for phrase in _STRUCTURED_PHRASES):
        for attributes in _ATTRIBUTES.findall(line):
            for match in _LEDGER_ATTRIBUTE.finditer(attributes):
                _add(found, LEDGER, int(match.group(1)))
            for match in _LOG_ATTRIBUTE.finditer(attributes):
                _add(found, ENTRY_LOG, int(match.group(1)))
    return found


def _add(found: list[Suspect], kind: str, value: int) -> None:
    suspect = Suspect(kind, value)
    if value >= 0 and suspect not in found:
        found.append(suspect)
