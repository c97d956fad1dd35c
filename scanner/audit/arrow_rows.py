"""Rows in and out of the Arrow record batches Spark's ``mapInArrow`` exchanges with a Python task.

The audit's per-ledger Python steps run as ``mapInArrow`` functions: Spark sends a task its rows as
Arrow columns and takes Arrow columns back, so no row is pickled, turned into a ``Row`` or checked
against its schema in Python; only the values a step reads become Python objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice

import pyarrow as pa

ROWS_PER_BATCH = 10_000  # as Spark's own Arrow batches (spark.sql.execution.arrow.maxRecordsPerBatch)


def batch_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple]:
    """The rows of ``batches``, each a tuple of Python values in column order (a struct as a dict)."""
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns))


def row_batches(rows: Iterable[tuple], schema) -> Iterator[pa.RecordBatch]:
    """``rows`` (tuples in the column order of ``schema``, a Spark StructType) as Arrow record batches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)
    rows = iter(rows)
    while chunk := list(islice(rows, ROWS_PER_BATCH)):
        yield pa.RecordBatch.from_arrays(
            [pa.array(values, type=column.type) for values, column in zip(zip(*chunk), arrow_schema)],
            schema=arrow_schema)
