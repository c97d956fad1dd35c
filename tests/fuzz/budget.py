"""How hard the fuzzers try: a small budget in the test suite, a long one on demand.

    FUZZ_EXAMPLES=20000 ./dev test tests/fuzz -q     # the long run: examples per fuzzer

Every fuzzer checks three things of the reader it drives: nothing escapes but the reader's typed
errors, no example runs past the deadline (a hang), and no example allocates more than
``MEMORY_BOUND`` bytes of Python memory (a length field of 0x7fffffff must allocate nothing).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import tracemalloc
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, settings

SUITE_EXAMPLES = 120
MEMORY_BOUND = 16 << 20
# Far above any honest example on a busy machine; a reader that loops or reads 2 GiB blows it.
DEADLINE = timedelta(seconds=5)
# Lengths a damaged file may hold: 0x7fffffff above all, the largest a reader could be fooled into allocating.
HOSTILE_LENGTHS = (0x7FFFFFFF, 0x7FFFFFFE, 0x80000000, 0xFFFFFFFF, -1, -0x80000000, 0, 1, 4096)


def fuzz_settings(share: float = 1.0) -> settings:
    """Hypothesis settings for one fuzzer; ``share`` scales the examples of an expensive one."""
    examples = int(os.environ.get("FUZZ_EXAMPLES", SUITE_EXAMPLES))
    return settings(max_examples=max(1, int(examples * share)), deadline=DEADLINE, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@contextlib.contextmanager
def bounded_memory(bound: int = MEMORY_BOUND):
    """Fail when the block's peak of Python allocations exceeds ``bound`` bytes."""
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= bound, f"allocated {peak} bytes at peak, more than {bound}"


@contextlib.contextmanager
def file_holding(data: bytes, name: str) -> Iterator[Path]:
    """A file named ``name`` holding ``data``, in a temp dir removed afterwards."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch, name)
        path.write_bytes(data)
        yield path
