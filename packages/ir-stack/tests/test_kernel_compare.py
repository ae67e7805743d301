"""Two kernel grids compared: each column's drift, the shapes `ours` won in one and lost in the
other, and the other columns' times that moved."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ir_stack.bench import kernel_compare

SMALL = ("rms_norm", 1, 4096)
LARGE = ("rms_norm", 16384, 8192)


def grid(
    tmp_path: Path, record: Callable[..., Any], name: str, times: dict[tuple[Any, str], float]
) -> Path:
    path = tmp_path / name
    records = [
        record(op, provider, tokens, hidden, us)
        for ((op, tokens, hidden), provider), us in times.items()
    ]
    path.write_text(json.dumps({"meta": {"date": name}, "records": records}))
    return path


@pytest.fixture
def grids(tmp_path: Path, bench_record: Callable[..., Any]) -> tuple[Path, Path]:
    # old: triton wins the small shape and loses the large one; new: the other way round, only
    # because Inductor's kernel moved (2.1 -> 1.8 us, 90 -> 101 us)
    old = grid(
        tmp_path,
        bench_record,
        "old.json",
        {(SMALL, "triton"): 2.0, (SMALL, "inductor"): 2.1, (LARGE, "triton"): 100.0}
        | {(LARGE, "inductor"): 90.0},
    )
    new = grid(
        tmp_path,
        bench_record,
        "new.json",
        {(SMALL, "triton"): 2.0, (SMALL, "inductor"): 1.8, (LARGE, "triton"): 100.0}
        | {(LARGE, "inductor"): 101.0},
    )
    return old, new


def test_drift_is_the_median_ratio_per_column(grids: tuple[Path, Path]) -> None:
    old, new = (kernel_compare.load(path)[1] for path in grids)
    drift = kernel_compare.drift(old, new)
    assert drift["triton"] == kernel_compare.Drift(1.0, 1.0, 1.0, 2)
    assert drift["inductor"].median == pytest.approx((1.8 / 2.1 + 101 / 90) / 2)
    assert drift["inductor"].low == pytest.approx(1.8 / 2.1)


def test_flips_and_moves_are_listed(grids: tuple[Path, Path]) -> None:
    old, new = (kernel_compare.load(path)[1] for path in grids)
    assert set(kernel_compare.lost(old, "triton")) == {LARGE}
    assert set(kernel_compare.lost(new, "triton")) == {SMALL}
    moved = kernel_compare.moves(old, new, "triton", 0.1)
    assert [(m.provider, m.shape) for m in moved] == [("inductor", SMALL), ("inductor", LARGE)]
    assert kernel_compare.moves(old, new, "triton", 0.2) == []
    text = kernel_compare.markdown(*grids, ours="triton", threshold=0.1)
    assert "1 went from won to lost and 1 from lost to won" in text
    assert "| rms_norm 1 x 4096 | won | 1.111 behind inductor (spread 0.000) |" in text
    assert "| inductor | rms_norm 16384 x 8192 | 90.00 | 101.00 |" in text


def test_command_line_writes_the_report(grids: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "compare.md"
    assert kernel_compare.main([str(grids[0]), str(grids[1]), "--out", str(out)]) == 0
    assert out.read_text().startswith("# new.json (new.json) against old.json (old.json)")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--moved", "-1"], "--moved -1.0: expected a fraction >= 0"),
        (["--ours", "native"], "argument --ours: invalid choice: 'native'"),
    ],
)
def test_bad_arguments_are_named(
    grids: tuple[Path, Path], args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        kernel_compare.main([str(grids[0]), str(grids[1]), *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_missing_result_is_named(
    grids: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        kernel_compare.main([str(grids[0]), str(tmp_path / "nope.json")])
    assert "nope.json: no such benchmark result" in capsys.readouterr().err
