"""The SparkSession the audit runs on: embedded ``local[*]`` by default, quiet, one-line errors."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

DEFAULT_MASTER = "local[*]"
TASKS_PER_CORE = 4  # tasks per core in every stage: one slow or late task does not hold the others back
# What sets a stage's tasks, each to TASKS_PER_CORE x the cores unless the deployer set it:
_SPREAD = (
    # a shuffle's: Spark's 200 would be 200 Python tasks per judged shuffle on a small cluster, and a cached
    # plan keeps its shuffle's partitions (adaptive execution does not coalesce them)
    "spark.sql.shuffle.partitions",
    # a file read's (the dump, the exports): by default about one split per core, so with a second executor
    # late or a split slower than the other, one executor reads the whole stage while the other waits
    "spark.sql.files.minPartitionNum",
    # listing the exports' bookie directories: by default one task per bookie beyond 32 of them
    "spark.sql.sources.parallelPartitionDiscovery.parallelism",
)
# The driver of a cluster runs no task: it plans the audit's few dozen queries and schedules their tasks, so
# the JIT's optimizing tier (C2) mostly compiles code that runs too little to pay it back. Measured at 10^5
# ledgers on a standalone cluster: the driver JVM's CPU halved (35-37 -> 18 s), the audit no slower. Local
# mode keeps C2: there the driver's JVM is also the executor.
CLUSTER_DRIVER_JIT = "-XX:TieredStopAtLevel=1"
# An executor of a cluster runs the tasks, so it keeps C2; but each executor JVM compiles Spark's code and the
# code Spark generates for every query anew, whatever its share of the audit: a cost each added executor pays
# again. With the JIT's thresholds tripled, the audit's hot loops are still compiled, by C2 as before, and much
# of the lukewarm rest (set-up, planning, code run a few thousand times per query) is not. Measured at 10^6
# ledgers on two one-core executors: each executor's JIT threads 26 -> 20 CPU s, its task threads unchanged
# (28 CPU s); at 10^5, 19 -> 13. (C1 alone, as on the driver, doubled the task threads' CPU at 10^6.)
CLUSTER_EXECUTOR_JIT = "-XX:CompileThresholdScaling=3"

# Spark's own default logging prints INFO banners and a native-library warning on every start.
_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
"""


class SparkUnavailable(Exception):
    """Spark cannot start here (no Java, no pyspark, a master that does not answer); one line."""


def under_spark_submit() -> bool:
    """True when this Python driver was launched by ``spark-submit``, which already chose the master."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def java_available() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        return (Path(java_home) / "bin" / "java").exists()
    return shutil.which("java") is not None


@contextlib.contextmanager
def running_spark(app_name: str, master: str | None = None, log_path: Path | None = None) -> Iterator:
    """``spark_session`` for the length of a command; stopped after it unless it was already running (a notebook, a test).

    With ``log_path``, the JVM's own output (Spark's and Hadoop's logs, Java stack traces) goes to that
    file instead of the terminal, and py4j's Python logging is silenced.
    """
    was_running = _spark_running()
    with _jvm_output_to(log_path):
        session = spark_session(app_name, master)
    try:
        yield session
    finally:
        if not was_running:
            session.stop()


@contextlib.contextmanager
def _jvm_output_to(log_path: Path | None) -> Iterator[None]:
    """While the JVM starts, point file descriptor 2 at ``log_path``: the JVM keeps it as its stderr."""
    if log_path is None:
        yield
        return
    logging.getLogger("py4j").setLevel(logging.CRITICAL)  # its errors repeat, in Python, what the JVM logged
    sys.stderr.flush()
    saved = os.dup(2)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(log_fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log_fd)


def _spark_running() -> bool:
    try:
        from pyspark import SparkContext
    except ImportError:
        return False  # spark_session says so
    return SparkContext._active_spark_context is not None


def spark_session(app_name: str, master: str | None = None, conf: dict[str, str] | None = None):
    """A SparkSession on ``master`` (default: local[*], or what spark-submit chose), logging at WARN.

    An already running session is returned as it is. Raises SparkUnavailable with a one-line reason
    when Spark cannot start.
    """
    try:
        from pyspark.sql import SparkSession
        import pandas  # noqa: F401 (pyspark runs the audit's Arrow steps only with it, and says so only once they run)
    except ImportError as exc:
        raise SparkUnavailable(f"the audit runs on Spark and {exc.name} is not installed: "
                               "pip install 'bookie-scanner[audit]'") from None
    submitted = under_spark_submit()
    if not submitted and not java_available():
        raise SparkUnavailable("Spark needs Java 17 or newer: install a JDK or set JAVA_HOME")
    # embedded Spark starts Python workers with `python3` unless told; they need this interpreter's packages
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if (master or ("" if submitted else DEFAULT_MASTER)).startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # one machine: no need to guess a routable address
    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    if master is not None or not submitted:
        builder = builder.master(master or DEFAULT_MASTER)
    if not submitted:
        options = f"-Dlog4j2.configurationFile={_log_config_path()}"
        if not (master or DEFAULT_MASTER).startswith("local"):
            options += f" {CLUSTER_DRIVER_JIT}"
            # prepended to the executors' spark.executor.extraJavaOptions, whose flags come later and win
            builder = builder.config("spark.executor.defaultJavaOptions", CLUSTER_EXECUTOR_JIT)
        builder = builder.config("spark.driver.extraJavaOptions", options)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # py4j and pyspark raise several unrelated types when the JVM or master fails
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SparkUnavailable(f"Spark did not start on {master or DEFAULT_MASTER}: {first_line}") from None
    session.sparkContext.setLogLevel("WARN")
    for key in _SPREAD:
        if not session.sparkContext.getConf().contains(key):
            session.conf.set(key, str(tasks(session)))
    return session


def tasks(spark) -> int:
    """How many tasks a stage of the audit is split into: ``TASKS_PER_CORE`` per core of the cluster (Spark's
    ``defaultParallelism``: the cores of the executors registered so far, at least 2, or
    ``spark.default.parallelism`` when set, as a deployer whose executors register late should)."""
    return spark.sparkContext.defaultParallelism * TASKS_PER_CORE


def _log_config_path() -> str:
    handle, path = tempfile.mkstemp(prefix="bookie-scanner-log4j2-", suffix=".properties")
    with os.fdopen(handle, "w") as out:
        out.write(_LOG4J2)
    atexit.register(os.unlink, path)
    return path
