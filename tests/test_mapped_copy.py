"""Copying a file's bytes out of a mapping of it: the same bytes as a read, and a short copy, not SIGBUS, where the
file was cut after its size was taken."""

from __future__ import annotations

import os

from scanner.storage.mapped_copy import copy_out_of_mapping

PAGE = os.sysconf("SC_PAGE_SIZE")


def test_a_copy_gives_the_bytes_a_read_gives(tmp_path):
    data = os.urandom(5 * PAGE + 123)
    path = tmp_path / "log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset, length in [(0, 10), (PAGE - 3, 7), (PAGE + 5, 3 * PAGE), (len(data) - 50, 200), (len(data), 10)]:
            view = memoryview(bytearray(length))
            copied = copy_out_of_mapping(fd, view, offset, len(data))
            assert bytes(view[:copied]) == data[offset:offset + length], (offset, length)
    finally:
        os.close(fd)


def test_a_file_cut_after_its_size_was_taken_gives_a_short_copy(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"x" * (3 * PAGE))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.truncate(path, PAGE)  # the size the caller holds is now three pages too many
        view = memoryview(bytearray(3 * PAGE))
        assert copy_out_of_mapping(fd, view, 0, 3 * PAGE) == PAGE
        assert bytes(view[:PAGE]) == b"x" * PAGE
        assert copy_out_of_mapping(fd, view, 2 * PAGE, 3 * PAGE) == 0
    finally:
        os.close(fd)
