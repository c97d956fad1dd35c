"""The record walker: one entry log walked front to back, every record's digest verified, and the index's
locations into the log matched against the records the walk meets.

Two forms behind one interface (:func:`walk_records`): the native walker (:mod:`scanner.scan.native_walker`,
its per-record work in C) when the extension is built, and the Python walker (:mod:`scanner.scan.python_walker`),
the reference, which ``BOOKIE_SCANNER_WALKER=python`` forces. Both find the same; the tests check it.
"""

from __future__ import annotations

import os
from typing import Iterable

from scanner.scan.python_walker import PythonWalk
from scanner.scan.walk_data import ExpectedRecords, VerifierFor
from scanner.storage.entrylog import EntryLog

WALKER_VARIABLE = "BOOKIE_SCANNER_WALKER"  # "python" forces the reference walker

try:
    from scanner.scan.native_walker import NativeWalk
    from scanner.scan import _native
    _NOT_BUILT = None
except ImportError as error:  # installed without a C compiler: the extension was not built
    NativeWalk = None
    _NOT_BUILT = str(error)


def native() -> bool:
    """Whether walks use the native walker (built, and not overridden)."""
    return NativeWalk is not None and os.environ.get(WALKER_VARIABLE, "native").strip().lower() != "python"


def walker_in_use() -> str:
    """Which walker walks, and why, in a few words (``--version``, ``status``)."""
    if native():
        return f"native, CRC32C with {_native.CRC32C_INSTRUCTIONS}"
    if NativeWalk is not None:
        return f"python, forced by {WALKER_VARIABLE}=python"
    return f"python, the native extension is not built ({_NOT_BUILT}): install a C compiler and reinstall"


def walk_records(entry_log: EntryLog, verifier_for: VerifierFor, expected: Iterable[ExpectedRecords] = (),
                 start: int | None = None):
    """A walk of ``entry_log``'s records from the record boundary ``start`` (None: its first record):
    ``failures(pace, pace_interval)`` yields the records whose digest fails; ``stats`` and ``index_faults``."""
    walk = NativeWalk if native() else PythonWalk
    return walk(entry_log, verifier_for, expected, start)
