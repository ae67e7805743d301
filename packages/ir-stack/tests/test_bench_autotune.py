"""Selection by measurement from ir-stack: the ``--pass.autotune`` flag, the e2e suite's
``ir_stack autotuned`` mode and its lines in the report."""

from pathlib import Path
from typing import Any

from ir_passes import PassConfig
from ir_stack.bench import e2e, e2e_report, results
from ir_stack.pass_flags import split_pass_args, with_settings


def test_the_pass_flag_turns_autotune_on() -> None:
    settings, rest = split_pass_args(["--pass.autotune=true", "demo"])
    assert rest == ["demo"]
    assert with_settings(PassConfig(), settings, origin="command line", text=True).autotune
    assert not PassConfig().autotune


def row(mode: str, workload: str, ms: float, **extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "mode": mode, "workload": workload, "ms": ms} | extra


def test_the_report_lists_the_changed_choices_and_the_gain() -> None:
    change = "range-1-256: silu_and_mul on (bfloat16[256, 512]): cuda 9.0us, native 7.0us"
    rows = [
        row("ir_stack", "decode b=1", 2.0),
        row("ir_stack", "prefill 8", 4.0),
        row(e2e.AUTOTUNED, "decode b=1", 1.0, autotune_changed=[change]),
        row(e2e.AUTOTUNED, "prefill 8", 4.0, autotune_changed=[change]),
    ]
    cells = {(r["mode"], r["workload"]): r for r in rows}
    lines = e2e_report.autotune_lines(rows, cells, ["decode b=1", "prefill 8"])
    assert "- time over ir_stack: decode b=1 0.500x, prefill 8 1.000x." in lines
    assert "- choices changed: 1:" in lines
    assert f"  - {change}" in lines
    assert e2e_report.autotune_lines(rows[:2], cells, ["decode b=1"]) == []


def test_e2e_runs_the_autotuned_mode_beside_ir_stack(tmp_path: Path) -> None:
    modes = f"ir_stack,{e2e.AUTOTUNED}"
    argv = ["--out", str(tmp_path), "--model", "tiny", "--batches", "2", "--prefill", "6"]
    argv += ["--context", "8", "--iters", "1", "--modes", modes, "--no-fusion-rows"]
    assert e2e.main(argv) == 0
    result = results.load(tmp_path / "e2e-cpu.json")
    tuned = [r for r in result.rows if r["mode"] == e2e.AUTOTUNED]
    assert {r["workload"] for r in tuned} == {"decode b=2", "prefill 6"}
    assert all(r["max_abs_error"] < 1e-4 for r in result.rows)
    assert all(isinstance(r["autotune_changed"], list) for r in tuned)
    assert "Selection by measurement (ir_stack autotuned):" in (tmp_path / "e2e-cpu.md").read_text()
