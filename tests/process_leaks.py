"""A pytest plugin: a test that leaves a child process behind fails, and the process is ended.

After each test's teardown, every process descended from the test process (a JVM, an agent, a scan, a shell)
must be gone, but for multiprocessing's own helpers and the processes a fixture of a wider scope (module,
session) started and still holds, with their own descendants (a session ZooKeeper, a Spark session's JVM and its
Python workers). Once that fixture's finalizer ran, its processes must be gone too: the teardown of the test that
ended its scope fails otherwise. What is left behind is killed, so it cannot disturb the tests after it (a frozen
server still holding its port, a client still retrying against it), and the teardown fails naming each process.

A test ends its processes in a fixture's finalizer or a ``finally``, so they end even when it fails; one that is
exiting has ``LEFTOVER_GRACE_S`` to finish. Processes that leave the tree by forking twice (a kit's start script
running a daemon in the background) are not seen here: whoever starts them stops them.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

LEFTOVER_GRACE_S = 5.0
_owned_by_fixture: dict[object, set[int]] = {}  # the processes a wider-scoped fixture started, while it holds them
_left_by_fixture: dict[int, str] = {}  # those whose fixture has finished, with its name, until a check looked


def child_processes(pid: int) -> set[int]:
    """The live children of ``pid`` (from every thread of it: a child is listed under the thread that forked it)."""
    children = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children.update(int(child) for child in (task / "children").read_text().split())
        except OSError:  # the thread or the process ended meanwhile
            continue
    return {child for child in children if _running(child)}


def descendants(pid: int) -> dict[int, int]:
    """Every live process below ``pid``, mapped to its parent."""
    found, parents = {}, [pid]
    while parents:
        parent = parents.pop()
        for child in child_processes(parent):
            if child not in found:
                found[child] = parent
                parents.append(child)
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (one that exited and only waits for its parent to reap it counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


def _interpreter_helpers() -> set[int]:
    """multiprocessing's resource tracker and fork server: one each for the whole process, started by the first
    pool that needs them and ended with the process, whichever test came first."""
    from multiprocessing import forkserver, resource_tracker

    return {pid for pid in (resource_tracker._resource_tracker._pid, forkserver._forkserver._forkserver_pid) if pid}


def leftovers() -> dict[int, str]:
    """The processes below this one that no wider-scoped fixture holds, with their command lines."""
    tree = descendants(os.getpid())
    held = _interpreter_helpers().union(*_owned_by_fixture.values())

    def is_held(pid: int) -> bool:
        while pid in tree:
            if pid in held:
                return True
            pid = tree[pid]
        return False

    return {pid: _command(pid) for pid in tree if not is_held(pid)}


def end_leftovers() -> dict[int, str]:
    """Wait up to ``LEFTOVER_GRACE_S`` for the leftovers to end, then kill those still there; returns them."""
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    found = leftovers()
    while found and time.monotonic() < deadline:
        time.sleep(0.05)
        found = {pid: command for pid, command in leftovers().items() if pid in found}
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)  # ends a frozen (SIGSTOP) process too
        except ProcessLookupError:
            pass
    while any(_running(pid) for pid in found) and time.monotonic() < deadline + LEFTOVER_GRACE_S:
        time.sleep(0.01)  # a kill is delivered asynchronously
    return found


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if fixturedef.scope == "function":
        return (yield)
    before = set(descendants(os.getpid()))
    try:
        return (yield)
    finally:
        started = set(descendants(os.getpid())) - before
        if started:
            _owned_by_fixture[fixturedef] = started


def pytest_fixture_post_finalizer(fixturedef, request):
    for pid in _owned_by_fixture.pop(fixturedef, ()):
        _left_by_fixture[pid] = fixturedef.argname


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        result = yield
    except BaseException:
        end_leftovers()  # the teardown's own failure is the one to report
        _left_by_fixture.clear()
        raise
    if left := end_leftovers():
        pytest.fail(f"{item.nodeid} left {len(left)} process(es) running, now killed: " + "; ".join(
            f"pid {pid}" + (f" (of fixture {_left_by_fixture[pid]!r}, after its finalizer)" if pid in _left_by_fixture
                            else "") + f": {command}" for pid, command in left.items()), pytrace=False)
    _left_by_fixture.clear()
    return result
