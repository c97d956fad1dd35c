"""A real Apache BookKeeper 4.16.7 cluster for tests: the ``livebk`` kit beside the checkout.

``LiveCluster(run_dir)`` is a context manager around the kit's ``start.sh`` / ``writer.sh`` /
``stop.sh``: ZooKeeper and three bookies on 127.0.0.1 with free ports (bound to port 0 and read
back), everything under ``run_dir``. Leaving the ``with`` block stops everything it started, also
when the block raised, also bookies a test restarted; a block that did not raise also removes the
bookies' data (their logs and confs stay for the test to read).

    with LiveCluster(tmp_path / "bk") as cluster:
        cluster.write(seconds=10)             # the kit's real client: ledgers of every digest type
        cluster.wait_for_writer()
        bookie = cluster.bookies[0]           # bookie1: InterleavedLedgerStorage (.idx)
        bookie.conf, bookie.bookie_id, bookie.pid, bookie.ledger_dir
        bookie.stop(); ...change its files...; bookie.start()
        cluster.metadata_uri                  # zk+hierarchical://127.0.0.1:PORT/ledgers
        cluster.shell("readledger", "-l", "5")  # BookKeeper's own shell, with bookie1's conf

The tests FAIL (never skip) when java or the kit is missing: a JRE is part of the test install.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path


LIVEBK = Path(__file__).resolve().parents[2] / "shared" / "livebk"
LEDGER_PASSWORD = b"livebk"
BOOKIE_COUNT = 3
# What a writer's ack quorum did not wait for reaches the third bookie of a write set well within this on loopback
# (the default, 15 s, is for real networks and loaded bookies): the live tests' agents and scans wait this long for
# a ledger that just changed.
LIVE_SETTLE_SECONDS = 4
# bookie1 keeps .idx files, bookies 2 and 3 RocksDB; a fourth (optional) is a spare on RocksDB
STORAGE = ("interleaved", "db", "db", "db")
_START_ATTEMPTS = 3
# The JVM options start.sh gives a bookie, so a bookie restarted here runs as it did.
_BOOKIE_JAVA_OPTIONS = (
    "-Xmx256m", "-XX:MaxDirectMemorySize=128m", "-XX:+UseSerialGC", "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.io=ALL-UNNAMED",
)


class LiveClusterError(RuntimeError):
    """The cluster could not be started or a process of it did not behave: the message says why."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports the kernel just handed out as free on 127.0.0.1."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _runs_kit(pid: int, kit: Path) -> bool:
    """Whether process ``pid`` is alive and one of the kit's (its command line names the kit's dir: a JVM's class
    path, or a script of the kit's in the moment before its ``java &`` execs).

    A pid file outlives its process, and on a busy machine (pid_max 32768, JVM threads take pids too) the pid
    can come back within minutes as another process, which the kit's stop.sh would then kill.
    """
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    # Empty while the process execs (or once it exited, not yet reaped): no other program's, as far as one can tell.
    return not cmdline or f"{kit}/".encode() in cmdline


def _end_process(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM, then SIGKILL if it still runs after ``timeout`` seconds."""
    _end_processes([pid], timeout)


def _end_processes(pids, timeout: float = 20.0, kill: bool = False) -> None:
    """SIGTERM to each at once, then SIGKILL to those still running after ``timeout`` seconds (at once if ``kill``)."""
    running = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
            running.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    while (running := [pid for pid in running if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in running:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def side_by_side(action, bookies) -> None:
    """``action(bookie)`` (``LiveBookie.stop``, ``LiveBookie.start``) for each of ``bookies`` at once: a bookie's
    clean stop or its start takes seconds of waiting of its own."""
    bookies = list(bookies)
    with ThreadPoolExecutor(len(bookies)) as pool:
        list(pool.map(action, bookies))  # (raises the first failure)


@dataclass
class LiveBookie:
    """One bookie of a LiveCluster: ``number`` 1..3 as the kit names them."""

    cluster: "LiveCluster"
    number: int
    port: int
    _process: subprocess.Popen | None = None  # set once this process started the bookie again

    @property
    def name(self) -> str:
        return f"bookie{self.number}"

    @property
    def conf(self) -> Path:
        """The bookie's own ``bk_server.conf`` (give it to the scanner as is)."""
        return self.cluster.run_dir / f"bk{self.number}.conf"

    @property
    def bookie_id(self) -> str:
        host = f"127.0.0.{self.number}" if self.cluster.distinct_addresses else "127.0.0.1"
        return self.cluster.custom_ids.get(self.number, f"{host}:{self.port}")

    @property
    def storage(self) -> str:
        return STORAGE[self.number - 1]

    @property
    def home(self) -> Path:
        return self.cluster.run_dir / self.name

    @property
    def ledger_dir(self) -> Path:
        """The ledger directory (entry logs; bookie1's .idx files; bookie2's RocksDB) with its ``current``."""
        return self.home / "ledgers" / "current"

    @property
    def log(self) -> Path:
        return self.cluster.run_dir / f"{self.name}.log"

    @property
    def _pid_file(self) -> Path:
        return self.cluster.run_dir / f"{self.name}.pid"

    @property
    def pid(self) -> int | None:
        """The running bookie's process id, None while it is stopped."""
        if self._process is not None:
            return self._process.pid if self._process.poll() is None else None
        return self.cluster.kit_pid(self.name)

    @property
    def started_here(self) -> bool:
        """Started again by this process (not by start.sh): its child, to be reaped when it ends."""
        return self._process is not None

    @property
    def running(self) -> bool:
        return self.pid is not None

    def ask_to_stop(self, kill: bool = False) -> None:
        """SIGTERM (SIGKILL if ``kill``) to the bookie if this process started it again, not waited for (``stop``
        waits, and reaps it)."""
        if self._process is not None:
            self._process.kill() if kill else self._process.terminate()

    def stop(self, timeout: float = 20.0) -> None:
        """End the bookie's JVM (SIGTERM: a clean shutdown, as ``kill`` in the kit's README); SIGKILL if it still
        runs after ``timeout`` seconds."""
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        elif (pid := self.pid) is not None:
            _end_process(pid, timeout)
        self._pid_file.unlink(missing_ok=True)

    def start(self, timeout: float = 60.0) -> None:
        """Start the bookie again as start.sh does, and wait until it serves and is registered.

        It listens before it has replayed its journal; only once registered in ZooKeeper does it serve.
        """
        if self.running:
            raise LiveClusterError(f"{self.name} is already running (pid {self.pid})")
        with open(self.log, "ab") as log:
            process = subprocess.Popen(
                self.cluster.kit_java("org.apache.bookkeeper.server.Main", "--conf", str(self.conf)),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._process = process
        self._pid_file.write_text(f"{process.pid}\n")
        deadline = time.monotonic() + timeout
        while not listening(self.port):
            if process.poll() is not None:
                raise LiveClusterError(f"{self.name} exited with status {process.returncode}: see {self.log}")
            if time.monotonic() > deadline:
                raise LiveClusterError(
                    f"{self.name} does not listen on {self.port} after {timeout:.0f} s: see {self.log}")
            time.sleep(0.2)
        if not self.cluster.registered(self.bookie_id, max(1.0, deadline - time.monotonic())):
            raise LiveClusterError(f"{self.name} did not register in ZooKeeper within {timeout:.0f} s: see {self.log}")

    def restart(self) -> None:
        self.stop()
        self.start()


class LiveCluster:
    """ZooKeeper and three bookies of the livebk kit under ``run_dir`` (see the module doc)."""

    def __init__(self, run_dir: Path, kit: Path = LIVEBK, bookie_count: int = BOOKIE_COUNT,
                 custom_ids: dict[int, str] | None = None, distinct_addresses: bool = False):
        """``custom_ids``: bookie number -> its custom ``bookieId`` (registered under it; its address only there);
        ``distinct_addresses``: bookie N advertises 127.0.0.N (its id 127.0.0.N:PORT), so racks can tell them apart."""
        if not 3 <= bookie_count <= 6:
            raise ValueError(f"the kit runs 3 to 6 bookies, not {bookie_count}")
        self.run_dir = Path(run_dir)
        self.kit = Path(kit)
        self.bookie_count = bookie_count
        self.custom_ids = dict(custom_ids or {})
        self.distinct_addresses = distinct_addresses
        self._zookeeper: subprocess.Popen | None = None  # set once this process started ZooKeeper again
        self.zk_port: int | None = None
        self.bookies: list[LiveBookie] = []

    # -- lifecycle --------------------------------------------------------------------------------

    def __enter__(self) -> "LiveCluster":
        self.start()
        return self

    def __exit__(self, exc_type, *exc_info) -> None:
        self.stop(clean=False)
        if exc_type is None:  # the bookies' data (a few hundred MB a cluster) goes; their logs and confs stay
            for bookie in self.bookies:
                shutil.rmtree(bookie.home, ignore_errors=True)

    def start(self, timeout: float = 180.0) -> None:
        if shutil.which("java") is None:
            raise LiveClusterError("java is not installed (Debian's default-jre-headless; ./dev test installs it)")
        if not (self.kit / "start.sh").is_file():
            raise LiveClusterError(f"the livebk kit is not at {self.kit}")
        failures = []
        # Ports picked as free can be taken before the JVMs bind them: then try fresh ones.
        for _ in range(_START_ATTEMPTS):
            self.zk_port, *ports = free_ports(1 + self.bookie_count)
            self.bookies = [LiveBookie(self, n, port) for n, port in enumerate(ports, start=1)]
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir.mkdir(parents=True)
            try:
                started = subprocess.run(
                    [str(self.kit / "start.sh"), str(self.run_dir), str(self.zk_port), *map(str, ports)],
                    stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                    env={**os.environ, **{f"LIVEBK_BOOKIE_ID_{n}": name for n, name in self.custom_ids.items()},
                         **({"LIVEBK_DISTINCT_ADDRESSES": "1"} if self.distinct_addresses else {})})
            except subprocess.TimeoutExpired:
                self.stop()
                failures.append(f"start.sh took more than {timeout:.0f} s")
                continue
            if started.returncode == 0 and all(self.registered(b.bookie_id, timeout=60) for b in self.bookies):
                return
            self.stop()
            failures.append(started.stderr.strip() or f"start.sh exited with {started.returncode}")
        raise LiveClusterError("the live cluster did not start: " + " | ".join(failures))

    def kit_pid(self, name: str) -> int | None:
        """The pid in ``name``.pid while that process is the kit's; a stale pid file (its process gone, the pid
        perhaps another process's now) is removed, so nothing here or in stop.sh signals that pid."""
        pid_file = self.run_dir / f"{name}.pid"
        try:
            pid = int(pid_file.read_text())
        except (FileNotFoundError, ValueError):
            return None
        if _runs_kit(pid, self.kit):
            return pid
        pid_file.unlink(missing_ok=True)
        return None

    def _end(self, name: str) -> None:
        """End the kit's process ``name`` (writer, zk, autorecovery) by its pid file, if it runs; the file goes."""
        if (pid := self.kit_pid(name)) is not None:
            _end_process(pid)
        (self.run_dir / f"{name}.pid").unlink(missing_ok=True)

    def stop(self, clean: bool = True) -> None:
        """Stop the writer, the bookies and ZooKeeper, whatever started them: all but ZooKeeper at once (a bookie's
        clean shutdown takes a second or two, one after another in stop.sh), then ZooKeeper, which they leave.
        Not ``clean`` (the end of a test: nothing reads the cluster after), every process is killed at once."""
        # Bookies started again from here are this process's children: signalled with the others, then reaped (a
        # zombie would look alive to a signal, and stop.sh would wait on it); stop.sh then ends what is left.
        children = [bookie for bookie in self.bookies if bookie.started_here]
        for bookie in children:
            bookie.ask_to_stop(kill=not clean)
        if self._zookeeper is not None and not clean:
            self._zookeeper.kill()
        _end_processes((pid for name in ("writer", "autorecovery", *(b.name for b in self.bookies if b not in children),
                                         *(() if clean else ("zk",)))
                        if (pid := self.kit_pid(name)) is not None), kill=not clean)
        for bookie in children:
            bookie.stop()
        if self._zookeeper is not None and self._zookeeper.poll() is None:
            self._zookeeper.terminate()
        if self._zookeeper is not None:
            self._zookeeper.wait(timeout=30)
            (self.run_dir / "zk.pid").unlink(missing_ok=True)
        if self.run_dir.is_dir():
            for pid_file in self.run_dir.glob("*.pid"):
                self.kit_pid(pid_file.stem)  # stop.sh kills by pid files: none may name a pid reused since
            subprocess.run([str(self.kit / "stop.sh"), str(self.run_dir)], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=120)

    # -- what tests use -------------------------------------------------------------------------------

    @property
    def metadata_uri(self) -> str:
        return f"zk+hierarchical://127.0.0.1:{self.zk_port}/ledgers"

    @property
    def zk_connect_string(self) -> str:
        return f"127.0.0.1:{self.zk_port}"

    def registered(self, bookie_id: str, timeout: float = 60.0) -> bool:
        """Wait until ``bookie_id`` is registered as available (writable); False if not within ``timeout``."""
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.zk_connect_string, timeout=10)
        client.start(timeout=10)
        try:
            deadline = time.monotonic() + timeout
            while client.exists(f"/ledgers/available/{bookie_id}") is None:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.2)
            return True
        finally:
            client.stop()
            client.close()

    def bookie(self, bookie_id: str) -> LiveBookie:
        return next(b for b in self.bookies if b.bookie_id == bookie_id)

    def write(self, seconds: int, seed: int = 42) -> None:
        """Start the kit's writer (the real BookKeeper client) for ``seconds``, in the background."""
        subprocess.run([str(self.kit / "writer.sh"), str(self.run_dir), str(self.zk_port), str(seconds), str(seed)],
                       stdin=subprocess.DEVNULL, check=True, capture_output=True, timeout=60)

    def write_together(self, seconds: int, seeds, timeout: float = 300.0) -> None:
        """Several of the kit's writers at once (one per seed, each with its own log), waited for: ledgers are
        written side by side, so each entry log holds records of several, as on a bookie of many clients."""
        java = shutil.which("java") or "java"
        writers = []
        for seed in seeds:
            with open(self.run_dir / f"writer-{seed}.log", "wb") as log:
                writers.append(subprocess.Popen(
                    [java, "-Xmx256m", "-XX:+UseSerialGC", "-Dio.netty.tryReflectionSetAccessible=true",
                     "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens",
                     "java.base/jdk.internal.misc=ALL-UNNAMED", "-cp", f"{self.kit / 'lib'}/*", "Writer",
                     self.metadata_uri, str(seconds), str(seed)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        try:
            for seed, writer in zip(seeds, writers):
                writer.wait(timeout=timeout)
                log = (self.run_dir / f"writer-{seed}.log").read_text(errors="replace")
                if "DONE" not in log:
                    raise LiveClusterError(f"the writer of seed {seed} did not finish: {log[-2000:]}")
        finally:
            for writer in writers:
                if writer.poll() is None:
                    writer.kill()
                    writer.wait()

    def fill(self, ledgers: int, seed: int, side_by_side: int = 4, deletes: str = "half",
             timeout: float = 300.0) -> str:
        """Write ``ledgers`` closed ledgers, ``side_by_side`` at a time (``tests/live/LedgerFill.java``: BookKeeper's
        own client, pipelined adds), and delete about half of the older ones as it goes (``deletes="half"``), none
        (``"none"``), or all once written (``"all"``: ledgers that only rotate the logs past those written before,
        and leave nothing just closed for a pass to wait on); waited for. Its output.

        Where a test needs data to damage, this writes it in seconds; the kit's writer (``write``) is for load
        that lasts a time."""
        done = subprocess.run(
            self.kit_java("LedgerFill", self.metadata_uri, str(ledgers), str(seed), str(side_by_side),
                          deletes, classes=self._compiled(_FILL_SOURCE)),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0 or "DONE" not in done.stdout:
            raise LiveClusterError(f"LedgerFill exited with {done.returncode}: {done.stdout[-1500:]}"
                                   f"{done.stderr[-3000:]}")
        return done.stdout

    def stop_writer(self) -> None:
        """End the writer before its time is up (its open ledger stays open, as a crashed client's would)."""
        self._end("writer")

    def wait_for_writer(self, timeout: float = 300.0) -> str:
        """Wait until the writer has finished; its log. LiveClusterError if it failed or hangs."""
        deadline = time.monotonic() + timeout
        while self.kit_pid("writer") is not None:
            if time.monotonic() > deadline:
                self._end("writer")
                raise LiveClusterError(f"the writer still runs after {timeout:.0f} s")
            time.sleep(0.5)
        log = (self.run_dir / "writer.log").read_text(errors="replace")
        if "DONE" not in log:
            raise LiveClusterError("the writer did not finish: " + log[-2000:])
        return log

    def stop_zookeeper(self) -> None:
        """End the cluster's ZooKeeper (SIGTERM), as an outage of the ensemble would."""
        self._end("zk")

    def start_zookeeper(self, timeout: float = 60.0) -> None:
        """Start the ZooKeeper ``stop_zookeeper`` ended again, on its data dir and port, as start.sh does."""
        java = shutil.which("java") or "java"
        with open(self.run_dir / "zk.log", "ab") as log:
            process = subprocess.Popen(
                [java, "-Xmx128m", "-XX:+UseSerialGC", f"-Dlog4j2.configurationFile={self.kit / 'log4j2.xml'}",
                 "-cp", f"{self.kit / 'lib'}/*", "org.apache.zookeeper.server.ZooKeeperServerMain",
                 str(self.run_dir / "zk" / "zoo.cfg")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        (self.run_dir / "zk.pid").write_text(f"{process.pid}\n")
        self._zookeeper = process
        deadline = time.monotonic() + timeout
        while not listening(self.zk_port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise LiveClusterError(f"ZooKeeper did not come back: see {self.run_dir / 'zk.log'}")
            time.sleep(0.2)

    def start_autorecovery(self, *settings: str) -> None:
        """Start BookKeeper's own AutoRecoveryMain (the Auditor and a ReplicationWorker) with the kit's script.

        ``settings`` are ``KEY=VALUE`` overrides of its configuration; its log is ``autorecovery.log``.
        """
        started = subprocess.run([str(self.kit / "autorecovery.sh"), str(self.run_dir), *settings],
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        if started.returncode != 0:
            raise LiveClusterError(f"autorecovery did not start: {started.stderr.strip()}")

    def stop_autorecovery(self) -> None:
        self._end("autorecovery")

    @property
    def autorecovery_log(self) -> str:
        try:
            return (self.run_dir / "autorecovery.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def read_every_copy(self, ledger_ids, timeout: float = 300.0) -> "ClientView":
        """Every entry of ``ledger_ids`` read in order from every bookie the current metadata names for it.

        Done by BookKeeper's own client (``tests/live/ReadEveryCopy.java``, compiled here against the kit's
        jars), which checks each copy's digest with BookKeeper's DigestManager.
        """
        done = subprocess.run(
            self.kit_java("ReadEveryCopy", self.metadata_uri, *map(str, ledger_ids),
                          classes=self._compiled(_READER_SOURCE)),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise LiveClusterError(f"ReadEveryCopy exited with {done.returncode}: {done.stderr[-3000:]}")
        return ClientView.parse(done.stdout)

    def split_ledger(self, leaving: LiveBookie, joining: LiveBookie, entries_per_half: int = 20,
                     timeout: float = 180.0) -> int:
        """A closed ledger in two fragments, written by BookKeeper's own client (``tests/live/SplitLedger.java``):
        its first half on the three bookies running now (``leaving`` among them, ``joining`` stopped), its second
        on the same three with ``leaving`` replaced by ``joining``. Both run again afterwards. Its id."""
        tool = subprocess.Popen(
            self.kit_java("SplitLedger", self.metadata_uri, str(entries_per_half),
                          classes=self._compiled(_SPLITTER_SOURCE)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        watchdog = threading.Timer(timeout, tool.kill)
        watchdog.start()
        try:
            first = []
            for line in tool.stdout:  # BookKeeper's client logs to the same stream
                if line.startswith("first "):
                    first = line.split()
                    break
            if first[:1] != ["first"] or leaving.bookie_id not in first[2].split(","):
                raise LiveClusterError(f"SplitLedger's first half is not on {leaving.name}: {first}; "
                                       f"{tool.stderr.read()[-3000:] if tool.poll() is not None else ''}")
            joining.start()
            time.sleep(2)  # the client sees the new registration through its watch on the bookies' znodes
            leaving.stop()
            tool.stdin.write("go\n")
            tool.stdin.flush()
            out, err = tool.communicate()
        finally:
            watchdog.cancel()
            if tool.poll() is None:
                tool.kill()
                tool.wait()
        ensembles = [line.split()[2].split(",") for line in out.splitlines() if line.startswith("ensemble ")]
        if tool.returncode != 0 or len(ensembles) != 2 or joining.bookie_id not in ensembles[1]:
            raise LiveClusterError(f"SplitLedger exited with {tool.returncode}, ensembles {ensembles}: {err[-3000:]}")
        leaving.start()
        return int(first[1])

    def kit_java(self, main_class: str, *args: str, classes: Path | None = None) -> list[str]:
        """The command line of a JVM running ``main_class`` of the kit's jars (or of ``classes`` compiled against
        them) as start.sh runs a bookie: its JVM options, its log configuration."""
        class_path = f"{self.kit / 'lib'}/*" + (f":{classes}" if classes is not None else "")
        return [shutil.which("java") or "java", f"-Dlog4j2.configurationFile={self.kit / 'log4j2.xml'}",
                *_BOOKIE_JAVA_OPTIONS, "-cp", class_path, main_class, *args]

    def _compiled(self, source: Path) -> Path:
        """The directory of ``source``'s class, compiled against the kit's jars once for every test of this machine
        that runs this source (by its content: a changed source is compiled anew)."""
        digest = hashlib.sha256(source.read_bytes() + str(self.kit).encode()).hexdigest()[:16]
        classes = Path(tempfile.gettempdir()) / "livebk-classes" / f"{source.stem}-{digest}"
        if not (classes / f"{source.stem}.class").is_file():
            javac = shutil.which("javac")
            if javac is None:
                raise LiveClusterError("javac is not installed (Debian's default-jdk-headless; ./dev test installs it)")
            classes.parent.mkdir(exist_ok=True)
            # compiled aside, then renamed into place: a test beside this one never sees half a directory
            scratch = Path(tempfile.mkdtemp(prefix=f".{source.stem}-", dir=classes.parent))
            subprocess.run([javac, "-proc:none", "-nowarn", "-cp", f"{self.kit / 'lib'}/*", "-d", str(scratch),
                            str(source)], check=True, capture_output=True, timeout=300)
            try:
                scratch.rename(classes)
            except OSError:  # compiled by another test meanwhile
                shutil.rmtree(scratch)
        return classes

    def shell(self, *args: str, conf: Path | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """Run BookKeeper's own ``BookieShell`` (a real client) with a bookie's conf (bookie1's by default)."""
        return subprocess.run(
            self.kit_java("org.apache.bookkeeper.bookie.BookieShell", "-conf", str(conf or self.bookies[0].conf),
                          *args),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


@dataclass(frozen=True)
class CopyRead:
    """One copy of an entry as BookKeeper's client read it from one bookie."""

    ledger_id: int
    bookie_id: str
    entry_id: int
    rc: int  # 0: read
    digest: str  # "ok", "bad", or "-" when nothing was read
    payload_sha256: str  # "-" when nothing verified

    @property
    def good(self) -> bool:
        return self.rc == 0 and self.digest == "ok"


@dataclass
class ClientView:
    """What ``LiveCluster.read_every_copy`` saw: ledger states and every copy read."""

    states: dict[int, str]  # ledger id -> CLOSED, OPEN, ... or "deleted"
    copies: list[CopyRead]

    @classmethod
    def parse(cls, out: str) -> "ClientView":
        states, copies = {}, []
        for line in out.splitlines():
            fields = line.split("\t")
            if fields[0] == "ledger":
                states[int(fields[1])] = fields[2]
            elif fields[0] == "copy":
                copies.append(CopyRead(int(fields[1]), fields[2], int(fields[3]), int(fields[4]), fields[5], fields[6]))
        return cls(states, copies)

    def bad(self) -> list[CopyRead]:
        """Copies that did not read, or read with a digest that fails."""
        return [c for c in self.copies if not c.good]

    def payloads(self) -> dict[tuple[int, int], set[str]]:
        """(ledger, entry) -> the payload digests of its good copies (one element when all agree)."""
        out: dict[tuple[int, int], set[str]] = {}
        for c in self.copies:
            if c.good:
                out.setdefault((c.ledger_id, c.entry_id), set()).add(c.payload_sha256)
        return out


_READER_SOURCE = Path(__file__).resolve().parent / "live" / "ReadEveryCopy.java"
_FILL_SOURCE = _READER_SOURCE.with_name("LedgerFill.java")
_SPLITTER_SOURCE = _READER_SOURCE.with_name("SplitLedger.java")
