"""Shared fixtures: a real ZooKeeper server for the whole session, and fresh chroots per test.

- ``zookeeper`` (session): a started ``zookeeper_server.ZooKeeperServer``; use
  ``zookeeper.connect_string`` ("127.0.0.1:<port>"). The test FAILS (never skips) when
  Debian's zookeeper package or java is missing. The JVM is stopped at the end of the session.
- ``zk_client`` (session): a connected kazoo client without credentials.
- ``zk_chroot`` (per test): a unique, empty, existing znode path such as "/t7"; tests put
  their tree under it (as a chroot, or as a prefix of the ledgers root) so they never see
  each other's data. Removed after the test (best effort).
- ``zk_load_dump`` (per test): ``zk_load_dump(dump_path) -> chroot`` loads a dump file (the
  corpus ``zk-dump.json`` format) into a fresh chroot; ``/ledgers`` of the dump is then at
  ``chroot + "/ledgers"``. Ephemeral znodes stay alive until the session's client closes.

Under pytest-xdist (``./dev test`` runs two workers, ``--dist loadgroup``), the tests that start a
standalone Spark cluster run one after another on one worker (two such clusters at once would starve each
other of the machine's cores). The live tests run on both workers, as every other test: at most two
BookKeeper clusters at once, and each live test waits for events, not for a machine of its own.

A test that leaves a child process behind fails at its teardown, and the process is killed (``process_leaks``).
"""

from __future__ import annotations

import itertools
import os
import random

import kazoo.protocol.connection
import kazoo.retry
import pytest

from zookeeper_server import ZooKeeperServer, ZooKeeperSetupError, load_dump

# A connected kazoo client's thread draws its ping jitter from the global `random`, whenever it pings. Hypothesis
# checks that the global generator is left alone while a test's examples are generated, and warns of a strategy
# using `random` when such a draw falls in that time (a client of an earlier test in the same worker): kazoo draws
# from a generator of its own here.
kazoo.protocol.connection.random = kazoo.retry.random = random.Random()

pytest_plugins = ["pytester", "process_leaks"]

# Every JVM a test starts (the kit's ZooKeeper, bookies, writers and autorecovery, the test ZooKeeper, Spark) lives
# seconds to minutes: it compiles with the client compiler only, whose code is ready sooner and costs far less CPU
# than the server compiler's (a kit bookie's start: 2.8 -> 1.7 CPU s, the cluster's 14 -> 7 s). What they do
# is the same; only how fast their hot code runs differs. JVMs print a line saying so on their stderr.
_CLIENT_COMPILER_ONLY = "-XX:TieredStopAtLevel=1"
_java_options = os.environ.get("JAVA_TOOL_OPTIONS", "").split()
if _CLIENT_COMPILER_ONLY not in _java_options:  # set already where pytest-xdist's controller did
    os.environ["JAVA_TOOL_OPTIONS"] = " ".join([*_java_options, _CLIENT_COMPILER_ONLY])

_chroot_numbers = itertools.count(1)
_SLOW_KINDS = ("live", "spark", "install")  # a cluster, a JVM or a fresh venv: seconds before the first assert
# Modules whose tests share what a module-scoped fixture makes in many seconds (a standalone Spark cluster, a wheel, a
# venv): under xdist each runs on one worker, which makes it once, not once a worker.
_ONE_WORKER_MODULES = {"test_audit_cluster.py": "spark_cluster", "test_wheel_install.py": "wheel_install",
                       "test_install_without_audit.py": "install_without_audit"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups to schedule by
def pytest_collection_modifyitems(items):
    """Every test under tests/live/ is live; every live, spark and install test is slow too, so ``-m "not slow"``
    is the fast tier. Under xdist, the tests of each of ``_ONE_WORKER_MODULES`` run in turn on one worker."""
    for item in items:
        if "live" in item.path.parent.relative_to(item.config.rootpath).parts:
            item.add_marker(pytest.mark.live)
        if any(item.get_closest_marker(kind) for kind in _SLOW_KINDS):
            item.add_marker(pytest.mark.slow)
        if item.path.name in _ONE_WORKER_MODULES:
            item.add_marker(pytest.mark.xdist_group(_ONE_WORKER_MODULES[item.path.name]))


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
    except ZooKeeperSetupError as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def zk_client(zookeeper):
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.connect_string, timeout=30)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def zk_chroot(zk_client):
    path = f"/t{next(_chroot_numbers)}"
    zk_client.create(path)
    yield path
    _delete_quietly(zk_client, path)


@pytest.fixture
def zk_load_dump(zk_client):
    created = []

    def load(dump_path) -> str:
        chroot = f"/t{next(_chroot_numbers)}"
        zk_client.create(chroot)
        created.append(chroot)
        load_dump(zk_client, dump_path, prefix=chroot)
        return chroot

    yield load
    for chroot in created:
        _delete_quietly(zk_client, chroot)


def _delete_quietly(client, path: str) -> None:
    from kazoo.exceptions import KazooException

    try:
        client.delete(path, recursive=True)
    except KazooException:
        pass  # e.g. a test put ACLs on its tree; a throw-away server can keep it
