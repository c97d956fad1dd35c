"""The scan's native code builds beyond Linux: what only Linux (or only a 64-bit GCC or Clang) has is guarded, so an
install elsewhere keeps the record walker, and what is left out there falls back to the Python forms."""

from __future__ import annotations

import shlex
import subprocess
import sysconfig
from pathlib import Path

import pytest

from corpus import reference_walker
from scanner.native import switch as native
from scanner.storage.indexfile import index_files

SOURCES = Path(__file__).resolve().parents[1] / "scanner" / "native"

# A POSIX system without Linux's extras, as far as the native code can tell: the system headers come first (their
# guards keep them from coming again), then what Linux adds is taken away; any use of it left fails to compile.
ELSEWHERE = """
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/uio.h>
#undef O_NOATIME
#undef RUSAGE_THREAD
#undef POSIX_FADV_WILLNEED
#undef POSIX_FADV_DONTNEED
#undef RWF_NOWAIT
#define getdents64 getdents64_is_linux_only
#define dirent64 dirent64_is_linux_only
#define posix_fadvise posix_fadvise_is_not_everywhere
#define __int128 int128_is_not_everywhere
"""


@pytest.mark.parametrize("source", sorted(path.name for path in SOURCES.glob("*.c")))
def test_the_native_code_compiles_without_linuxs_calls_and_128_bit_integers(tmp_path, source):
    prelude = tmp_path / "elsewhere.h"
    prelude.write_text(ELSEWHERE)
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
    done = subprocess.run([*compiler, "-fsyntax-only", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                           "-Wno-missing-field-initializers", "-Werror", "-U__linux__", "-U__gnu_linux__",
                           "-U__SIZEOF_INT128__", f"-I{sysconfig.get_paths()['include']}", "-include", str(prelude),
                           str(SOURCES / source)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_where_the_native_listing_is_not_built_the_python_listing_lists(tmp_path, monkeypatch):
    for name in ("0/5/1.idx", "0/5/2.rloc", "0/5/2.idx", "1f/ab/a.rloc", "1f/ab/notes"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    with reference_walker():
        listed = sorted(index_files(tmp_path))
    assert native.native_code() is not None
    monkeypatch.delattr(native.native_code(), "list_index_files")  # as built where getdents64 is missing
    assert sorted(index_files(tmp_path)) == listed == [(1, str(tmp_path / "0/5/1.idx")), (2, str(tmp_path / "0/5/2.idx")),
                                                       (10, str(tmp_path / "1f/ab/a.rloc"))]
