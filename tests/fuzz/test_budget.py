"""The fuzzers' memory bound catches an allocation the size a hostile length field asks for."""

import pytest

from fuzz.budget import MEMORY_BOUND, bounded_memory


def test_an_allocation_over_the_bound_fails_the_example():
    with pytest.raises(AssertionError, match="allocated"):
        with bounded_memory():
            bytearray(MEMORY_BOUND + 1)


def test_small_allocations_pass():
    with bounded_memory():
        bytearray(1 << 20)
