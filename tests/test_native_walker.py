"""The native record walker: built by the install, used unless the reference is forced, and its CRCs are the
libraries' (with and without the CPU's CRC32C instruction). That it finds what the Python walker finds is
checked on every corpus bookie and fault (tests/faults, test_scan_corpus) and on fuzzed logs (tests/fuzz)."""

from __future__ import annotations

import os
import zlib

import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus import reference_walker
from scanner.cli import main
from scanner.scan import walker
from scanner.scan.native_walker import NativeWalk
from scanner.scan.python_walker import PythonWalk
from scanner.storage.entrylog import EntryLog

# Around the three-lane stretches (3 x 256 and 3 x 4096 bytes) and the 8-byte steps.
LENGTHS = [0, 1, 7, 8, 9, 767, 768, 769, 1000, 12287, 12288, 12289, 12288 + 768 + 9, 100_000]


def test_the_native_walker_is_built_and_walks_unless_told_otherwise(tmp_path, capsys):
    assert walker.native(), walker.walker_in_use()
    path = tmp_path / "0.log"
    path.write_bytes(b"BKLO" + bytes(1020))
    with EntryLog(path, 0) as entry_log:
        assert type(walker.walk_records(entry_log, lambda ledger: None)) is NativeWalk
        with reference_walker():
            assert type(walker.walk_records(entry_log, lambda ledger: None)) is PythonWalk
            assert walker.walker_in_use() == "python, forced by BOOKIE_SCANNER_WALKER=python"
    assert main(["--version"]) == 0
    assert "(record walker: native, CRC32C with " in capsys.readouterr().out


@settings(max_examples=200, deadline=None)
@given(data=st.one_of(st.binary(max_size=300), st.sampled_from(LENGTHS).map(os.urandom)),
       value=st.integers(0, 2**32 - 1))
def test_the_crcs_are_the_libraries(data, value):
    from scanner.scan import _native

    assert _native.crc32c(data, value) == crc32c.crc32c(data, value)
    assert _native.crc32c_portable(data, value) == crc32c.crc32c(data, value)
    assert _native.crc32(data, value) == zlib.crc32(data, value)
