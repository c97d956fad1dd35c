"""Bookie files are opened read-only and, where Linux allows, without updating their access time."""

from __future__ import annotations

import fcntl
import os

import pytest

from scanner.storage.read_only import open_read_only


def test_a_bookie_file_is_opened_read_only_with_noatime(tmp_path):
    path = tmp_path / "0.log"
    path.write_bytes(b"entry log bytes")
    fd = open_read_only(path)
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        assert flags & os.O_ACCMODE == os.O_RDONLY
        assert flags & os.O_NOATIME  # this process owns the file: the kernel grants it
        assert os.read(fd, 100) == b"entry log bytes"
        with pytest.raises(OSError):
            os.write(fd, b"x")
    finally:
        os.close(fd)


def test_a_missing_file_is_the_callers_error_to_name(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_read_only(tmp_path / "gone.idx")
