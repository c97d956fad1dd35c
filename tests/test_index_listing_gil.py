"""The native listing of `.idx` files lets the rest of the process run while the disk holds it.

A disk that hangs holds whatever thread reads it; with the GIL held, it would hold every thread of
the agent too (its /health endpoint, its watchdog). Here the disk's hang is real from the thread's
point of view: the kernel holds the listing thread's ``getdents64`` calls (a seccomp filter that
hands them to a supervisor, ``SECCOMP_RET_USER_NOTIF``) until the main thread lets each one go on.
The main thread must run Python while the first is held; with the GIL held by the listing it
could not, and the child process would hang until its timeout.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from scanner.native.switch import native_code
from scanner.storage.indexfile import index_file_path

GETDENTS64 = {"x86_64": 217, "aarch64": 61}
SECCOMP = {"x86_64": 317, "aarch64": 277}

# Runs in a child: a thread of its own is filtered (filters are per thread), the main thread supervises.
CHILD = textwrap.dedent("""
    import ctypes, errno, os, select, struct, sys, threading
    from scanner.native.switch import native_code

    directory, getdents64, seccomp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_NO_NEW_PRIVS, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER = 38, 1, 1 << 3
    RET_USER_NOTIF, RET_ALLOW, NOTIF_FLAG_CONTINUE = 0x7FC00000, 0x7FFF0000, 1
    NOTIF_SIZE, RESPONSE_SIZE = 80, 24  # struct seccomp_notif, struct seccomp_notif_resp
    NOTIF_RECV, NOTIF_SEND = 0xC0000000 | NOTIF_SIZE << 16 | 0x2100, 0xC0000000 | RESPONSE_SIZE << 16 | 0x2101

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    LOAD_NR, JUMP_IF_EQUAL, RETURN = 0x20, 0x15, 0x06  # ld [0] (seccomp_data.nr); jeq #k; ret #k
    program = (Filter * 4)(Filter(LOAD_NR, 0, 0, 0), Filter(JUMP_IF_EQUAL, 0, 1, getdents64),
                           Filter(RETURN, 0, 0, RET_USER_NOTIF), Filter(RETURN, 0, 0, RET_ALLOW))
    listener, listed = [], []
    filtered = threading.Event()

    def listing():
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
        fd = libc.syscall(seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER,
                          ctypes.byref(Program(4, program)))
        listener.append(fd if fd >= 0 else -ctypes.get_errno())
        filtered.set()
        if fd >= 0:
            listed.extend(native_code().list_index_files(directory))

    thread = threading.Thread(target=listing, daemon=True)
    thread.start()
    filtered.wait()
    if listener[0] < 0:
        print("no seccomp listener:", os.strerror(-listener[0]))
        sys.exit(3)

    def let_go():  # the next held getdents64 answered: carry on (as if the disk came back)
        notification = ctypes.create_string_buffer(NOTIF_SIZE)
        if libc.ioctl(listener[0], NOTIF_RECV, notification) != 0:
            if ctypes.get_errno() == errno.ENOENT:  # none held after all: the listing thread is ending
                return
            raise OSError(ctypes.get_errno(), "SECCOMP_IOCTL_NOTIF_RECV")
        (call,) = struct.unpack_from("Q", notification.raw)
        libc.ioctl(listener[0], NOTIF_SEND, ctypes.create_string_buffer(struct.pack("QqiI", call, 0, 0, NOTIF_FLAG_CONTINUE)))

    poller = select.poll()
    poller.register(listener[0], select.POLLIN)
    poller.poll()  # the listing's first getdents64 is held in the kernel now
    print("python ran while the listing was held", flush=True)  # needs the GIL: the listing must have let it go
    while thread.is_alive():
        if any(events & select.POLLIN for _, events in poller.poll(50)):
            let_go()
    print(sorted(listed))
""")


@pytest.mark.skipif(platform.machine() not in GETDENTS64, reason="the seccomp filter here knows x86_64 and aarch64")
@pytest.mark.skipif(native_code() is None, reason="the native walker is not built")
def test_a_listing_held_by_the_disk_holds_only_its_own_thread(tmp_path):
    ledgers = [3, 0x1234, 0x50000]
    for ledger_id in ledgers:
        path = tmp_path / index_file_path(ledger_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    first_level = tmp_path / index_file_path(ledgers[0]).parts[0]
    machine = platform.machine()
    try:
        child = subprocess.run([sys.executable, "-c", CHILD, str(first_level), str(GETDENTS64[machine]),
                                str(SECCOMP[machine])], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        ran = False
    else:
        ran = True
    assert ran, "the main thread could not run Python while the listing's getdents64 was held: the GIL was held"
    if child.returncode == 3:
        pytest.skip(child.stdout.strip())
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    expected = sorted((ledger_id, str(tmp_path / index_file_path(ledger_id))) for ledger_id in ledgers
                      if tmp_path / index_file_path(ledger_id).parts[0] == first_level)
    assert lines == ["python ran while the listing was held", str(expected)]
