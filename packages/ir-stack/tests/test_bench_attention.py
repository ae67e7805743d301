"""The ``attention`` suite on its CPU path: its inputs and traffic, the grouped SDPA anchor
against SDPA over repeated key-value heads, every column checked against float32 SDPA, and
the report's tables, summary and plot."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import ir_stack.models.attention  # noqa: F401  (registers torch.ops.ir_stack.decode_attention)
from ir_stack.bench import attention, attention_report, results, timing
from ir_stack.bench.attention import Shape


def test_traffic_counts_the_caches_query_output_and_positions_once() -> None:
    shape = Shape(head_size=16, batch=3, context=5, heads=4, kv_heads=2)
    x = attention.make_inputs(shape, torch.device("cpu"), torch.bfloat16, seed=0)
    cache = 3 * 5 * 2 * 16 * 2
    assert attention.traffic_bytes(x) == 2 * cache + 2 * (3 * 4 * 16 * 2) + 3 * 8
    assert x.positions.tolist() == [[4], [4], [4]]


def test_bad_shapes_and_sizes_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"Shape\.batch: got 0"):
        Shape(64, 0, 512)
    with pytest.raises(ValueError, match=r"Shape\.heads: got 6 over 4"):
        Shape(64, 1, 512, heads=6, kv_heads=4)
    assert attention.parse_sizes("--batches", "1,8") == [1, 8]
    with pytest.raises(ValueError, match="--contexts 'x': expected positive sizes"):
        attention.parse_sizes("--contexts", "x")


def test_grouped_sdpa_is_sdpa_over_repeated_key_value_heads() -> None:
    torch.manual_seed(0)
    b, heads, kv_heads, context, d = 2, 6, 2, 9, 8
    query = torch.randn(b, heads * d)
    k_cache, v_cache = torch.randn(2, b, context, kv_heads, d)
    group = heads // kv_heads
    keys = k_cache.transpose(1, 2).repeat_interleave(group, dim=1)
    values = v_cache.transpose(1, 2).repeat_interleave(group, dim=1)
    expected = F.scaled_dot_product_attention(query.reshape(b, heads, 1, d), keys, values)
    got = attention.grouped_sdpa(query, k_cache, v_cache, kv_heads)
    torch.testing.assert_close(got, expected.reshape(b, -1))


def test_every_column_matches_float32_sdpa_and_renders(tmp_path: Path) -> None:
    time_fn = timing.cpu_time_fn(budget_s=0.01)
    result = results.new_result(
        "attention", "t", results.current_device("cpu"), {}, attention.KEY, attention.METRICS
    )
    result.facts = {"heads": 4, "kv_heads": 2, "target_fraction": 0.7}
    for context in (7, 33):
        shape = Shape(head_size=16, batch=5, context=context, heads=4, kv_heads=2)
        rows = attention.bench_shape(shape, torch.device("cpu"), torch.float32, time_fn)
        assert [r["column"] for r in rows] == list(attention.COLUMNS)
        assert all(r["max_abs_error"] < 1e-5 for r in rows), rows
        result.rows += rows
    text = attention_report.markdown(result)
    assert "## Heads of 16" in text
    assert "split-K reaches 0.7 of the copy bandwidth at 0 of 2 shapes (none)" in text
    assert "| 5 | 33 |" in text
    path = results.save(result, tmp_path)
    assert path.with_suffix(".png").stat().st_size > 0


def test_the_summary_names_the_shapes_that_meet_the_target() -> None:
    def row(column: str, us: float, fraction: float) -> dict[str, object]:
        return {"column": column, "us": us, "fraction_of_copy": fraction, "bytes": 1e6}

    cells = {
        (1, 512): {"split-K": row("split-K", 4.0, 0.2), "SDPA": row("SDPA", 3.0, 0.3)},
        (32, 8192): {"split-K": row("split-K", 50.0, 0.8), "SDPA": row("SDPA", 60.0, 0.6)},
    }
    assert attention_report.summary(cells, 0.7) == (  # type: ignore[arg-type]
        "split-K reaches 0.7 of the copy bandwidth at 1 of 2 shapes (b=32 x 8192) and is "
        "faster than SDPA at 1 of 2."
    )


def test_a_failing_candidate_is_left_out_but_a_device_fault_stops_the_run() -> None:
    """An anchor that raises leaves its row out; an error of the device itself, which CUDA
    keeps for every later call, ends the run instead of failing every candidate after it."""
    shape = Shape(head_size=16, batch=2, context=7, heads=4, kv_heads=2)

    def failing(error: Exception) -> timing.TimeFn:
        def time_fn(call: object, traffic: int) -> dict[str, float]:
            raise error

        return time_fn  # type: ignore[return-value]

    cpu = torch.device("cpu")
    assert (
        attention.bench_shape(shape, cpu, torch.float32, failing(RuntimeError("no kernel"))) == []
    )
    fault = getattr(torch, "AcceleratorError", None)
    if fault is None:
        pytest.skip(f"torch {torch.__version__} has no AcceleratorError")
    with pytest.raises(fault, match="illegal"):
        attention.bench_shape(shape, cpu, torch.float32, failing(fault("illegal address")))
