"""The rotary fusions' benchmark rows, on their CPU paths: the ``fusions`` suite's candidates
(fused op, best unfused path, Inductor) agree with the native composition and render as its
tables; the ``hf`` suite's converted Qwen3 fires the QK-norm fusion only where it is on."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import ir_passes
from ir_stack.bench import fusions, fusions_report, hf, hf_report, results, timing
from ir_stack.bench.fusions import Shape


def test_traffic_counts_each_tensor_once_and_only_the_tokens_cache_rows() -> None:
    shape = Shape("rope_kvcache", heads=4, kv_heads=2, tokens=8, head_size=32)
    x = fusions.make_inputs(shape, torch.device("cpu"), torch.bfloat16, seed=0)
    q, kv = 8 * 4 * 32 * 2, 8 * 2 * 32 * 2  # bytes of the query, of the key (and value)
    rotary = 8 * 8 + 8 * 32 * 2 + 2 * (q + kv)  # positions, table rows, q and k in and out
    assert fusions.traffic_bytes(shape, x) == rotary + kv + 8 * 8 + 2 * kv
    qk = Shape("qk_norm_rope", heads=4, kv_heads=2, tokens=8, head_size=32)
    assert fusions.traffic_bytes(qk, x) == rotary + 2 * 32 * 2
    # the inputs are slices of one packed projection, the slots distinct
    assert x.query.stride(0) == x.key.stride(0) == (4 + 2 * 2) * 32
    assert x.slot_mapping.unique().numel() == 8


def test_bad_shapes_and_heads_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"Shape\.table: got 'rope'"):
        Shape("rope", 32, 8, 1)
    with pytest.raises(ValueError, match=r"Shape\.tokens: got 0"):
        Shape("qk_norm_rope", 32, 8, 0)
    assert fusions.parse_heads("32/8,64/8") == [(32, 8), (64, 8)]
    with pytest.raises(ValueError, match="--heads '32'"):
        fusions.parse_heads("32")


@pytest.mark.parametrize("table", fusions.TABLES)
def test_every_candidate_matches_the_native_composition_and_renders(
    table: str, tmp_path: Path
) -> None:
    """Two token counts of one table on the CPU: each column (fused op per provider, the
    unfused chain of each step's fastest provider, Inductor's code) matches the native
    composition, each unfused step is timed per provider, and the result renders as the
    table with one line per token count."""
    rows = []
    for tokens in (3, 16):
        shape = Shape(table, heads=4, kv_heads=2, tokens=tokens, head_size=32)
        rows += fusions.bench_shape(
            shape, torch.device("cpu"), torch.float32, timing.cpu_time_fn(0.01), seed=tokens
        )
    columns = {r["column"] for r in rows}
    assert set(fusions.COLUMNS) <= columns
    steps = {c for c in columns if c.startswith("step: ")}
    expected_steps = (
        {"step: rms_norm query", "step: rms_norm key", "step: rotary_embedding"}
        if table == "qk_norm_rope"
        else {"step: rotary_embedding", "step: write_kv_cache"}
    )
    assert steps == expected_steps
    for row in rows:
        assert row["us"] > 0
        assert row["bytes"] > 0
        if row["column"] in fusions.COLUMNS:
            assert row["max_abs_error"] < 1e-5, row
    # the unfused path names each step's provider: the fastest of that step's rows
    unfused = next(r for r in rows if r["column"] == "unfused" and r["tokens"] == 16)
    for step in expected_steps:
        timed = [r for r in rows if r["column"] == step and r["tokens"] == 16]
        fastest = min(timed, key=lambda r: r["us"])
        assert f"{step.removeprefix('step: ')}={fastest['provider']}" in unfused["provider"]
    result = results.new_result(
        "fusions", "test", results.current_device("cpu"), {}, fusions.KEY, fusions.METRICS
    )
    result.rows = rows
    path = results.save(result, tmp_path)
    text = path.with_suffix(".md").read_text()
    assert fusions_report.TITLES[table] in text
    assert "| tokens | fused µs (frac) | fused provider | unfused µs (frac) |" in text
    assert "host times (`timeit`, the CPU path)" in text
    lines = [line for line in text.splitlines() if line.startswith(("| 3 |", "| 16 |"))]
    assert len(lines) == 2
    assert "token counts and than Inductor's code at" in text
    assert path.with_suffix(".png").stat().st_size > 0
    assert results.load(path).rows == results.Result.from_json(result.to_json()).rows


def test_the_report_picks_each_columns_fastest_and_compares_the_fused_op() -> None:
    result = results.new_result(
        "fusions", "t", results.current_device("cpu"), {}, fusions.KEY, fusions.METRICS
    )
    base = {"table": "qk_norm_rope", "heads": 32, "kv_heads": 8, "tokens": 64, "head_size": 128}
    base |= {"copy_gbps": 3000.0}
    result.rows = [
        {**base, "column": "fused", "provider": "triton", "us": 4.0, "fraction_of_copy": 0.5},
        {**base, "column": "fused", "provider": "cuda", "us": 2.0, "fraction_of_copy": 0.9},
        {**base, "column": "unfused", "provider": "a", "us": 5.0, "fraction_of_copy": 0.3},
        {**base, "column": "inductor", "provider": "inductor", "us": 1.0},
        {**base, "column": "step: rotary_embedding", "provider": "triton", "us": 0.5},
    ]
    text = fusions_report.markdown(result)
    assert "| 64 | 2.00 (0.90) | cuda | 5.00 (0.30) | a | 1.00 | 0.400 | 2.000 |" in text
    assert "faster than the best unfused path at 1 of 1 token counts" in text
    assert "than Inductor's code at 0 of 1" in text
    assert "measured in the same run: **3000 GB/s**." in text


def test_the_report_says_what_the_unfused_path_reached_where_the_fused_op_loses() -> None:
    result = results.new_result(
        "fusions", "t", results.current_device("cpu"), {}, fusions.KEY, fusions.METRICS
    )
    base = {"table": "rope_kvcache", "heads": 64, "kv_heads": 8, "head_size": 128}
    result.rows = [
        {**base, "tokens": t, "column": column, "provider": "p", "us": us, "fraction_of_copy": f}
        for t, fused, unfused in ((16, 1.0, 2.0), (2048, 30.3, 28.7), (8192, 122.7, 125.5))
        for column, us, f in (("fused", fused, 0.97), ("unfused", unfused, 1.02))
    ]
    text = fusions_report.markdown(result)
    assert "faster than the best unfused path at 2 of 3 token counts" in text
    assert (
        "Where the fused op loses, the unfused path ran at this fraction of the copy bandwidth "
        "over the minimum traffic, which the fused op would need to reach: 2048 tokens: 1.02."
        in text
    )
    result.rows = [r for r in result.rows if r["tokens"] != 2048]
    assert "Where the fused op loses" not in fusions_report.markdown(result)


def test_the_report_says_where_a_step_of_the_unfused_path_had_only_the_native_function() -> None:
    result = results.new_result(
        "fusions", "t", results.current_device("cpu"), {}, fusions.KEY, fusions.METRICS
    )
    base = {"table": "qk_norm_rope", "heads": 32, "kv_heads": 8, "head_size": 128}
    step = fusions_report.STEP_PREFIX + "rms_norm query"
    result.rows = [
        {**base, "tokens": t, "column": column, "provider": provider, "us": 1.0}
        for t in (1, 2, 4)
        for column, provider in (("fused", "triton"), ("unfused", "u"), (step, "native"))
    ]
    result.rows.append({**base, "tokens": 1, "column": step, "provider": "triton", "us": 0.5})
    assert fusions_report.native_only_steps(result, ("qk_norm_rope", 32, 8)) == {
        "rms_norm query": [2, 4]
    }
    text = fusions_report.markdown(result)
    assert (
        "The unfused path ran the native function, as no kernel took the arguments, for "
        "`rms_norm query` at 2 of 3 token counts (2 to 4)." in text
    )
    result.rows = [r for r in result.rows if r["provider"] != "native"]
    assert "ran the native function" not in fusions_report.markdown(result)


def test_append_keeps_the_rows_of_the_shapes_not_run_again(tmp_path: Path) -> None:
    device = results.current_device("cpu")
    old = results.new_result("fusions", "t", device, {}, fusions.KEY, fusions.METRICS)
    row = {"table": "qk_norm_rope", "heads": 32, "kv_heads": 8, "column": "fused", "us": 1.0}
    old.rows = [{**row, "tokens": 1}, {**row, "tokens": 2}, {**row, "table": "rope_kvcache"}]
    old.rows[2]["tokens"] = 1
    path = results.save(old, tmp_path, render_too=False)
    new = results.new_result("fusions", "t", device, {}, fusions.KEY, fusions.METRICS)
    again = [Shape("qk_norm_rope", 32, 8, 2)]
    assert fusions.kept_rows(path, new, again) == [old.rows[0], old.rows[2]]
    assert fusions.kept_rows(tmp_path / "absent.json", new, again) == []
    elsewhere = results.Device("NVIDIA H100", "h100", "cuda")
    other = results.new_result("fusions", "t", elsewhere, {}, fusions.KEY, fusions.METRICS)
    with pytest.raises(ValueError, match=r"--append: .* holds a run on CPU"):
        fusions.kept_rows(path, other, again)


def test_the_hf_suites_qwen3_rows_fire_the_qk_norm_fusion_where_it_is_on(
    tiny_transformers: Callable[[str], Any],
) -> None:
    """A tiny transformers Qwen3 on the CPU (forced, every op native here): the fusion fires
    once per attention layer and compilation where it is on, never where it is off, and the
    logits stay those of the original model."""
    from ir_stack.bench.hf_families import convert

    model = tiny_transformers("qwen3")
    layers = model.config.num_hidden_layers
    shapes = {"decode b=2": (2, 1), "prefill 8": (1, 8)}
    rows, facts = hf.fusion_rows(model, lambda m: convert("qwen3", m), shapes, force=True)
    ways = {r["way"] for r in rows}
    assert ways == {"hf eager", *hf.FUSION_WAYS}
    assert {r["workload"] for r in rows} == set(shapes)
    fired = {r["way"]: r.get("qk_norm_fusions_fired") for r in rows}
    # one compilation a workload (static shapes), each fusing both layers
    assert fired == {
        "hf eager": None,
        "ir compile, kernels, qk_norm fusion off": 0,
        "ir compile, kernels, qk_norm fusion on": len(shapes) * layers,
    }
    assert all(r["max_abs_diff"] < 1e-4 for r in rows), rows
    assert facts["converted"]["attentions"] == layers
    on = facts["passes"]["ir compile, kernels, qk_norm fusion on"]
    assert (
        on["fusions"][ir_passes.QK_NORM_ROPE_PATTERN]
        == fired["ir compile, kernels, qk_norm fusion on"]
    )
    result = results.new_result("hf", "t", results.current_device("cpu"), {}, hf.KEY, hf.METRICS)
    result.rows, result.facts = rows, {"families": {hf.FUSION_FAMILY: facts}}
    text = hf_report.markdown(result)
    assert f"## {hf.FUSION_FAMILY}" in text
    assert "| ir compile, kernels, qk_norm fusion on |" in text
    assert (
        "- ir compile, kernels, qk_norm fusion on over ir compile, kernels, qk_norm fusion off: "
        in text
    )


def test_the_hf_suite_runs_the_fusion_rows_alone_without_families() -> None:
    args = hf.parse_args(["--families", "", "--generate-batches", ""])
    assert args.families == []
    assert args.fusion_rows
    assert hf.parse_args([]).families == ["llama"]
