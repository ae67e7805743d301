"""The e2e report: ``ir_stack`` against stock torch.compile and the full-graph ceiling, a table
per model, and redoing the table and plot from a result."""

from pathlib import Path
from typing import Any

from ir_stack.bench import e2e_report, results
from ir_stack.bench.results import Device, Result


def row(mode: str, workload: str, ms: float, model: str = "tiny") -> dict[str, Any]:
    decode = workload.startswith("decode")
    return {
        "model": model,
        "mode": mode,
        "workload": workload,
        "batch": int(workload.split("=")[1]) if decode else 1,
        "tokens": 1 if decode else 8,
        "ms": ms,
        "max_abs_error": 1e-3,
    }


def e2e_result() -> Result:
    result = results.new_result(
        "e2e",
        "End to end: the tiny reference model, bfloat16",
        Device("Test GPU", "test", "cuda"),
        {"model": "tiny", "batches": "1", "prefill": 8, "context": 64, "iters": 5},
        ["model", "mode", "workload"],
        [results.Metric("ms", "ms")],
    )
    result.rows = [
        row("torch.compile reduce-overhead", "decode b=1", 2.0),
        row("torch.compile reduce-overhead", "prefill 8", 4.0),
        row("ir_stack", "decode b=1", 1.5),
        row("ir_stack", "prefill 8", 5.0),
        row("full CUDA graph", "decode b=1", 1.2),
    ]
    result.facts = {"dtype": "bfloat16", "timed_with": "CUDA events"}
    return result


def test_the_targets_compare_ir_stack_with_stock_compile_and_the_ceiling() -> None:
    table = e2e_report.markdown(e2e_result())
    assert "| ir_stack | 1.500 (0.001) | 5.000 (0.001) |" in table
    assert "| full CUDA graph | 1.200 (0.001) | - |" in table
    assert (
        "- decode b=1: ir_stack at 0.750x of torch.compile reduce-overhead, "
        "1.250x of the full-graph ceiling." in table
    )
    assert "- prefill 8: ir_stack at 1.250x of torch.compile reduce-overhead." in table
    assert "mean of 5 back-to-back calls, timed with CUDA events" in table
    assert "## tiny" not in table  # one model: no heading per model


def test_each_model_gets_its_table() -> None:
    result = e2e_result()
    result.rows.append(row("eager", "decode b=1", 9.0, model="toy"))
    table = e2e_report.markdown(result)
    assert table.index("## tiny") < table.index("## toy") < table.index("| eager | 9.000")


def test_render_redoes_the_table_and_plot_from_a_result(tmp_path: Path) -> None:
    result = e2e_result()
    path = results.save(result, tmp_path, render_too=False)
    assert path.name == "e2e-test.json"
    assert not path.with_suffix(".md").exists()
    results.render(results.load(path), path)
    assert path.with_suffix(".md").read_text() == e2e_report.markdown(result)
    assert path.with_suffix(".png").stat().st_size > 0


def test_its_command_line_renders_a_result(tmp_path: Path) -> None:
    result = e2e_result()
    path = results.save(result, tmp_path, render_too=False)
    assert e2e_report.main([str(path)]) == 0
    assert path.with_suffix(".md").read_text() == e2e_report.markdown(result)


def test_a_converted_transformers_model_says_what_its_errors_are_against_and_what_did_not_run() -> (
    None
):
    result = e2e_result()
    model = "transformers llama, Llama 3.2 1B shape"
    result.rows += [
        row("hf eager", "decode b=1", 9.0, model=model),
        row("ir_stack", "decode b=1", 1.0, model=model),
    ]
    why = "RuntimeError: operation not permitted when stream is capturing"
    result.facts["hf"] = {"llama": {"model": model, "not_run": {"full CUDA graph": why}}}
    table = e2e_report.markdown(result)
    assert "the converted transformers models' against the original model in eager mode" in table
    section = table[table.index(f"## {model}") :]
    assert f"- full CUDA graph: not run ({why})." in section
    assert "not run" not in table[: table.index(f"## {model}")]
