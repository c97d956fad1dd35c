"""The suite's scheduling: under ``--dist loadgroup`` the tests of one ``xdist_group`` share one worker.

The tests of the standalone Spark cluster rely on it (two such clusters at once starve the machine). Some pairs of
pytest and pytest-xdist silently group nothing (pytest 9.2 and xdist 3.8): this fails on such a pair.
"""

from __future__ import annotations


def test_tests_of_one_group_run_on_one_worker(pytester):
    pytester.makeconftest(
        """
        import pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_modifyitems(items):
            for item in items:
                if "grouped" in item.name:
                    item.add_marker(pytest.mark.xdist_group("together"))
        """)
    pytester.makepyfile(
        """
        import os
        import time

        import pytest

        @pytest.mark.parametrize("n", range(6))
        def test_grouped(n):
            time.sleep(0.2)
            print("WORKER", os.environ["PYTEST_XDIST_WORKER"])

        @pytest.mark.parametrize("n", range(6))
        def test_free(n):
            time.sleep(0.2)
        """)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)
    workers = {line.split()[0] for line in result.outlines if "::test_grouped" in line and "PASSED" in line}
    assert len(workers) == 1, result.outlines
    assert all("@together" in line for line in result.outlines if "::test_grouped" in line and "PASSED" in line)
