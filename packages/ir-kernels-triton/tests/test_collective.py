"""The all-reduce + norm composites (`ir_kernels_triton.collective.allreduce_norm`).

On the CPU: the path each message size takes and why, what `supports_args` accepts, the
reduce + norm kernel and the two-shot gather in Triton's interpreter over several simulated
ranks' buffers (host tensors, their addresses in the pointer table as the symmetric buffers'
would be), and the fallback path (the IR all-reduce over gloo and the norm kernels) in worlds
of two processes, each against the native composition. On a GPU: the one kernel over torch
symmetric memory in a world of one GPU (NCCL), every path, against the native composition."""

from typing import Any

import pytest
import torch
from torch import Tensor

import ir_kernels_triton  # noqa: F401  (registers the implementations)
from ir_kernels_triton.collective import allreduce_norm as arn
from ir_spec import IrOp, ops
from ir_spec.sampling import SampleSpec
from ir_spec.testing import assert_close, run_in_world, sample_inputs

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
COMPOSITES = [
    ops.all_reduce_rms_norm,
    ops.all_reduce_fused_add_rms_norm,
    ops.all_reduce_rms_norm_static_quant_fp8,
    ops.all_reduce_fused_add_rms_norm_static_quant_fp8,
]
#: Triton's interpreter rounds bfloat16 wrongly: bfloat16 on a GPU only, as test_kernels.py
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if GPU else [])


# ------------------------------------------------------------------------ path selection
def test_paths_by_message_size() -> None:
    assert arn.select_path(0, 2).kind == arn.ONE_SHOT
    assert arn.select_path(arn.ONE_SHOT_MAX_BYTES, 2).kind == arn.ONE_SHOT
    assert arn.select_path(arn.ONE_SHOT_MAX_BYTES + 1, 2).kind == arn.TWO_SHOT
    assert arn.select_path(arn.TWO_SHOT_MAX_BYTES, 8).kind == arn.TWO_SHOT
    above = arn.select_path(arn.TWO_SHOT_MAX_BYTES + 1, 2)
    assert above.kind == arn.FALLBACK
    assert "NCCL all-reduce and the norm kernels" in above.reason
    unavailable = arn.select_path(16, 2, "symmetric memory needs CUDA tensors; x is on cpu")
    assert unavailable == arn.Path(arn.FALLBACK, unavailable.reason)


@pytest.mark.parametrize(
    ("nbytes", "world", "message"),
    [(-1, 2, "nbytes=-1, expected a byte count"), (8, 0, "world=0, expected a positive")],
)
def test_bad_path_arguments_are_named(nbytes: int, world: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        arn.select_path(nbytes, world)


def test_host_tensors_fall_back_with_the_reason() -> None:
    reason = arn.unavailable_reason(torch.randn(4, 8), "0")
    assert reason == "symmetric memory needs CUDA tensors; x is on cpu"


def test_supports_args_takes_rows_where_the_kernels_run() -> None:
    x = torch.randn(6, 64, device=DEVICE)
    w = torch.randn(64, device=DEVICE)
    scale = torch.tensor([0.1], device=DEVICE)
    fused = ops.all_reduce_fused_add_rms_norm.impls["triton"].supports_args
    assert fused is not None
    assert fused(x, torch.randn_like(x), w, 1e-6, "0")
    assert not fused(x, torch.randn(3, 64, device=DEVICE), w, 1e-6, "0")  # residual's shape
    plain = ops.all_reduce_rms_norm.impls["triton"].supports_args
    assert plain is not None
    assert plain(x, None, 1e-6, "0")
    assert not plain(x.view(2, 3, 64), w, 1e-6, "0")  # rows of a 2-d x only
    assert not plain(x.t(), None, 1e-6, "0")  # contiguous
    assert not plain(x.to(torch.int32), None, 1e-6, "0")
    quant = ops.all_reduce_rms_norm_static_quant_fp8.impls["triton"].supports_args
    assert quant is not None
    assert quant(x, w, 1e-6, scale, "0")
    other = "cpu" if GPU else "meta"
    assert not quant(x, w, 1e-6, torch.tensor([0.1], device=other), "0")
    for op in COMPOSITES:
        assert not op.impls["triton"].batch_invariant, op.name


# ------------------------------------------------------------ kernels over simulated ranks
def expected_of(
    xs: list[Tensor], residual: Tensor | None, weight: Tensor, eps: float, scale: Tensor | None
) -> tuple[Tensor, Tensor | None]:
    """The composition on the ranks' inputs, the sum taken in float32 and rounded once."""
    summed = sum(x.float() for x in xs)
    assert isinstance(summed, Tensor)
    reduced = summed.to(xs[0].dtype)
    if residual is None:
        out, residual_out = ops.rms_norm.native(reduced, weight, eps), None
    else:
        out, residual_out = ops.fused_add_rms_norm.native(reduced, residual, weight, eps)
    if scale is not None:
        out = ops.static_quant_fp8.native(out, scale)
    return out, residual_out


def table(tensors: list[Tensor]) -> Tensor:
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64, device=DEVICE)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("tokens", [1, 7, 16])
@pytest.mark.parametrize("form", ["norm", "add", "norm+quant", "add+quant"])
def test_one_and_two_shot_kernels_give_the_composition(
    form: str, tokens: int, world: int, dtype: torch.dtype
) -> None:
    hidden, eps = 96, 1e-6
    gen = torch.Generator().manual_seed(tokens * 31 + world)

    def draw(*shape: int, dt: torch.dtype = dtype) -> Tensor:
        return torch.randn(*shape, generator=gen).to(dt).to(DEVICE)

    xs = [draw(tokens, hidden) for _ in range(world)]
    residual = draw(tokens, hidden) if form.startswith("add") else None
    weight = 1 + 0.1 * draw(hidden)
    scale = torch.tensor([0.02], device=DEVICE) if form.endswith("quant") else None
    want_out, want_res = expected_of(xs, residual, weight, eps, scale)
    op: IrOp = (
        ops.all_reduce_fused_add_rms_norm if residual is not None else ops.all_reduce_rms_norm
    )
    out_dtype = torch.float8_e4m3fn if scale is not None else dtype

    # one-shot: one launch reads every rank's rows
    out = torch.empty(tokens, hidden, dtype=out_dtype, device=DEVICE)
    res_out = torch.empty(tokens, hidden, dtype=dtype, device=DEVICE)
    arn.launch_reduce_norm(
        table(xs), out, weight, eps, rows=(0, tokens), residual=residual,
        residual_out=res_out, scale=scale,
    )  # fmt: skip
    check(op, out, want_out, res_out if residual is not None else None, want_res)

    # two-shot: each rank its block into its own region, then every block gathered
    per_rank = -(-tokens // world)
    regions = [torch.empty(tokens, hidden, dtype=out_dtype, device=DEVICE) for _ in xs]
    res_regions = [torch.empty(tokens, hidden, dtype=dtype, device=DEVICE) for _ in xs]
    for rank in range(world):
        first, stop = rank * per_rank, min(tokens, (rank + 1) * per_rank)
        arn.launch_reduce_norm(
            table(xs), regions[rank], weight, eps, rows=(first, stop), residual=residual,
            residual_out=res_regions[rank], scale=scale, out_row_offset=first,
        )  # fmt: skip
    gathered = torch.empty_like(out)
    arn.launch_gather_rows(table(regions), gathered, per_rank)
    gathered_res = torch.empty_like(res_out)
    arn.launch_gather_rows(table(res_regions), gathered_res, per_rank)
    check(op, gathered, want_out, gathered_res if residual is not None else None, want_res)


def check(op: IrOp, out: Tensor, want: Tensor, res: Tensor | None, want_res: Tensor | None) -> None:
    assert_close(op, out, want)
    if res is not None:
        assert want_res is not None
        torch.testing.assert_close(res, want_res, atol=0.0, rtol=0.0)


# ------------------------------------------------------- the fallback path, in gloo worlds
def check_fallback(rank: int, world: int) -> None:
    for op in COMPOSITES:
        for dtype in (torch.float32, torch.float16):
            spec = SampleSpec(dtype=dtype, batch_shape=(5,), hidden_size=64, seed=3)
            args = sample_inputs(op, spec)
            assert op.impls["triton"].supports_args is not None
            assert op.impls["triton"].supports_args(*args)
            assert arn.path_for(args[0], args[-1]).kind == arn.FALLBACK
            got = op.impls["triton"].fn(*args)
            want = op.native(*args)
            assert_close(op, got, want)


@pytest.mark.skipif(GPU, reason="the gloo fallback runs the kernels on host tensors")
@pytest.mark.parametrize("world", [2])
def test_fallback_over_gloo_gives_the_composition(world: int) -> None:
    run_in_world(check_fallback, world)


# ------------------------------------------------------------------ one GPU, for real
#: tokens x 4096 hidden: one-shot up to 64 bf16 rows, two-shot up to 2048, then NCCL
GPU_TOKENS = [1, 7, 64, 65, 512, 2048, 4096]


def check_on_gpu(rank: int, world: int) -> None:
    from ir_kernels_triton.collective.allreduce_norm import path_for

    kinds: set[str] = set()
    for op in COMPOSITES:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for tokens in GPU_TOKENS:
                spec = SampleSpec(
                    dtype=dtype, batch_shape=(tokens,), hidden_size=4096, seed=tokens,
                    device="cuda",
                )  # fmt: skip
                args: list[Any] = list(sample_inputs(op, spec))
                kinds.add(path_for(args[0], args[-1]).kind)
                got = op.impls["triton"].fn(*args)
                torch.cuda.synchronize()
                assert_close(op, got, op.native(*args))
    assert kinds == {arn.ONE_SHOT, arn.TWO_SHOT, arn.FALLBACK}, kinds


@pytest.mark.skipif(not GPU, reason="symmetric memory needs a CUDA GPU")
def test_symmetric_memory_kernel_in_a_world_of_one_gpu() -> None:
    run_in_world(check_on_gpu, 1, backend="nccl")
