"""The record walker: one entry log walked front to back, every record's digest verified, and the index's
locations into the log matched against the records the walk meets.

Two forms behind one interface (:func:`walk_records`): the native walker
(:mod:`scanner.scan.record_walk_in_c`, its per-record work in C) when the extension is built, and the Python walker
(:mod:`scanner.scan.record_walk_in_python`), the reference, which ``BOOKIE_SCANNER_NATIVE=0`` forces
(:mod:`scanner.native.switch`). Both find the same; the tests check it.
"""

from __future__ import annotations

from typing import Iterable

from scanner.native.switch import native_code
from scanner.scan.record_walk_in_python import PythonWalk
from scanner.scan.record_walk_types import ExpectedRecords, KnownLedgers, VerifierFor
from scanner.storage.entrylog import EntryLog


def walk_records(entry_log: EntryLog, verifier_for: VerifierFor, expected: Iterable[ExpectedRecords] = (),
                 start: int | None = None, known: KnownLedgers | None = None):
    """A walk of ``entry_log``'s records from the record boundary ``start`` (None: its first record):
    ``failures(pace, pace_interval)`` yields the records whose digest fails; ``stats`` and ``index_faults``.

    ``known``: the pass's ledger table, which the native walker looks ledgers up in without a call to
    ``verifier_for`` each (the Python walker asks ``verifier_for``, which gives the same)."""
    if native_code() is None:
        return PythonWalk(entry_log, verifier_for, expected, start)
    from scanner.scan.record_walk_in_c import NativeWalk

    return NativeWalk(entry_log, verifier_for, expected, start, known)
