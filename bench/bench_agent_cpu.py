"""What the agent costs its host: CPU seconds per GB of entry logs verified, over one whole pass of `run`.

Runs `bookie-scanner run` on bookies that bench/scale_bookie.py generated (use bench_scale.py --keep, or
--generate here), with the agent's default rate (50 MB/s; `--rate 0` for unlimited), until its first pass over
the bookie has ended, and reads the process's CPU time (user + system, from /proc) then: the index read, the walk
of every log and the checkpoints all count, as they do on a bookie host. Peak RSS from /proc too.
`--scanner` may name several installs (e.g. one before a change and one after): they take turns.

    python bench/bench_agent_cpu.py --dir /data/bench --shape db-L10000-N100-S100-E1000 --shape db-L10000-N100-S65536-E3
    python bench/bench_agent_cpu.py --dir /data/bench --shape ... \
        --scanner /old/.venv/bin/bookie-scanner --scanner .venv/bin/bookie-scanner
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scale_bookie import GeneratedBookie, generated, is_generated  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")
PASS_TIMEOUT = 3600.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def health(state_dir: Path, pid: int) -> dict | None:
    try:
        info = json.loads((state_dir / "agent.json").read_text())
        if info.get("pid") != pid:
            return None
        with urllib.request.urlopen(f"http://{info['listen']}/health", timeout=5) as response:
            return json.loads(response.read())
    except (OSError, ValueError, KeyError):
        return None


def one_pass(scanner: Path, bookie: GeneratedBookie, rate: int, cpu: int | None) -> tuple[float, float, int, float]:
    """(CPU seconds, wall seconds, entries verified, peak RSS MiB) of the agent's first pass over ``bookie``."""
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as scratch:
        state = Path(scratch) / "state"
        config = Path(scratch) / "scanner.toml"
        # no start jitter: a fleet's agents spread their first pass over up to 10 minutes, which would only add
        # idle wall time here (the CPU figure is the same either way)
        config.write_text(f'[bookie]\nconf = "{bookie.bookie_conf}"\n[metadata]\nuri = "file:{bookie.dump}"\n'
                          f'[agent]\nstate_dir = "{state}"\nlisten = "127.0.0.1:0"\nperiod_days = 30\n'
                          'start_jitter_minutes = 0\n'
                          f'[throttle]\nbytes_per_second = {rate}\ndisk_backoff = false\n')
        environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        started = time.perf_counter()
        agent = subprocess.Popen([str(scanner), "run", "--config", str(config)], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, env=environment,
                                 preexec_fn=None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu})))
        try:
            while time.perf_counter() - started < PASS_TIMEOUT:
                found = health(state, agent.pid)
                if found and found["scanners"] and found["scanners"][0]["passes_completed"] >= 1:
                    used, wall, rss = cpu_seconds(agent.pid), time.perf_counter() - started, peak_rss_mib(agent.pid)
                    entries = sum(s["entries_verified"] for s in found["scanners"])
                    return used, wall, entries, rss
                if agent.poll() is not None:
                    raise SystemExit(f"{scanner} run exited {agent.returncode} before its first pass ended")
                time.sleep(0.2)
            raise SystemExit(f"{scanner}: no pass ended within {PASS_TIMEOUT:.0f} s")
        finally:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(timeout=60)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True, help="where bench_scale.py --keep left its bookies")
    parser.add_argument("--shape", action="append", required=True, help="a bookie's directory name under --dir")
    parser.add_argument("--scanner", type=Path, action="append",
                        help="a bookie-scanner command (repeatable; default: this checkout's .venv)")
    parser.add_argument("--rate", type=int, default=50_000_000, help="[throttle] bytes_per_second (0: unlimited)")
    parser.add_argument("--repeat", type=int, default=2, help="passes per scanner and shape; the least CPU counts")
    parser.add_argument("--cpu", type=int, help="pin the agent to this CPU")
    args = parser.parse_args()
    scanners = args.scanner or [REPOSITORY / ".venv" / "bin" / "bookie-scanner"]
    print(f"{'shape':>34} {'scanner':>40} {'GB':>6} {'entries':>11} {'cpu s':>7} {'wall s':>7} {'cpu s/GB':>9} "
          f"{'RSS MiB':>7}")
    for shape in args.shape:
        directory = args.dir / shape
        if not is_generated(directory):
            parser.error(f"{directory}: no generated bookie (run bench_scale.py --dir {args.dir} --keep first)")
        bookie = generated(directory)
        gigabytes = sum(p.stat().st_size for p in bookie.entry_logs) / 1e9
        best: dict[Path, tuple] = {}
        for _ in range(args.repeat):
            for scanner in scanners:  # the scanners take turns: a busy moment falls on each
                run = one_pass(scanner, bookie, args.rate, args.cpu)
                if scanner not in best or run[0] < best[scanner][0]:
                    best[scanner] = run
        for scanner, (used, wall, entries, rss) in best.items():
            print(f"{shape:>34} {str(scanner)[-40:]:>40} {gigabytes:>6.3f} {entries:>11,} {used:>7.2f} {wall:>7.1f} "
                  f"{used / gigabytes:>9.2f} {rss:>7.0f}", flush=True)


if __name__ == "__main__":
    main()
