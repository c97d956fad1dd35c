"""A real Spark standalone cluster on this machine: a master and workers started from pyspark's own ``spark-class``.

``with StandaloneCluster(directory, workers=2) as cluster:`` starts the master and the workers (each with
``cores`` cores), waits until every worker has registered, and offers ``cluster.url`` (``spark://...``);
leaving the block stops the workers, then the master (only the JVMs it started). Logs go to ``directory``.
With ``cpus``, worker N and everything it starts (its executors, their Python workers) run on CPU ``cpus[N]``
only, and the master on ``master_cpus``: a worker of one core that is also one CPU of its own. With
``cpu_budget``, worker N and everything it starts share a CPU budget of their own (:class:`cpu_budget.CpuBudget`,
that fraction of a CPU): each worker gets the same CPU whether it runs alone or beside others, as on hosts of
its own, and whatever else runs (the master, the application's driver) takes nothing from it.
"""

from __future__ import annotations

import os
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

from cpu_budget import CpuBudget
from zookeeper_server import free_port

REGISTERED = "Successfully registered with master"


class ClusterSetupError(RuntimeError):
    """The standalone cluster did not come up; the message names the log to read."""


class StandaloneCluster:
    def __init__(self, directory: Path, workers: int, cores: int = 1, memory: str = "2g",
                 cpus: list[int] | None = None, master_cpus: set[int] | None = None, cpu_budget: float | None = None):
        import pyspark

        if cpus is not None and len(cpus) != workers:
            raise ValueError(f"{workers} workers need {workers} CPUs to pin to, not {cpus}")
        self.spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
        self.directory, self.workers, self.cores, self.memory = Path(directory), workers, cores, memory
        self.cpus, self.master_cpus, self.cpu_budget = cpus, master_cpus, cpu_budget
        self.budgets = ExitStack()
        self.processes: list[subprocess.Popen] = []
        self.url = ""

    def __enter__(self) -> StandaloneCluster:
        port = free_port()
        self.url = f"spark://127.0.0.1:{port}"
        try:
            self._start("master", self.master_cpus, None, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(port), "--webui-port", str(free_port()))
            for number in range(self.workers):
                budget = None if self.cpu_budget is None else self.budgets.enter_context(
                    CpuBudget(f"spark-worker{number}", self.cpu_budget))
                self._start(f"worker{number}", None if self.cpus is None else {self.cpus[number]}, budget,
                            "org.apache.spark.deploy.worker.Worker", self.url,
                            "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                            "--webui-port", str(free_port()), "--work-dir", str(self.directory / f"work{number}"))
            self._wait_for_workers(timeout=120)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self, name: str, cpus: set[int] | None, budget: CpuBudget | None, main_class: str, *args: str) -> None:
        def placed() -> None:  # in the child before it runs Java; all it starts inherits both
            if cpus is not None:
                os.sched_setaffinity(0, cpus)
            if budget is not None:
                budget.join()

        with (self.directory / f"{name}.log").open("ab") as log:
            self.processes.append(subprocess.Popen([str(self.spark_class), main_class, *args], stdout=log,
                                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                   preexec_fn=placed))

    def _wait_for_workers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        logs = [self.directory / f"worker{number}.log" for number in range(self.workers)]
        while not all(REGISTERED in log.read_text(errors="replace") for log in logs):
            exited = [process.args[1] for process in self.processes if process.poll() is not None]
            if exited or time.monotonic() > deadline:
                raise ClusterSetupError(f"the standalone cluster did not come up ({', '.join(exited) or 'timeout'}); "
                                        f"logs in {self.directory}")
            time.sleep(0.2)

    def process_cpu(self) -> dict[int, float]:
        """CPU seconds so far of every live process of the cluster: the master, the workers, the executors
        and their Python workers (an executor may end without reaping its Python workers, whose time then
        never reaches its account: poll this while the application runs and keep each pid's last figure)."""
        found: dict[int, float] = {}
        pending = [process.pid for process in self.processes]
        while pending:
            pid = pending.pop()
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                children = [Path(task, "children").read_text().split() for task in Path(f"/proc/{pid}/task").iterdir()]
            except OSError:
                continue  # gone meanwhile
            found[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            pending += [int(child) for listed in children for child in listed]
        return found

    def __exit__(self, *exc_info) -> None:
        for process in reversed(self.processes):  # the workers first: they stop their executors
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.budgets.close()  # waits for what the workers started (their executors) to end
