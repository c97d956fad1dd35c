"""The live-cluster helper itself: it starts the kit's real cluster, restarts a bookie, stops all of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from livebk import LiveCluster, listening


CLIENT_COMPILER_ONLY = "-XX:TieredStopAtLevel=1"  # what the suite's conftest gives every JVM a test starts


def _java_tool_options(pid: int) -> list[str]:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return next((v.split(b"=", 1)[1].decode().split() for v in environ if v.startswith(b"JAVA_TOOL_OPTIONS=")), [])


def test_a_jvm_a_test_starts_compiles_with_the_client_compiler_only():
    """The suite's time on two cores counts on it (a kit bookie's start 2.8 -> 1.7 CPU s); an option the JVM did
    not take would go unnoticed otherwise."""
    flags = subprocess.run(["java", "-XX:+PrintFlagsFinal", "-version"], capture_output=True, text=True, check=True)
    assert CLIENT_COMPILER_ONLY in os.environ["JAVA_TOOL_OPTIONS"].split()
    assert any(line.split()[:4] == ["intx", "TieredStopAtLevel", "=", "1"] for line in flags.stdout.splitlines())


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.live
def test_cluster_starts_writes_restarts_a_bookie_and_stops_everything(tmp_path):
    with LiveCluster(tmp_path / "bk") as cluster:
        assert all(listening(b.port) for b in cluster.bookies)
        assert cluster.metadata_uri == f"zk+hierarchical://127.0.0.1:{cluster.zk_port}/ledgers"
        cluster.write(seconds=3)
        assert "DONE created=" in cluster.wait_for_writer()
        assert not (cluster.run_dir / "writer.pid").exists()  # its pid may be another process's by the end
        bookie = cluster.bookies[1]
        assert f"bookiePort={bookie.port}" in bookie.conf.read_text()
        first_pid = bookie.pid
        bookie.stop()
        assert bookie.pid is None and not _running(first_pid) and not listening(bookie.port)
        bookie.start()
        assert bookie.running and bookie.pid != first_pid and listening(bookie.port)
        listed = cluster.shell("listbookies", "-rw")
        assert all(b.bookie_id in listed.stdout + listed.stderr for b in cluster.bookies), listed.stderr[-2000:]
        pids = [b.pid for b in cluster.bookies] + [int((cluster.run_dir / "zk.pid").read_text())]
        assert all(CLIENT_COMPILER_ONLY in _java_tool_options(pid) for pid in pids)
    assert not any(_running(pid) for pid in pids)
    assert not any(listening(port) for port in [cluster.zk_port, *(b.port for b in cluster.bookies)])


def test_a_pid_file_whose_pid_is_another_process_now_is_dropped_and_that_process_left_alone(tmp_path):
    # The writer ended long ago; its pid now belongs to some other process (here a sleep): stopping the cluster
    # must not signal it, as stop.sh would by the stale pid file.
    cluster = LiveCluster(tmp_path / "bk")
    cluster.run_dir.mkdir(parents=True)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                                 stdout=subprocess.PIPE, text=True)
    try:
        assert bystander.stdout.readline() == "up\n"  # exec'd: its command line is its own, not the forking one's
        for name in ("writer", "zk", "bookie1"):
            (cluster.run_dir / f"{name}.pid").write_text(f"{bystander.pid}\n")
        assert cluster.kit_pid("writer") is None and not (cluster.run_dir / "writer.pid").exists()
        cluster.stop_zookeeper()
        cluster.stop()
        assert bystander.poll() is None and list(cluster.run_dir.glob("*.pid")) == []
    finally:
        bystander.kill()
        bystander.wait()
        bystander.stdout.close()
