"""The repository conftest gives back a test process's cached GPU memory above a bound."""

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).parent.parent / "conftest.py"


def test_cached_memory_above_the_bound_is_given_back_after_a_test(
    pytester: pytest.Pytester,
) -> None:
    """torch's CUDA calls stood in for in a child process: the cache is emptied after the test
    that left more than 4 GiB reserved, and not after the one that left less."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        """
        import torch

        RESERVED = [0]
        EMPTIED = []
        torch.cuda.is_initialized = lambda: True
        torch.cuda.memory_reserved = lambda device=None: RESERVED[0]
        torch.cuda.empty_cache = lambda: EMPTIED.append(RESERVED[0])

        def test_small_case():
            RESERVED[0] = 3 << 30

        def test_large_case():
            RESERVED[0] = 5 << 30

        def test_only_the_large_case_was_given_back():
            assert EMPTIED == [5 << 30]
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def test_a_process_without_torch_is_left_without_it(pytester: pytest.Pytester) -> None:
    """The hook neither imports torch nor starts CUDA for tests that did not."""
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        """
        import sys

        def test_first():
            pass

        def test_torch_was_not_imported():
            assert "torch" not in sys.modules
        """
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
