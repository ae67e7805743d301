"""The tensor-parallel passes (`ir_passes.tp_fusion`) in worlds of gloo processes: each
all-reduce + norm pattern becomes its composite and gives the unfused results; sequence
parallelism rewrites all-reduce -> norm into reduce-scatter -> local norm -> all-gather and
refuses a compile size that does not divide among the ranks; the GEMM + collective fusion
skips on the CPU with its reason; a world of one rank is left alone. The configuration of
these switches (levels, the lower-bound threshold) is checked in one process."""

from typing import Any

import pytest
import torch
from torch import Tensor

import ir_passes
from ir_passes import FUSIONS, PassConfig
from ir_passes.config import ALLREDUCE_RMS_PATTERNS, SP_PATTERNS
from ir_spec import ops, process_groups
from ir_spec.testing import run_in_world

EPS = 1e-6
T, HIDDEN = 8, 64
TOL: dict[str, Any] = {"atol": 2e-5, "rtol": 2e-5}


def block(x: Tensor, r: Tensor, w: Tensor, scale: Tensor, proj: Tensor) -> tuple[Tensor, ...]:
    """Each all-reduce + norm pattern once (group: the default group), then the matrix
    products fuse_gemm_comms looks for after sequence parallelism."""
    g = process_groups.default_group_name()
    a = ops.rms_norm(ops.all_reduce(x, g), w, EPS)
    b, res_b = ops.fused_add_rms_norm(ops.all_reduce(x * 2, g), r, w, EPS)
    c_sum = r + ops.all_reduce(x * 3, g)  # a plain residual add, the sum second
    c = ops.rms_norm(c_sum, w, EPS)
    d = ops.static_quant_fp8(ops.rms_norm(ops.all_reduce(x * 4, g), w, EPS), scale)
    e, res_e = ops.fused_add_rms_norm(r, ops.all_reduce(x * 5, g), w, EPS)
    e_q = ops.static_quant_fp8(e, scale)
    f = ops.all_reduce(x @ proj, g)
    f = ops.rms_norm(f, w, EPS) @ proj
    return a, b, res_b, c, c_sum, d.float(), e_q.float(), res_e, f


def inputs(rank: int) -> list[Tensor]:
    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own activation
    x = torch.randn(T, HIDDEN, generator=gen)
    shared = torch.Generator().manual_seed(7)  # replicated: residual, weights, scale
    r = torch.randn(T, HIDDEN, generator=shared)
    w = 1 + 0.1 * torch.randn(HIDDEN, generator=shared)
    proj = torch.randn(HIDDEN, HIDDEN, generator=shared) / HIDDEN**0.5
    return [x, r, w, torch.tensor([0.05]), proj]


def compiled_run(config: PassConfig, args: list[Tensor]) -> tuple[Any, ir_passes.PassReport]:
    torch._dynamo.reset()
    with (
        torch.no_grad(),
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        out = ir_passes.compile(block, config=config)(*args)
    report = ir_passes.last_report()
    assert report is not None
    return out, report


def check_passes(rank: int, world: int) -> None:
    args = inputs(rank)
    with torch.no_grad():
        expected = block(*args)
    base = PassConfig(force_fusion=True, fuse_norm_quant=False, fuse_residual_add=False)

    got, report = compiled_run(base, args)
    torch.testing.assert_close(got, expected, **TOL)
    assert set(report.fusions) == set(ALLREDUCE_RMS_PATTERNS) - {
        "all_reduce+add+rms_norm+static_quant_fp8"
    }, report.fusions
    assert report.fusions["all_reduce+rms_norm"] == 2  # a and f
    assert "all_reduce" not in report.selected_impls  # every sum fused with its norm

    # the norms fused with their quantization first: the composites absorb them
    got, report = compiled_run(PassConfig(force_fusion=True), args)
    torch.testing.assert_close(got, expected, **TOL)
    assert report.fusions["all_reduce+rms_norm+static_quant_fp8"] == 1
    assert report.fusions["all_reduce+fused_add_rms_norm+static_quant_fp8"] == 1

    # under its threshold only
    _, report = compiled_run(PassConfig(force_fusion=True, allreduce_rms_max_tokens=T - 1), args)
    assert not set(report.fusions) & set(ALLREDUCE_RMS_PATTERNS)

    sp = PassConfig(
        force_fusion=True,
        fuse_norm_quant=False,
        fuse_residual_add=False,
        enable_sp=True,
        fuse_allreduce_rms=False,
    )
    got, report = compiled_run(sp, args)
    torch.testing.assert_close(got, expected, **TOL)
    assert report.fusions["sp:all_reduce+rms_norm"] == 3  # a, d and f
    assert report.fusions["sp:all_reduce+fused_add_rms_norm"] == 2  # b, e
    assert {"reduce_scatter", "all_gather"} <= set(report.selected_impls)
    # the residual add before rms_norm is not rewritten
    assert any("a residual add before rms_norm" in s for s in report.skipped), report.skipped

    # from sp_min_token_num up only
    _, report = compiled_run(
        PassConfig(force_fusion=True, enable_sp=True, sp_min_token_num=T + 1), args
    )
    assert not set(report.fusions) & set(SP_PATTERNS)

    # the GEMM + collective fusion: sequence parallelism runs, the fused ops need CUDA + NCCL
    gemm = PassConfig(force_fusion=True, fuse_gemm_comms=True, fuse_allreduce_rms=False)
    got, report = compiled_run(gemm, args)
    torch.testing.assert_close(got, expected, **TOL)
    # every all-reduce, its norm fused with the residual add or the quantization first
    assert sum(report.fusions[p] for p in SP_PATTERNS) == 6, report.fusions
    assert report.fusions["sp:all_reduce+fused_add_rms_norm_static_quant_fp8"] == 1
    assert not {"all_gather+matmul", "matmul+reduce_scatter"} & set(report.fusions)
    reasons = [s for s in report.skipped if s.startswith("fuse_gemm_comms:")]
    assert reasons
    assert all("need CUDA tensors; this one is on cpu" in s for s in reasons), reasons

    # a compile size that does not divide among the ranks is refused
    odd = [a[: T - 1] if a.dim() == 2 and a.shape[0] == T else a for a in args]
    with pytest.raises(Exception, match=rf"compile size {T - 1} does not divide among the {world}"):
        compiled_run(sp.for_range(T - 1, T - 1), odd)
    # ... and skipped where the graph is not compiled for that one size
    _, report = compiled_run(sp, odd)
    assert not set(report.fusions) & set(SP_PATTERNS)
    assert any(f"{T - 1} tokens do not divide among {world} ranks" in s for s in report.skipped)


@pytest.mark.parametrize("world", [2, 4])
def test_tp_passes_fire_and_keep_the_results(world: int) -> None:
    run_in_world(check_passes, world)


def check_world_of_one(rank: int, world: int) -> None:
    args = inputs(rank)
    with torch.no_grad():
        expected = block(*args)
    got, report = compiled_run(PassConfig(force_fusion=True, enable_sp=True), args)
    torch.testing.assert_close(got, expected, **TOL)
    assert not set(report.fusions) & (set(ALLREDUCE_RMS_PATTERNS) | set(SP_PATTERNS))
    assert any("has one rank: nothing to reduce" in s for s in report.skipped), report.skipped


def test_a_world_of_one_rank_is_left_alone() -> None:
    run_in_world(check_world_of_one, 1)


# ----------------------------------------------------------------------- configuration
def test_switch_defaults_and_lower_bound() -> None:
    o2 = PassConfig()
    assert o2.fusion_on("fuse_allreduce_rms")
    assert not PassConfig(level=1).fusion_on("fuse_allreduce_rms")
    assert not any(PassConfig(level=3).fusion_on(s) for s in ("enable_sp", "fuse_gemm_comms"))
    gemm = PassConfig(fuse_gemm_comms=True)
    assert gemm.fusion_on("enable_sp")
    assert gemm.source_of("enable_sp") == "fuse_gemm_comms"
    assert not PassConfig(fuse_gemm_comms=True, enable_sp=False).fusion_on("enable_sp")
    sp = PassConfig(enable_sp=True, sp_min_token_num=64)
    assert sp.fusions_for_range(64, None).count("enable_sp") == 1
    assert "enable_sp" not in sp.fusions_for_range(1, 63)
    assert "enable_sp" not in sp.fusions_for_range(32, 128)
    assert PassConfig(enable_sp=True).fusion_applies("enable_sp", 1)
    with pytest.raises(ValueError, match="sp_min_token_num got 0; expected a positive"):
        PassConfig(sp_min_token_num=0)
    lower = {f.switch for f in FUSIONS if f.lower_bound}
    assert lower == {"enable_sp", "fuse_gemm_comms"}


# ------------------------------------------------------------------ two GPUs, for real
def check_gemm_comms_on_gpus(rank: int, world: int) -> None:
    args = [a.cuda() for a in inputs(rank)]
    with torch.no_grad():
        expected = block(*args)
    config = PassConfig(force_fusion=True, fuse_gemm_comms=True, fuse_allreduce_rms=False)
    got, report = compiled_run(config, args)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert report.fusions["all_gather+matmul"] == 1, report.fusions
    assert report.fusions["matmul+reduce_scatter"] == 1, report.fusions
    assert not [s for s in report.skipped if s.startswith("fuse_gemm_comms:")], report.skipped


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (NCCL, symmetric memory)")
def test_gemm_comms_fuse_on_two_gpus() -> None:
    run_in_world(check_gemm_comms_on_gpus, 2, backend="nccl")
