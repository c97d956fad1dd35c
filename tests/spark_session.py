"""One local Spark for the whole test session (``local[2]``), shared by every audit test module.

Import the ``spark`` fixture into a test module (``from spark_session import spark``). Modules that
import it get the same running session (Spark keeps one per process); it is stopped at the end, its JVM too.
"""

from __future__ import annotations

import pytest

from scanner.audit.spark_session import spark_session


@pytest.fixture(scope="session")
def spark():
    session = spark_session("bookie-scanner tests", "local[2]", conf={
        "spark.sql.shuffle.partitions": "4",  # the corpus is tiny; 200 shuffle tasks would be all overhead
        "spark.ui.enabled": "false",
    })
    yield session
    from pyspark import SparkContext

    if SparkContext._gateway is None:
        return  # each module that imports this fixture has its own copy of it: another copy's end ended Spark
    session.stop()
    # A stopped session leaves Spark's JVM running for the rest of the process (the next session would use it
    # again); it exits when its stdin closes.
    gateway, SparkContext._gateway, SparkContext._jvm = SparkContext._gateway, None, None
    gateway.shutdown()
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=60)
