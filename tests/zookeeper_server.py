"""A real, throw-away ZooKeeper server for tests (Debian's ``zookeeper`` package), and dump loading.

``ZooKeeperServer(workdir).start()`` runs ``ZooKeeperServerMain`` in its own JVM on 127.0.0.1
with a free port, a data dir under ``workdir``, the admin server off, and waits until the
server has loaded its data and serves (else it tries a fresh JVM on another port).
``stop()`` ends that JVM (and only it); ``restart()`` (of a server made ``restartable``) starts it
again with the same data dir, clients finding it on the same port, as after an outage; ``freeze()``/``thaw()`` suspend and resume it (a server that
keeps its connections but never answers). ``load_dump`` recreates the znodes of a dump file (the
corpus ``zk-dump.json`` format) under a prefix.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tcp_gate import TcpGate

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# The package's jar names only slf4j's API: without a binding the server logs nothing. Debian's slf4j
# package (a dependency of zookeeper's) has the simple one.
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
SERVER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
_PORT_ATTEMPTS = 3


class ZooKeeperSetupError(RuntimeError):
    """ZooKeeper could not be started: the message says what is missing or what the JVM said."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ZooKeeperServer:
    """``max_session_timeout_ms`` caps the sessions clients get (ZooKeeper's default: 40 s); ``heap_mb``
    is the JVM's heap (a million znodes need about 1 GiB).

    A ``restartable`` server is reached through a ``TcpGate`` that opens only once the JVM serves, after
    a start or a restart alike. ZooKeeper 3.8 binds its port before it has a database, and a client that
    connects in that window is neither answered nor closed (closing it throws, ZOOKEEPER-5051; its log says
    ``NullPointerException ... because "this.zkDb" is null``): it waits out its whole connect timeout (kazoo's
    and ZooKeeper's: the session timeout / hosts, 30 s here), which in the outage tests' reconnects under load
    was longer than the tests wait. Under load the window lasts from tens of milliseconds to over half a second;
    once the database exists, connects are closed at once until the server runs, and kazoo tries again. The other servers need no gate: their clients connect only after ``start()``.
    """

    def __init__(self, workdir: Path, jar: Path = ZOOKEEPER_JAR, *, max_session_timeout_ms: int | None = None,
                 heap_mb: int = 256, restartable: bool = False):
        self.workdir = Path(workdir)
        self.jar = Path(jar)
        self.max_session_timeout_ms = max_session_timeout_ms
        self.heap_mb = heap_mb
        self._gate = TcpGate() if restartable else None
        self._jvm_port: int | None = None
        self._attempt: int | None = None  # names the config and data dir the serving JVM uses
        self._process: subprocess.Popen | None = None

    @property
    def port(self) -> int | None:
        """The port clients connect to."""
        return self._jvm_port if self._gate is None else self._gate.port

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and wait until it answers; ZooKeeperSetupError if it cannot."""
        java = self._java()
        failures = []
        # A port picked as free can be taken before the JVM binds it: then try another, with a data dir of its own.
        for attempt in range(_PORT_ATTEMPTS):
            self._jvm_port, self._attempt = free_port(), attempt
            self._process = self._launch(java, attempt)
            atexit.register(self.stop)
            problem = self._wait_until_serving(timeout)
            if problem is None:
                if self._gate is not None:
                    self._gate.open(self._jvm_port)
                return
            self.stop()
            failures.append(problem)
        raise ZooKeeperSetupError("ZooKeeper did not start: " + " | ".join(failures))

    def restart(self, timeout: float = 60.0) -> None:
        """Stop the server if it runs, then serve again from the same data dir, clients finding it on the same port.

        Its znodes and sessions survive, as after a real outage; ZooKeeperSetupError if it cannot.
        """
        if self._gate is None:
            raise ZooKeeperSetupError("restart() needs a server made restartable=True")
        if self._attempt is None:
            raise ZooKeeperSetupError("restart() before a successful start()")
        self.stop()
        self._jvm_port = free_port()  # the JVM's own port; the gate keeps the clients' one
        self._process = self._launch(self._java(), self._attempt)
        problem = self._wait_until_serving(timeout)
        if problem is not None:
            self.stop()
            raise ZooKeeperSetupError("ZooKeeper did not restart: " + problem)
        self._gate.open(self._jvm_port)

    def _java(self) -> str:
        if not self.jar.is_file():
            raise ZooKeeperSetupError(
                f"{self.jar} not found: install Debian's zookeeper package (apt-get install zookeeper); "
                "the ZooKeeper tests need a real server"
            )
        java = shutil.which("java")
        if java is None:
            raise ZooKeeperSetupError("no java on PATH: install a JRE (apt-get install default-jre-headless)")
        return java

    def _launch(self, java: str, attempt: int) -> subprocess.Popen:
        data_dir = self.workdir / f"data-{attempt}"
        data_dir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / f"zoo-{attempt}.cfg"
        config.write_text(
            "tickTime=2000\n"
            f"dataDir={data_dir}\n"
            f"clientPort={self._jvm_port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=srvr\n"
            + ("" if self.max_session_timeout_ms is None else f"maxSessionTimeout={self.max_session_timeout_ms}\n")
        )
        self.log_path = self.workdir / f"zookeeper-{attempt}.log"
        command = [
            java, f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.admin.enableServer=false",
            # A throw-away server: no fsync per transaction and a 1 MiB log file, not 64 MiB of zeros written
            # before the first session (slow beside a BookKeeper cluster's fsyncs); a restart still finds every
            # znode (the page cache keeps them).
            "-Dzookeeper.forceSync=no", "-Dzookeeper.preAllocSize=1024",
            "-Dorg.slf4j.simpleLogger.showDateTime=true", "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            "-cp", os.pathsep.join(str(jar) for jar in (self.jar, SLF4J_SIMPLE_JAR) if jar.is_file()),
            SERVER_MAIN, str(config),
        ]  # fmt: skip
        with self.log_path.open("ab") as log:  # a restart's lines follow the first run's
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def _wait_until_serving(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-400:].strip().replace("\n", " / ")
                return f"JVM exited with {self._process.returncode} (port {self._jvm_port}): {tail}"
            if self._serves():
                return None
            time.sleep(0.05)
        return f"not serving on port {self._jvm_port} within {timeout:g}s (log: {self.log_path})"

    def _serves(self) -> bool:
        """Whether the server has loaded its data: only then does ``srvr`` report its mode.

        No client may connect before that (see the class): the port is bound, and ``ruok`` answered, before
        there is a database. In suites under load the window lasted long enough for a client started on
        ``ruok`` to fall into it.
        """
        try:
            with socket.create_connection(("127.0.0.1", self._jvm_port), timeout=1) as s:
                s.sendall(b"srvr")
                reply = b""
                while b"Mode: " not in reply and (chunk := s.recv(4096)):
                    reply += chunk
                return b"Mode: " in reply
        except OSError:  # refused, reset, or a reply the server never finished (the same closing fault)
            return False

    def freeze(self, timeout: float = 10.0) -> None:
        """Suspend the JVM (SIGSTOP): connections stay open, nothing is answered until ``thaw()``.

        Returns once every thread of it has stopped: the signal is only sent when ``kill`` returns, and a
        JVM was seen answering a request made just after it.
        """
        os.kill(self._process.pid, signal.SIGSTOP)
        tasks = Path(f"/proc/{self._process.pid}/task")
        deadline = time.monotonic() + timeout
        while not all(_stopped(task) for task in tasks.iterdir()):
            if time.monotonic() > deadline:
                raise ZooKeeperSetupError(f"ZooKeeper (pid {self._process.pid}) did not stop within {timeout:g}s")
            time.sleep(0.01)

    def thaw(self) -> None:
        os.kill(self._process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the JVM this object started (SIGTERM, then SIGKILL after 10 s), frozen or not."""
        if self._gate is not None:
            self._gate.close()
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGCONT)  # a suspended JVM would hold SIGTERM until resumed
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _stopped(task: Path) -> bool:
    """Whether a thread (a ``/proc/<pid>/task/<tid>`` dir) is stopped by a signal; one that ended counts."""
    try:
        stat = (task / "stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rindex(")") + 2] == "T"  # the state follows the command name, which may hold spaces


def load_dump(client, dump: Path, prefix: str = "", acl=None) -> int:
    """Create every znode of ``dump`` at ``prefix + path`` through the kazoo ``client``.

    Ephemeral znodes are created ephemeral (they live as long as ``client``'s session).
    ``acl`` (a list of kazoo ACLs) applies to every created node. Returns the number created.
    """
    entries = json.loads(Path(dump).read_text())
    count = 0
    for entry in sorted(entries, key=lambda e: e["path"].count("/")):
        path = prefix + entry["path"]
        data = base64.b64decode(entry["data_b64"]) if entry.get("data_b64") else b""
        if client.exists(path):
            client.set(path, data)
            continue
        client.create(path, data, acl=acl, ephemeral=bool(entry.get("ephemeral")), makepath=True)
        count += 1
    return count

