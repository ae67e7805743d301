"""Two kernel grids compared: each column's drift and the shapes our provider won in one and
lost in the other (what ``ir-stack bench compare`` adds for the ``kernels`` suite)."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ir_stack.bench import kernel_compare, results
from ir_stack.bench.kernel_report import grid, lost
from ir_stack.bench.results import Device, Result

SMALL = ("rms_norm", 1, 4096)
LARGE = ("rms_norm", 16384, 8192)


def kernels(record: Callable[..., Any], times: dict[tuple[Any, str], float]) -> Result:
    result = results.new_result(
        "kernels",
        "Kernels — Test GPU",
        Device("Test GPU", "test", "cuda"),
        {},
        ["op", "provider", "tokens", "hidden"],
        [results.Metric("us_graph", "µs")],
    )
    result.rows = [
        record(op, provider, tokens, hidden, us)
        for ((op, tokens, hidden), provider), us in times.items()
    ]
    return result


@pytest.fixture
def grids(bench_record: Callable[..., Any]) -> tuple[Result, Result]:
    # old: triton wins the small shape and loses the large one; new: the other way round, only
    # because Inductor's kernel moved (2.1 -> 1.8 us, 90 -> 101 us)
    old = kernels(
        bench_record,
        {(SMALL, "triton"): 2.0, (SMALL, "inductor"): 2.1, (LARGE, "triton"): 100.0}
        | {(LARGE, "inductor"): 90.0},
    )
    new = kernels(
        bench_record,
        {(SMALL, "triton"): 2.0, (SMALL, "inductor"): 1.8, (LARGE, "triton"): 100.0}
        | {(LARGE, "inductor"): 101.0},
    )
    return old, new


def test_drift_is_the_median_ratio_per_column(grids: tuple[Result, Result]) -> None:
    old, new = (grid(r) for r in grids)
    drift = kernel_compare.drift(old, new)
    assert drift["triton"] == kernel_compare.Drift(1.0, 1.0, 1.0, 2)
    assert drift["inductor"].median == pytest.approx((1.8 / 2.1 + 101 / 90) / 2)
    assert drift["inductor"].low == pytest.approx(1.8 / 2.1)


def test_flips_are_listed(grids: tuple[Result, Result]) -> None:
    old, new = (grid(r) for r in grids)
    assert set(lost(old, "triton")) == {LARGE}
    assert set(lost(new, "triton")) == {SMALL}
    text = "\n".join(kernel_compare.details(*grids))
    assert "1 went from won to lost and 1 from lost to won" in text
    assert "| rms_norm 1 x 4096 | won | 1.111 behind inductor (spread 0.000) |" in text
    assert "| inductor | 0.990 | 0.857 | 1.122 | 2 |" in text


def test_only_our_providers_count_when_asked(grids: tuple[Result, Result]) -> None:
    """The GPU workflow compares our columns: Inductor's own drift is no regression of ours."""
    everything = results.compare(*grids, threshold=0.1)
    assert [c.key for c in everything.regressions] == [("rms_norm", "inductor", 16384, 8192)]
    ours = results.compare(*grids, threshold=0.1, where={"provider": {"triton", "cuda"}})
    assert ours.regressions == []
    assert len(ours.changes) == 2


def test_its_command_line_is_bench_compare(grids: tuple[Result, Result], tmp_path: Path) -> None:
    old, new = (
        results.save(r, tmp_path / name, render_too=False)
        for r, name in zip(grids, "ab", strict=True)
    )
    out = tmp_path / "compare.md"
    assert kernel_compare.main([str(old), str(new), "--threshold", "10", "--out", str(out)]) == 1
    assert "1 went from won to lost" in out.read_text()
    assert kernel_compare.main([str(old), str(new), "--threshold", "20"]) == 0
