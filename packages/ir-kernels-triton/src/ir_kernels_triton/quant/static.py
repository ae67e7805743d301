"""Static fp8 quantization: ``q = saturate(x / scale)`` with one scale for the tensor.

Contiguous rows run over the flat index (no partial blocks at row ends), other rows over a grid
of rows x column blocks. Each element is computed alone, so the launch may follow the batch
(`flat_config`).
"""

import torch
import triton
import triton.language as tl

from ..launch import tuning
from ..launch.plans import launch_key, launch_plans_enabled, plans_for
from ..launch.programmatic import await_previous_grid, launch_options
from ..launch.rows import (
    FLAT_INDEX_LIMIT,
    _row_block,
    num_rows,
    pointwise_config,
    rows,
    streams_from_dram,
    tensor_bytes,
)
from .fp8 import exact_rounding, quantize

#: Plans of `launch_static_quant` (`launch.plans`).
_STATIC_QUANT_PLANS = plans_for("static_quant")


@triton.jit
def static_quant_kernel(
    x_ptr,
    x_stride,
    q_ptr,
    q_stride,
    scale_ptr,
    hidden,
    BLOCK: tl.constexpr,
    EXACT_FP8: tl.constexpr,
    PDL: tl.constexpr = False,
):
    await_previous_grid(PDL)
    row, offs, mask = _row_block(hidden, BLOCK)
    x = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=0.0).to(tl.float32)
    q = quantize(x, 1.0 / tl.load(scale_ptr), EXACT_FP8)
    tl.store(q_ptr + row * q_stride + offs, q.to(q_ptr.dtype.element_ty), mask=mask)


@triton.jit
def flat_static_quant_kernel(
    x_ptr,
    q_ptr,
    scale_ptr,
    total,
    BLOCK: tl.constexpr,
    EVEN: tl.constexpr,
    EXACT_FP8: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """`static_quant_kernel` for contiguous tensors, indexed flat (int32); `EVEN`: `BLOCK`
    divides `total`."""
    await_previous_grid(PDL)
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        x = tl.load(x_ptr + i).to(tl.float32)
    else:
        x = tl.load(x_ptr + i, mask=i < total, other=0.0).to(tl.float32)
    q = quantize(x, 1.0 / tl.load(scale_ptr), EXACT_FP8).to(q_ptr.dtype.element_ty)
    if EVEN:
        tl.store(q_ptr + i, q)
    else:
        tl.store(q_ptr + i, q, mask=i < total)


def flat_config(total: int, streaming: bool = False) -> tuple[int, int]:
    """(block, warps) of the flat kernel over `total` outputs (`tuning.StaticQuant`): small
    blocks over many warps at decode sizes for latency; past them wide blocks, over more warps
    once the op's bytes stream from DRAM (`streaming`) to keep more loads in flight."""
    table = tuning.COMMON.static_quant
    if total <= table.decode_outputs:
        return table.decode_launch
    return table.streamed_launch if streaming else table.launch


def launch_static_quant(
    x: torch.Tensor,
    scale: torch.Tensor,
    q: torch.Tensor,
    flat: tuple[int, int] | None = None,
) -> None:
    """``q = saturate(x / scale)`` (`flat`: block and warps of the flat kernel, for tuning
    sweeps)."""
    hidden = x.shape[-1]
    n = num_rows(x)
    if n == 0:
        return
    values = (x, q, scale)
    key = None
    if flat is None and launch_plans_enabled():
        key = launch_key((), x, scale, q)
        if _STATIC_QUANT_PLANS.replay(key, values):
            return
    x2, q2 = rows(x), rows(q)
    total = n * hidden
    if x2.stride(0) == hidden and q2.stride(0) == hidden and total < FLAT_INDEX_LIMIT:
        block, warps = flat or flat_config(total, streams_from_dram(x, tensor_bytes(x, q)))
        grid = (triton.cdiv(total, block),)
        kernel, slots = flat_static_quant_kernel, (0, 1, 2)
        args: tuple[object, ...] = (x2, q2, scale, total)
        kwargs = dict(BLOCK=block, EVEN=total % block == 0)
    else:
        block, warps = pointwise_config(n, hidden, compute_heavy=False, fp8_out=True)
        grid = (n * triton.cdiv(hidden, block),)
        kernel, slots = static_quant_kernel, (0, 2, 4)
        args = (x2, x2.stride(0), q2, q2.stride(0), scale, hidden)
        kwargs = dict(BLOCK=block)
    kwargs.update(EXACT_FP8=exact_rounding(), num_warps=warps, **launch_options(x2, grid, warps))
    compiled = kernel[grid](*args, **kwargs)
    if key is not None:
        _STATIC_QUANT_PLANS.record(key, kernel, compiled, grid, args, kwargs, slots)
