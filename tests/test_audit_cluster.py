"""The audit on a real Spark standalone cluster (a master and two workers of one core each), as the README runs it.

The same violations as on local Spark: with ``bookie-scanner audit --master spark://...`` (metadata from
a real ZooKeeper, read by the executors) and with ``spark-submit`` of the job file and the package as a
zip (metadata from the dump). Both workers run executors of each audit.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from audit_exports import DUMP, damaged_exports  # noqa: F401 (fixture)
from scanner.audit.spark_session import CLUSTER_EXECUTOR_JIT
from scanner.cli import main
from spark_cluster import StandaloneCluster
from spark_session import spark  # noqa: F401 (fixture)

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1, memory="1g") as running:
        yield running


@pytest.fixture(scope="module")
def local_report(spark, damaged_exports):  # noqa: F811 (fixtures)
    return _in_process_report(damaged_exports)


def _in_process_report(exports: Path) -> dict:
    from contextlib import redirect_stdout
    from io import StringIO

    out = StringIO()
    with redirect_stdout(out):
        assert main(["audit", "--exports", str(exports), "--metadata", f"file:{DUMP}", "--format", "json"]) == 1
    return json.loads(out.getvalue())


def _python_environment(tmp_path: Path) -> dict[str, str]:
    """What an operator sets for a cluster: the Python (with the package's dependencies) the workers run."""
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "TMPDIR": str(tmp_path)}


def _apps_run_by(cluster: StandaloneCluster) -> list[set[str]]:
    """Per worker, the applications it ran executors for (their work directories)."""
    return [{app.name for app in (cluster.directory / f"work{n}").glob("app-*")} for n in range(cluster.workers)]


def _ran_on_both_workers(cluster: StandaloneCluster, before: list[set[str]]) -> bool:
    return all(after - earlier for after, earlier in zip(_apps_run_by(cluster), before))


def _executor_jit_flags(cluster: StandaloneCluster, before: list[set[str]]) -> list[set[str]]:
    """Per executor of the applications run since ``before``, which of ``CLUSTER_EXECUTOR_JIT``'s flags its JVM
    was started with (a standalone worker writes the executor's command line atop the executor's stderr)."""
    flags = CLUSTER_EXECUTOR_JIT.split()
    found = []
    for n, earlier in enumerate(before):
        for app in (cluster.directory / f"work{n}").glob("app-*"):
            if app.name not in earlier:
                for stderr in app.glob("*/stderr"):
                    command = stderr.read_text().splitlines()[0]
                    assert command.startswith("Spark Executor Command:"), command
                    found.append({flag for flag in flags if f'"{flag}"' in command})
    return found


def test_audit_with_master_on_the_cluster_reading_zookeeper_finds_what_local_spark_finds(
        cluster, local_report, damaged_exports, zookeeper, zk_load_dump, tmp_path):  # noqa: F811 (fixtures)
    chroot = zk_load_dump(DUMP)
    before = _apps_run_by(cluster)
    done = subprocess.run(
        [sys.executable, "-m", "scanner.cli", "audit", "--exports", str(damaged_exports),
         "--metadata", f"zk://{zookeeper.connect_string}{chroot}/ledgers", "--master", cluster.url, "--format", "json"],
        capture_output=True, text=True, timeout=600, env=_python_environment(tmp_path))
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["violations"] == local_report["violations"]
    assert sum(v["entry_count"] or 0 for v in report["violations"]) > 300  # the damaged copies, entry by entry
    assert report["summary"]["ledgers_checked"] == local_report["summary"]["ledgers_checked"]
    assert _ran_on_both_workers(cluster, before)
    assert _executor_jit_flags(cluster, before) == [set(CLUSTER_EXECUTOR_JIT.split())] * 2


def test_spark_submit_as_the_readme_documents_finds_what_local_spark_finds(cluster, local_report, damaged_exports,
                                                                            tmp_path):  # noqa: F811 (fixture)
    environment = _python_environment(tmp_path)
    package = tmp_path / "bookie-scanner.zip"
    subprocess.run([sys.executable, "-m", "zipfile", "-c", str(package), "scanner", "throttle"], cwd=REPO, check=True)
    job_file = subprocess.run([sys.executable, "-c", "import scanner.spark_submit as s; print(s.__file__)"],
                              capture_output=True, text=True, check=True).stdout.strip()
    spark_submit = shutil.which("spark-submit", path=os.path.dirname(sys.executable)) or "spark-submit"
    before = _apps_run_by(cluster)
    done = subprocess.run(
        [spark_submit, "--master", cluster.url, "--py-files", str(package), job_file,
         "--exports", str(damaged_exports), "--metadata", f"file:{DUMP}", "--format", "json"],
        capture_output=True, text=True, timeout=600, env=environment, cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["violations"] == local_report["violations"]
    assert _ran_on_both_workers(cluster, before)
    assert _executor_jit_flags(cluster, before) == [set(), set()]  # the deployer's JVM options, not the audit's
