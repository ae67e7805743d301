"""The end-to-end report: ``ir_stack`` against stock torch.compile and the full-graph ceiling,
startup, and redoing the table and plot from a result."""

import json
from pathlib import Path
from typing import Any

import pytest

from ir_stack.bench import e2e_report


def row(mode: str, workload: str, ms: float) -> dict[str, Any]:
    batch = int(workload.split("=")[1]) if workload.startswith("decode") else 1
    tokens = 1 if workload.startswith("decode") else 8
    return {
        "mode": mode,
        "workload": workload,
        "batch": batch,
        "tokens": tokens,
        "ms": ms,
        "max_abs_error": 1e-3,
    }


def result() -> dict[str, Any]:
    return {
        "model": "tiny",
        "device": "Test GPU",
        "dtype": "bfloat16",
        "torch": "x",
        "date": "today",
        "iters": 5,
        "context": 64,
        "rows": [
            row("torch.compile reduce-overhead", "decode b=1", 2.0),
            row("torch.compile reduce-overhead", "prefill 8", 4.0),
            row("ir_stack", "decode b=1", 1.5),
            row("ir_stack", "prefill 8", 5.0),
            row("full CUDA graph", "decode b=1", 1.2),
        ],
        "startup": {
            "cold": {"seconds": 30.0, "counters": {"num_backend_compilations": 6}},
            "warm": {
                "seconds": 6.0,
                "counters": {
                    "num_cache_hits": 6,
                    "num_backend_compilations": 0,
                    "num_traces_loaded": 2,
                },
            },
        },
    }


def test_the_targets_compare_ir_stack_with_stock_compile_and_the_ceiling() -> None:
    table = e2e_report.markdown(result())
    assert "| ir_stack | 1.500 (0.001) | 5.000 (0.001) |" in table
    assert "| full CUDA graph | 1.200 (0.001) | - |" in table
    assert (
        "- decode b=1: ir_stack at 0.750x of torch.compile reduce-overhead, "
        "1.250x of the full-graph ceiling." in table
    )
    assert "- prefill 8: ir_stack at 1.250x of torch.compile reduce-overhead." in table
    assert "cold 30.0 s (6 compilations), warm 6.0 s" in table
    assert "**5.0x** faster" in table


def test_main_redoes_the_table_and_plot_from_a_result(tmp_path: Path) -> None:
    path = tmp_path / "e2e-tiny-Test.json"
    path.write_text(json.dumps(result()))
    assert e2e_report.main([str(path)]) == 0
    assert path.with_suffix(".md").read_text() == e2e_report.markdown(result())
    assert path.with_suffix(".png").stat().st_size > 0


def test_main_refuses_what_is_not_a_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"meta": {}, "records": []}))
    with pytest.raises(SystemExit):
        e2e_report.main([str(path)])
    assert "is not an end-to-end result (no model, device" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        e2e_report.main([str(tmp_path / "missing.json")])
    assert "cannot read" in capsys.readouterr().err
