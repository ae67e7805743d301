"""Every fusion of `PassConfig`: each pattern fires on a small model written with the ops and
gives the unfused (eager native) results, each switch turns its fusion off, the levels set the
documented defaults, token thresholds follow the compile range, and the rotary + KV-cache
fusion stores into the caller's caches in place, through the selected implementation."""

import dataclasses
import os
import subprocess
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest
import torch
from torch import Tensor, fx
from torch._inductor.utils import run_and_get_code
from torch.fx.experimental.proxy_tensor import make_fx

import ir_dispatch
import ir_passes
from ir_passes import FUSIONS, FusionPass, LoweringPass, PassConfig, PassReport
from ir_spec import IrOp, ops
from ir_spec.testing import assert_close, results_of

EPS = 1e-6
T, HIDDEN, GROUP = 4, 128, 64  # tokens, hidden size, quant group size
H, KH, D = 4, 2, 32  # query heads, key / value heads, head size
BLOCKS, BLOCK_SIZE = 4, 8  # KV-cache blocks and slots a block
#: the tensor-parallel fusions act on collectives, which this file's one-process models have
#: none of: test_tp_fusion.py runs them in worlds of several processes
TP_SWITCHES = {"fuse_allreduce_rms", "enable_sp", "fuse_gemm_comms"}
LOCAL = [f for f in FUSIONS if f.switch not in TP_SWITCHES]
ALL_PATTERNS = {p for f in LOCAL for p in f.patterns}


@pytest.fixture(autouse=True)
def no_graph_cache() -> Iterator[None]:
    """Compile for real every time, so the passes run and fill the report."""
    with torch._inductor.config.patch(fx_graph_cache=False):
        yield


# ------------------------------------------------------------------------ the models
def quant_chain(x: Tensor, r: Tensor, w: Tensor, scale: Tensor) -> tuple[Tensor, ...]:
    """A residual add and each norm / activation + quant pattern once."""
    hidden = x + r  # add+rms_norm, then fused_add_rms_norm+static_quant_fp8
    a = ops.static_quant_fp8(ops.rms_norm(hidden, w, EPS), scale)
    out, residual = ops.fused_add_rms_norm(x * 2, r, w, EPS)
    b, b_scale = ops.dynamic_quant_fp8(out)
    out, residual_2 = ops.fused_add_rms_norm(x * 3, residual, w, EPS)
    c, c_scale = ops.group_quant_fp8(out, GROUP)
    d = ops.static_quant_fp8(ops.rms_norm(x * 4, w, EPS), scale)
    e, e_scale = ops.dynamic_quant_fp8(ops.rms_norm(x * 5, w, EPS))
    f, f_scale = ops.group_quant_fp8(ops.rms_norm(x * 6, w, EPS), GROUP)
    gate_up = torch.cat([x, r], dim=-1)
    g = ops.static_quant_fp8(ops.silu_and_mul(gate_up), scale)
    k, k_scale = ops.group_quant_fp8(ops.silu_and_mul(gate_up * 2), GROUP)
    return (a, hidden, b, b_scale, residual, c, c_scale, residual_2, d, e, e_scale, f, f_scale,
            g, k, k_scale)  # fmt: skip


#: the op whose tolerance compares each result of `quant_chain`
QUANT_CHAIN_OPS = (
    [ops.fused_add_rms_norm_static_quant_fp8] * 2
    + [ops.fused_add_rms_norm_dynamic_quant_fp8] * 3
    + [ops.fused_add_rms_norm_group_quant_fp8] * 3
    + [ops.rms_norm_static_quant_fp8, *[ops.rms_norm_dynamic_quant_fp8] * 2]
    + [ops.rms_norm_group_quant_fp8] * 2
    + [ops.silu_and_mul_static_quant_fp8, *[ops.silu_and_mul_group_quant_fp8] * 2]
)


def rope_chain(
    qkv: Tensor,
    positions: Tensor,
    cos_sin: Tensor,
    wq: Tensor,
    wk: Tensor,
    xq: Tensor,
    xk: Tensor,
    v: Tensor,
    kc: Tensor,
    vc: Tensor,
    slots: Tensor,
) -> tuple[Tensor, ...]:
    """Per-head query / key norms of a packed qkv before a rotary embedding, and a rotary
    embedding whose key is stored in the KV cache."""
    q, k, _ = qkv.split([H * D, KH * D, KH * D], dim=-1)
    tokens = q.shape[0]
    q = ops.rms_norm(q.view(tokens, H, D), wq, EPS).view(tokens, H * D)
    k = ops.rms_norm(k.unflatten(-1, (KH, D)), wk, EPS).flatten(-2)
    q, k = ops.rotary_embedding(positions, q, k, D, cos_sin, True)
    rq, rk = ops.rotary_embedding(positions, xq, xk, D, cos_sin, True)
    ops.write_kv_cache(rk, v, kc, vc, slots)
    return q, k, rq * 2, rk


def every_fusion(*args: Tensor) -> tuple[Tensor, ...]:
    return quant_chain(*args[:4]) + rope_chain(*args[4:])


def quant_inputs(gen: torch.Generator, tokens: int = T) -> list[Tensor]:
    x = torch.randn(tokens, HIDDEN, generator=gen)
    r = torch.randn(tokens, HIDDEN, generator=gen)
    w = 1 + 0.1 * torch.randn(HIDDEN, generator=gen)
    return [x, r, w, torch.tensor([0.02])]


def rope_inputs(gen: torch.Generator, tokens: int = T) -> list[Tensor]:
    return [
        torch.randn(tokens, (H + 2 * KH) * D, generator=gen),
        torch.randint(0, 64, (tokens,), generator=gen),
        torch.randn(64, D, generator=gen),
        1 + 0.1 * torch.randn(D, generator=gen),
        1 + 0.1 * torch.randn(D, generator=gen),
        torch.randn(tokens, H * D, generator=gen),
        torch.randn(tokens, KH * D, generator=gen),
        torch.randn(tokens, KH * D, generator=gen),
        torch.randn(BLOCKS, BLOCK_SIZE, KH, D, generator=gen),
        torch.randn(BLOCKS, BLOCK_SIZE, KH, D, generator=gen),
        torch.randperm(BLOCKS * BLOCK_SIZE, generator=gen)[:tokens],
    ]


def every_input(seed: int, tokens: int = T) -> list[Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return quant_inputs(gen, tokens) + rope_inputs(gen, tokens)


def native_results(fn: Callable[..., Any], args: list[Tensor]) -> tuple[Any, list[Tensor]]:
    """`fn`'s eager results with every op native, on copies of `args` (returned, as written)."""
    copies = [a.clone() for a in args]
    with ir_dispatch.priority({op.name: ["native"] for op in ops}):
        return fn(*copies), copies


def assert_every_result_close(got: tuple[Tensor, ...], want: tuple[Tensor, ...]) -> None:
    compared: list[IrOp] = [
        *QUANT_CHAIN_OPS,
        *[ops.qk_norm_rotary_embedding] * 2,
        *[ops.rotary_embedding_write_kv_cache] * 2,
    ]
    assert len(got) == len(want) == len(compared)
    for op, g, w in zip(compared, got, want, strict=True):
        assert_close(op, g, w)


def assert_caches_written_like(args: list[Tensor], expected_args: list[Tensor]) -> None:
    """The KV caches among `args` (the rope inputs' key and value caches) hold what the
    unfused eager run stored into its copies."""
    op = ops.rotary_embedding_write_kv_cache
    assert_close(op, (args[-3], args[-2]), (expected_args[-3], expected_args[-2]))


def fx_graph(
    fn: Callable[..., Any], args: list[Tensor], mode: Literal["fake", "symbolic"] = "fake"
) -> fx.GraphModule:
    return make_fx(fn, tracing_mode=mode)(*args)


def fused(config: PassConfig, fn: Callable[..., Any] = every_fusion, **kw: Any) -> PassReport:
    """The report of `FusionPass` with `config` on `fn`'s graph."""
    report = PassReport()
    FusionPass(report, config)(fx_graph(fn, every_input(1), **kw).graph)
    return report


def patterns_of(switch: str) -> set[str]:
    return set(next(f for f in FUSIONS if f.switch == switch).patterns)


# ------------------------------------------------------------------ every pattern fires
def test_every_pattern_fires_on_the_graph_and_matches_the_unfused_model() -> None:
    args = every_input(2)
    gm = fx_graph(every_fusion, args)
    report = PassReport()
    FusionPass(report, PassConfig(force_fusion=True))(gm.graph)
    assert report.fusions == dict.fromkeys(ALL_PATTERNS, 1)
    ir_ops = [str(n.target) for n in gm.graph.nodes if str(n.target).startswith("ir.")]
    assert "ir.rms_norm.default" not in ir_ops
    assert "ir.write_kv_cache.default" not in ir_ops
    gm.recompile()
    want, written = native_results(every_fusion, args)
    got = gm(*args)
    assert_every_result_close(got, want)
    assert_caches_written_like(args, written)


def test_every_pattern_fires_compiled_and_stores_into_the_callers_cache() -> None:
    """Compiled (auto_functionalized_v2 around the cache write), fused everywhere: the
    results are the unfused eager ones, the caller's caches hold what eager stored, and the
    code neither clones nor copies a cache."""
    args = every_input(3)
    want, written = native_results(every_fusion, args)
    compiled = ir_passes.compile(every_fusion, config=PassConfig(force_fusion=True))
    got, (code, *_) = run_and_get_code(compiled, *args)
    report = ir_passes.last_report()
    assert report is not None
    assert report.fusions == dict.fromkeys(ALL_PATTERNS, 1)
    assert_every_result_close(got, want)
    assert_caches_written_like(args, written)  # the caller's tensors, written in place
    assert "ir_lowered.rotary_embedding_write_kv_cache__native" in code
    assert "clone" not in code
    assert "copy_" not in code


def test_rope_kvcache_fusion_under_auto_functionalized_v1() -> None:
    args = rope_inputs(torch.Generator().manual_seed(4))
    want, written = native_results(rope_chain, args)
    config = PassConfig(force_fusion=True, enable_qk_norm_rope_fusion=False)
    with torch._inductor.config.patch(enable_auto_functionalized_v2=False):
        got, (code, *_) = run_and_get_code(ir_passes.compile(rope_chain, config=config), *args)
    report = ir_passes.last_report()
    assert report is not None
    assert report.fusions == {ir_passes.ROPE_KVCACHE_PATTERN: 1}
    for g, w in zip(got, want, strict=True):
        assert_close(ops.rotary_embedding_write_kv_cache, g, w)
    assert_close(ops.write_kv_cache, (args[-3], args[-2]), (written[-3], written[-2]))
    assert "clone" not in code
    assert "copy_" not in code


def test_kernels_make_the_fusions_worth_it_without_force(calls: Counter[str]) -> None:
    """Registered implementations of the fused rotary ops are real kernels to the pass: with
    them first, the default configuration (O2) fuses, and the compiled code calls them (the
    rotary + cache one at run time, into the caller's caches)."""
    assert fused(PassConfig(), rope_chain_only).fusions == {}
    ir_dispatch.set_priority(
        qk_norm_rotary_embedding=["t_fused"], rotary_embedding_write_kv_cache=["t_fused"]
    )
    assert fused(PassConfig(), rope_chain_only).fusions == {
        ir_passes.QK_NORM_ROPE_PATTERN: 1,
        ir_passes.ROPE_KVCACHE_PATTERN: 1,
    }
    args = rope_inputs(torch.Generator().manual_seed(5))
    want, written = native_results(rope_chain, args)
    got, (code, *_) = run_and_get_code(ir_passes.compile(rope_chain), *args)
    report = ir_passes.last_report()
    assert report is not None
    assert list(report.selected_impls["rotary_embedding_write_kv_cache"].values()) == ["t_fused"]
    assert list(report.selected_impls["qk_norm_rotary_embedding"].values()) == ["t_fused"]
    assert calls["rotary_embedding_write_kv_cache"] == 1
    assert "ir_lowered.rotary_embedding_write_kv_cache__t_fused" in code
    for g, w in zip(got, want, strict=True):
        assert_close(ops.rotary_embedding_write_kv_cache, g, w)
    assert_close(ops.write_kv_cache, (args[-3], args[-2]), (written[-3], written[-2]))


def rope_chain_only(*args: Tensor) -> tuple[Tensor, ...]:
    return rope_chain(*args[4:])


def test_lowering_runs_the_selected_cache_write_on_the_callers_caches(
    calls: Counter[str],
) -> None:
    """``write_kv_cache`` alone (auto_functionalized in the graph) is lowered to the selected
    implementation, which stores into the caller's caches without a copy."""

    def write(key: Tensor, value: Tensor, kc: Tensor, vc: Tensor, slots: Tensor) -> Tensor:
        ops.write_kv_cache(key * 2, value, kc, vc, slots)
        return key + 1

    gen = torch.Generator().manual_seed(6)
    args = rope_inputs(gen)[6:]
    for provider in ("native", "t_store"):
        ir_dispatch.set_priority(write_kv_cache=[provider])
        torch._dynamo.reset()
        expected = [a.clone() for a in args]
        ops.write_kv_cache.native(expected[0] * 2, *expected[1:])
        _, (code, *_) = run_and_get_code(ir_passes.compile(write), *args)
        report = ir_passes.last_report()
        assert report is not None
        assert list(report.selected_impls["write_kv_cache"].values()) == [provider]
        assert f"ir_lowered.write_kv_cache__{provider}" in code
        assert "clone" not in code
        assert "copy_" not in code
        assert_close(ops.write_kv_cache, (args[2], args[3]), (expected[2], expected[3]))
    assert calls["write_kv_cache"] == 1


def test_lowering_a_direct_cache_write_calls_the_selected_implementation(
    calls: Counter[str],
) -> None:
    """A graph that is not functional (make_fx) calls the mutating op itself: lowering points
    that call at the selected implementation's op."""

    def write(key: Tensor, value: Tensor, kc: Tensor, vc: Tensor, slots: Tensor) -> None:
        ops.write_kv_cache(key, value, kc, vc, slots)

    args = rope_inputs(torch.Generator().manual_seed(7))[6:]
    gm = fx_graph(write, args)
    ir_dispatch.set_priority(write_kv_cache=["t_store"])
    report = PassReport()
    LoweringPass(report)(gm.graph)
    gm.recompile()
    assert [str(n.target) for n in gm.graph.nodes if n.op == "call_function"] == [
        "ir_lowered.write_kv_cache__t_store.default"
    ]
    expected = [a.clone() for a in args]
    ops.write_kv_cache.native(*expected)
    gm(*args)
    assert calls["write_kv_cache"] == 1
    assert_close(ops.write_kv_cache, results_of(ops.write_kv_cache, args, None),
                 results_of(ops.write_kv_cache, expected, None))  # fmt: skip


# ---------------------------------------------------------------- switches and levels
@pytest.mark.parametrize("switch", [f.switch for f in LOCAL])
def test_each_switch_turns_its_fusion_off(switch: str) -> None:
    off: dict[str, Any] = {switch: False}
    report = fused(PassConfig(force_fusion=True, **off))
    assert not set(report.fusions) & patterns_of(switch)
    others = {f.switch for f in LOCAL} - {switch}
    assert all(set(report.fusions) & patterns_of(other) for other in others)


#: the documented defaults: level -> the switches on
LEVEL_DEFAULTS = {
    0: set(),
    1: {"fuse_residual_add", "fuse_norm_quant", "fuse_act_quant"},
    2: {f.switch for f in FUSIONS} - {"enable_sp", "fuse_gemm_comms"},
    3: {f.switch for f in FUSIONS} - {"enable_sp", "fuse_gemm_comms"},
}


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_levels_set_the_documented_defaults(level: int) -> None:
    config = PassConfig(level=level)
    assert {f.switch for f in FUSIONS if config.fusion_on(f.switch)} == LEVEL_DEFAULTS[level]
    assert config.clone_elimination_on == (level >= 1)
    sources = {row["switch"]: row["source"] for row in config.describe()}
    assert sources.pop("enable_sp") == sources.pop("fuse_gemm_comms") == "off unless set"
    assert all(source == f"level {level}" for source in sources.values())
    report = fused(PassConfig(level=level, force_fusion=True))
    local = LEVEL_DEFAULTS[level] - TP_SWITCHES
    assert set(report.fusions) == set().union(*(patterns_of(s) for s in local))


def test_default_is_level_2_and_explicit_switches_win() -> None:
    assert PassConfig().level == 2
    config = PassConfig(level=0, fuse_act_quant=True)
    assert config.source_of("fuse_act_quant") == "set"
    forced = dataclasses.replace(config, force_fusion=True)
    assert set(fused(forced).fusions) == patterns_of("fuse_act_quant")
    config = PassConfig(level=3, fuse_rope_kvcache=False)
    assert not config.fusion_on("fuse_rope_kvcache")
    assert config.fusion_on("enable_qk_norm_rope_fusion")
    assert PassConfig(level=0, eliminate_clones=True).clone_elimination_on


def test_fuse_still_works_and_says_what_to_use() -> None:
    with pytest.warns(DeprecationWarning, match="use level=0 for no fusion"):
        off = PassConfig(fuse=False, fuse_norm_quant=True)
    on = [f.switch for f in FUSIONS if off.fusion_on(f.switch)]
    assert on == ["fuse_norm_quant"]
    assert off.source_of("fuse_act_quant") == "fuse"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PassConfig(level=1)  # no warning without fuse


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("level", 4, "level got 4; expected one of 0, 1, 2, 3"),
        ("level", True, "level got True"),
        ("fuse_norm_quant", "yes", "fuse_norm_quant got 'yes'; expected True, False or None"),
        ("rope_kvcache_max_tokens", 0, "rope_kvcache_max_tokens got 0; expected a positive"),
        ("lower", None, "lower got None; expected True or False"),
        ("token_range", (8, 4), r"token_range got \(8, 4\)"),
    ],
)
def test_bad_values_name_the_field(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PassConfig(**{field: value})


def test_key_covers_every_field() -> None:
    base = PassConfig()
    changed: dict[str, Any] = {
        "level": 1, "functionalize": False, "fuse_residual_add": False, "fuse_norm_quant": False,
        "fuse_act_quant": False, "fuse_rope_kvcache": False, "enable_qk_norm_rope_fusion": True,
        "residual_add_max_tokens": 7, "norm_quant_max_tokens": 7, "act_quant_max_tokens": 7,
        "rope_kvcache_max_tokens": 7, "qk_norm_rope_max_tokens": 7, "force_fusion": True,
        "fuse_allreduce_rms": False, "enable_sp": True, "fuse_gemm_comms": True,
        "allreduce_rms_max_tokens": 7, "sp_min_token_num": 7,
        "lower": False, "autotune": True, "eliminate_clones": False, "token_range": (1, 8),
        "debug_dir": "d",
    }  # fmt: skip
    fields = {f.name for f in dataclasses.fields(PassConfig)} - {"fuse"}
    assert set(changed) == fields
    keys = {dataclasses.replace(base, **{k: v}).key() for k, v in changed.items()}
    assert len(keys | {base.key()}) == len(changed) + 1


# --------------------------------------------------------------------------- thresholds
def test_a_static_token_count_above_the_threshold_stays_unfused() -> None:
    at_limit = fused(PassConfig(force_fusion=True, norm_quant_max_tokens=T))
    assert patterns_of("fuse_norm_quant") <= set(at_limit.fusions)
    below = fused(PassConfig(force_fusion=True, norm_quant_max_tokens=T - 1))
    assert not set(below.fusions) & patterns_of("fuse_norm_quant")
    assert patterns_of("fuse_act_quant") <= set(below.fusions)


def test_a_compile_range_decides_over_the_static_count() -> None:
    config = PassConfig(force_fusion=True, norm_quant_max_tokens=8)
    assert patterns_of("fuse_norm_quant") <= set(fused(config.for_range(1, 8)).fusions)
    assert not set(fused(config.for_range(9, None)).fusions) & patterns_of("fuse_norm_quant")
    assert not set(fused(config.for_range(2, 16)).fusions) & patterns_of("fuse_norm_quant")
    assert config.fusions_for_range(1, 8) == tuple(
        f.switch for f in FUSIONS if f.switch not in ("enable_sp", "fuse_gemm_comms")
    )
    assert "fuse_norm_quant" not in config.fusions_for_range(1, 9)


def test_symbolic_token_counts_take_the_range_of_the_graph() -> None:
    """Traced with a symbolic token count, a thresholded fusion (the rotary ones, 256 by
    default) runs only where the graph's range is known to stay below its threshold."""
    rotary = patterns_of("fuse_rope_kvcache") | patterns_of("enable_qk_norm_rope_fusion")
    config = PassConfig(force_fusion=True)
    unknown = fused(config, mode="symbolic")
    assert not set(unknown.fusions) & rotary
    assert patterns_of("fuse_norm_quant") <= set(unknown.fusions)
    assert set(fused(config.for_range(1, 256), mode="symbolic").fusions) == ALL_PATTERNS
    assert not set(fused(config.for_range(1, 257), mode="symbolic").fusions) & rotary
    unlimited = PassConfig(force_fusion=True, rope_kvcache_max_tokens=None)
    assert ir_passes.ROPE_KVCACHE_PATTERN in fused(unlimited, mode="symbolic").fusions


# ------------------------------------------------------------------ the QK-norm forms
def qk_split_view(qkv: Tensor, *rest: Any) -> Any:
    q, k, _ = qkv.split([H * D, KH * D, KH * D], dim=-1)
    q = ops.rms_norm(q.view(T, H, D), rest[2], EPS).view(T, H * D)
    k = ops.rms_norm(k.view(T, KH, D), rest[3], EPS).view(T, KH * D)
    return q, k


def qk_slices_reshape(qkv: Tensor, *rest: Any) -> Any:
    q, k = qkv[:, : H * D], qkv[:, H * D : (H + KH) * D]
    q = ops.rms_norm(q.reshape(-1, D), rest[2], EPS).reshape(T, H * D)
    k = ops.rms_norm(k.reshape(T, KH, D), rest[3], EPS).reshape(q.shape[0], -1)
    return q, k


def qk_unflatten_flatten(qkv: Tensor, *rest: Any) -> Any:
    q, k, _ = torch.split(qkv, [H * D, KH * D, KH * D], dim=1)
    q = ops.rms_norm(q.unflatten(-1, (H, D)), rest[2], EPS).flatten(-2)
    k = ops.rms_norm(k.unflatten(1, (KH, D)), rest[3], EPS).flatten(1, 2)
    return q, k


def qk_separate_contiguous(qkv: Tensor, *rest: Any) -> Any:
    q = qkv[:, : H * D].contiguous()
    k = rest[5].clone()  # xk, its own tensor
    q = ops.rms_norm(q.view(T, H, D), rest[2], EPS).view(T, H * D)
    k = ops.rms_norm(k.view(T * KH, D), rest[3], EPS).view(T, KH * D)
    return q, k


def qk_no_weights(qkv: Tensor, *rest: Any) -> Any:
    q, k, _ = qkv.split([H * D, KH * D, KH * D], dim=-1)
    q = ops.rms_norm(q.unsqueeze(0).view(1, T, H, D), None, EPS).view(T, H * D)
    k = ops.rms_norm(k.view(T, KH, D), None, EPS).squeeze(0).view(T, KH * D)
    return q, k


def with_rotary(norms: Callable[..., Any]) -> Callable[..., Any]:
    def model(*args: Tensor) -> Any:
        q, k = norms(*args)
        return ops.rotary_embedding(args[1], q, k, D, args[2], True)

    model.__name__ = norms.__name__
    return model


QK_FORMS = [qk_split_view, qk_slices_reshape, qk_unflatten_flatten, qk_separate_contiguous,
            qk_no_weights]  # fmt: skip


@pytest.mark.parametrize("form", QK_FORMS, ids=lambda f: f.__name__)
def test_qk_norm_rope_matches_each_form(form: Callable[..., Any]) -> None:
    model = with_rotary(form)
    args = rope_inputs(torch.Generator().manual_seed(8))
    gm = fx_graph(model, args)
    report = PassReport()
    FusionPass(report, PassConfig(force_fusion=True))(gm.graph)
    assert report.fusions == {ir_passes.QK_NORM_ROPE_PATTERN: 1}
    names = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert "ir.rms_norm.default" not in names
    assert "ir.rotary_embedding.default" not in names
    gm.recompile()
    want, _ = native_results(model, args)
    assert_close(ops.qk_norm_rotary_embedding, gm(*args), want)


def qk_other_eps(qkv: Tensor, *rest: Any) -> Any:
    q, k, _ = qkv.split([H * D, KH * D, KH * D], dim=-1)
    q = ops.rms_norm(q.view(T, H, D), rest[2], EPS).view(T, H * D)
    return q, ops.rms_norm(k.view(T, KH, D), rest[3], 1e-5).view(T, KH * D)


def qk_whole_rows(qkv: Tensor, *rest: Any) -> Any:
    """A norm over whole rows (not per head): not the fused op's."""
    q, k, _ = qkv.split([H * D, KH * D, KH * D], dim=-1)
    w = rest[2].repeat(H)
    return ops.rms_norm(q, w, EPS), ops.rms_norm(k, w[: KH * D], EPS)


def qk_transposed(qkv: Tensor, *rest: Any) -> Any:
    """Heads of the transposed layout: a transpose is no reshape."""
    q, k, _ = qkv.split([H * D, KH * D, KH * D], dim=-1)
    q = ops.rms_norm(q.reshape(T, D, H).transpose(1, 2), rest[2], EPS).reshape(T, H * D)
    return q, ops.rms_norm(k.view(T, KH, D), rest[3], EPS).view(T, KH * D)


def qk_normed_read_elsewhere(qkv: Tensor, *rest: Any) -> Any:
    q, k = qk_split_view(qkv, *rest)
    rotated = ops.rotary_embedding(rest[0], q, k, D, rest[1], True)
    return rotated, q.sum()


@pytest.mark.parametrize(
    "form", [qk_other_eps, qk_whole_rows, qk_transposed], ids=lambda f: f.__name__
)
def test_qk_norm_rope_leaves_other_norms_alone(form: Callable[..., Any]) -> None:
    gm = fx_graph(with_rotary(form), rope_inputs(torch.Generator().manual_seed(9)))
    report = PassReport()
    FusionPass(report, PassConfig(force_fusion=True))(gm.graph)
    assert report.fusions == {}


def test_qk_norm_rope_keeps_a_norm_read_elsewhere() -> None:
    gm = fx_graph(qk_normed_read_elsewhere, rope_inputs(torch.Generator().manual_seed(10)))
    report = PassReport()
    FusionPass(report, PassConfig(force_fusion=True))(gm.graph)
    assert report.fusions == {}


# ------------------------------------------------------------- rotary + KV cache, no match
def rope_then_read_then_write(*args: Tensor) -> Any:
    _, positions, cos_sin, _, _, xq, xk, v, kc, vc, slots = args
    q, k = ops.rotary_embedding(positions, xq, xk, D, cos_sin, True)
    early = k.sum()  # read between the rotary and the write: the fused call cannot move up
    ops.write_kv_cache(k, v, kc, vc, slots)
    return q, early


def rope_into_wide_heads(*args: Tensor) -> Any:
    _, positions, cos_sin, _, _, xq, xk, v, kc, vc, slots = args
    q, k = ops.rotary_embedding(positions, xq, xk, D, cos_sin, True)
    # one cache "head" of KH * D: the plain write takes it, the fused op wants head_size heads
    ops.write_kv_cache(k, v, kc.view(BLOCKS, BLOCK_SIZE, 1, KH * D),
                       vc.view(BLOCKS, BLOCK_SIZE, 1, KH * D), slots)  # fmt: skip
    return q


@pytest.mark.parametrize(
    "model", [rope_then_read_then_write, rope_into_wide_heads], ids=lambda f: f.__name__
)
def test_rope_kvcache_leaves_what_it_cannot_fuse(model: Callable[..., Any]) -> None:
    gm = fx_graph(model, rope_inputs(torch.Generator().manual_seed(11)))
    report = PassReport()
    FusionPass(report, PassConfig(force_fusion=True))(gm.graph)
    assert report.fusions == {}


CACHED_WRITE = """
import torch, ir_passes
from ir_spec import ops

def write(key, value, kc, vc, slots):
    ops.write_kv_cache(key * 2, value, kc, vc, slots)
    return key + 1

g = torch.Generator().manual_seed(0)
args = [torch.randn(4, 64, generator=g), torch.randn(4, 64, generator=g),
        torch.randn(4, 8, 2, 32, generator=g), torch.randn(4, 8, 2, 32, generator=g),
        torch.randperm(32, generator=g)[:4]]
expected = [a.clone() for a in args]
ops.write_kv_cache.native(expected[0] * 2, *expected[1:])
with torch._functorch.config.patch(enable_autograd_cache=False):
    ir_passes.compile(write)(*args)
torch.testing.assert_close(args[2:4], expected[2:4])
print("passes ran:", ir_passes.last_report().passes_ran)
"""


def test_code_a_cache_serves_in_a_new_process_finds_the_lowered_op(tmp_path: Any) -> None:
    """The second process gets the compiled code from Inductor's FX graph cache, without the
    passes that define ``ir_lowered::write_kv_cache__native``: computing the selection key
    defines it first, and the cached code stores into the caches."""
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
    }
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    for ran in ("True", "False"):
        done = subprocess.run(
            [sys.executable, "-c", CACHED_WRITE],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"passes ran: {ran}" in done.stdout
