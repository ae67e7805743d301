"""The repository conftest's ``IR_TEST_SHARD``: the shards of a ``-k`` selection are even."""

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).parent.parent / "conftest.py"


def test_shards_split_the_selection_evenly(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(CONFTEST.read_text())
    # 40 tests, every fourth of them "wide": a selection whose stride meets the shard count's
    pytester.makepyfile(
        """
        import pytest

        NAMES = [f"{'wide' if i % 4 == 0 else 'rest'}{i}" for i in range(40)]

        @pytest.mark.parametrize("i", range(40), ids=NAMES)
        def test_case(i):
            pass
        """
    )
    ran: list[set[str]] = []
    for shard in range(4):
        monkeypatch.setenv("IR_TEST_SHARD", f"{shard}/4")
        result = pytester.runpytest("-q", "-k", "wide", "--collect-only")
        ran.append({line for line in result.outlines if "::test_case[" in line})
    assert [len(names) for names in ran] == [3, 3, 2, 2]
    assert len(set().union(*ran)) == 10


def test_a_bad_shard_is_a_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile("def test_one():\n    pass\n")
    monkeypatch.setenv("IR_TEST_SHARD", "4/4")
    result = pytester.runpytest("-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*IR_TEST_SHARD='4/4': expected i/n with 0 <= i < n*"])
