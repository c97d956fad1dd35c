"""The agent's share of a busy bookie host, on the real BookKeeper cluster of the livebk kit.

The kit's writer keeps the three bookies busy (ledgers of every digest type, GC and compaction every
few seconds). For --seconds, a client measures its add latency (bench/AddLatency.java, synchronous
1 KiB adds, ensemble 3 / write quorum 2) with no agent; then one agent per bookie runs (at its
default rate cap or --rate) and the same client measures again. Printed: the adds' median and p99
with and without the agents, and per agent its CPU seconds and share of a core, peak RSS, and the
bytes it read from the bookie's files per second (/proc/PID/io).

    python bench/bench_live_share.py                 # 60 s each way
    python bench/bench_live_share.py --seconds 300 --rate 20000000
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from livebk import LIVEBK, LiveCluster  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=60, help="how long each latency run lasts (default 60)")
    parser.add_argument("--rate", type=int, default=50_000_000, help="each agent's bytes_per_second (default 50 MB/s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp:
        tmp = Path(tmp)
        probe = compile_probe(tmp)
        with LiveCluster(tmp / "bk") as cluster:
            cluster.write(seconds=3 * args.seconds + 120, seed=7)  # load through both runs and the agents' start
            time.sleep(20)
            print("without agents:", latency(probe, cluster.metadata_uri, args.seconds), flush=True)
            agents = [start_agent(tmp, bookie, cluster.metadata_uri, args.rate) for bookie in cluster.bookies]
            try:
                time.sleep(5)
                before = {a.pid: sample(a.pid) for a in agents}
                started = time.monotonic()
                print("with agents:   ", latency(probe, cluster.metadata_uri, args.seconds), flush=True)
                elapsed = time.monotonic() - started
                for bookie, agent in zip(cluster.bookies, agents):
                    cpu0, read0, _ = before[agent.pid]
                    cpu1, read1, rss = sample(agent.pid)
                    print(f"agent of {bookie.name}: {cpu1 - cpu0:.1f} CPU s ({(cpu1 - cpu0) / elapsed:.1%} of a core), "
                          f"peak RSS {rss} MiB, read {(read1 - read0) / elapsed / 1e6:.2f} MB/s")
            finally:
                for agent in agents:
                    agent.terminate()
                    agent.wait(30)


def compile_probe(tmp: Path) -> list[str]:
    classes = tmp / "classes"
    classes.mkdir()
    classpath = f"{LIVEBK / 'lib'}/*"
    subprocess.run(["javac", "-cp", classpath, "-d", str(classes), str(REPO / "bench" / "AddLatency.java")], check=True)
    return ["java", "-Xmx256m", "-cp", f"{classes}:{classpath}", "AddLatency"]


def latency(probe: list[str], metadata_uri: str, seconds: int) -> str:
    done = subprocess.run([*probe, metadata_uri, str(seconds)], capture_output=True, text=True, timeout=seconds + 120)
    found = re.search(r"adds=\d+ median_us=\d+ p99_us=\d+", done.stdout)
    return found.group(0) if found else f"probe failed: {done.stderr[-500:]}"


def start_agent(tmp: Path, bookie, metadata_uri: str, rate: int) -> subprocess.Popen:
    config = tmp / f"{bookie.name}.toml"
    config.write_text(f'[bookie]\nconf = "{bookie.conf}"\nlog_files = ["{bookie.log}"]\n'
                      f'[metadata]\nuri = "{metadata_uri}"\n'
                      f'[agent]\nstate_dir = "{tmp / ("state-" + bookie.name)}"\nlisten = "127.0.0.1:0"\n'
                      f'period_days = {10 / 86400}\n[throttle]\nbytes_per_second = {rate}\n')
    return subprocess.Popen([sys.executable, "-m", "scanner.cli", "run", "--config", str(config)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def sample(pid: int) -> tuple[float, int, int]:
    """(CPU seconds, bytes read from storage, peak RSS in MiB) of a process so far."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    rss = int(re.search(r"VmHWM:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1)) // 1024
    return cpu, int(io["rchar"]), rss


if __name__ == "__main__":
    main()
