"""The suite's check for processes a test leaves behind (``process_leaks``), run on small suites of its own."""

from __future__ import annotations

import os

import pytest

from process_leaks import descendants

PROCESS_OF = """
import subprocess, sys
import pytest

def sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
"""


def outcome_and_pids(pytester, monkeypatch, source: str) -> tuple[pytest.RunResult, list[int]]:
    """The outcome of a suite of ``source`` under the check, and the processes it left running (none, once killed)."""
    pytester.makeconftest('import process_leaks\n'
                          'process_leaks.LEFTOVER_GRACE_S = 0.5  # these leftovers never end by themselves\n'
                          'pytest_plugins = ["process_leaks"]')
    pytester.makepyfile(PROCESS_OF + source)
    before = set(descendants(os.getpid()))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # quicker: none of the installed plugins
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    return result, sorted(set(descendants(os.getpid())) - before)


def test_a_test_that_leaves_a_process_running_fails_and_the_process_is_killed(pytester, monkeypatch):
    result, alive = outcome_and_pids(pytester, monkeypatch, """
def test_leaves_one():
    sleeper()

def test_ends_its_own():
    process = sleeper()
    process.kill()
    process.wait()
""")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*test_leaves_one left 1 process(es) running, now killed: pid * -c import time*"])
    assert alive == []


def test_a_test_that_fails_before_it_ends_its_process_fails_at_teardown_too(pytester, monkeypatch):
    result, alive = outcome_and_pids(pytester, monkeypatch, """
def test_asserts_first():
    process = sleeper()
    assert False, "the test's own failure"
    process.kill()
""")
    result.assert_outcomes(failed=1, errors=1)
    assert alive == []


def test_a_wider_fixture_may_hold_its_process_until_its_scope_ends_but_not_after(pytester, monkeypatch):
    result, alive = outcome_and_pids(pytester, monkeypatch, """
@pytest.fixture(scope="module")
def server():
    yield sleeper()  # never stopped

def test_one(server):
    assert server.poll() is None

def test_two(server):
    assert server.poll() is None
""")
    # The first test passes with the module's process running; the last one's teardown ends the module's scope.
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*test_two left 1 process(es) running, now killed: pid * (of fixture 'server', "
                                 "after its finalizer): *"])
    assert alive == []


def test_a_wider_fixture_that_stops_its_process_passes(pytester, monkeypatch):
    result, alive = outcome_and_pids(pytester, monkeypatch, """
@pytest.fixture(scope="session")
def server():
    process = sleeper()
    yield process
    process.kill()
    process.wait()

def test_one(server):
    assert server.poll() is None
""")
    result.assert_outcomes(passed=1)
    assert alive == []
