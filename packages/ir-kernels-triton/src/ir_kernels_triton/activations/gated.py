"""The gated activations: ``act(x[..., :d]) * x[..., d:]`` for silu and gelu (exact or tanh),
optionally quantized to fp8 with a static scale.

Contiguous rows run over the flat index of the output (no partial blocks at row ends, as
Inductor lays them out), other rows over a grid of rows x column blocks. Each element is
computed alone, so the launch may follow the batch and the card (`flat_config`).
"""

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from ..launch import tuning
from ..launch.device import dram_gbps_per_sm, interpreting
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
from ..quant.fp8 import quantize, round_to_dtype

#: The gate a kernel computes (its ``ACT`` argument).
ACT_SILU = 0
ACT_GELU = 1
ACT_GELU_TANH = 2

#: Plans of `launch_gated` (`launch.plans`). A replay passes the launcher's `values` tuple,
#: which each kernel variant takes at its own slots.
_GATED_PLANS = plans_for("gated")


@triton.jit
def _divide(x, y, INTERPRETED: tl.constexpr):
    """x / y by one reciprocal instruction and a multiply (`div.approx`, 2 ulp), without the
    range fix-ups of Triton's default division (six more instructions an element in SASS, which
    the gates' per-element chains feel); the same quotient for |y| < 2**126, above it 0, where the
    quotients of the gates are below 1e-36 anyway. The interpreter lacks the instruction."""
    if INTERPRETED:
        return x / y
    return libdevice.fast_dividef(x, y)


@triton.jit
def _normal_cdf(a, INTERPRETED: tl.constexpr):
    """Phi(a), the standard normal distribution function, from its smaller tail
    Phi(-|a|) = exp(-a^2 / 2) * t * P(t), t = 1 / (1 + 0.253 |a|) (P's coefficients minimise
    the largest relative error of t * P(t) over a dense grid of |a|, 0.253 the best constant
    for them): largest relative error in float32 under 1e-6 for a >= -4, where the erf form
    0.5 * (1 + erf(a / sqrt 2)) cancels. Two special-function
    instructions and seven multiply-adds with constant operands: libdevice's erf picks each of
    its coefficients per element, 11 of the gelu gate's 38-41 instructions an element."""
    t = _divide(1.0, 1.0 + 0.253 * tl.abs(a), INTERPRETED)
    p = -0.08910422795873038 * t + 0.3189987511370202
    p = p * t - 0.2372794613111226
    p = p * t + 0.2639313266235591
    p = p * t + 0.03027961429555079
    p = p * t + 0.11323821113610145
    p = p * t + 0.09993581694921742
    # exp(-a^2 / 2) = 2^(-a^2 / (2 ln 2))
    tail = t * p * tl.exp2(a * a * -0.7213475204444817)
    return tl.where(a >= 0, 1.0 - tail, tail)


@triton.jit
def gate(a, ACT: tl.constexpr, INTERPRETED: tl.constexpr):
    if ACT == 0:
        g = _divide(a, 1.0 + tl.exp(-a), INTERPRETED)
    elif ACT == 1:
        g = a * _normal_cdf(a, INTERPRETED)
    else:
        inner = 0.7978845608028654 * (a + 0.044715 * a * a * a)
        # tanh(t) = 1 - 2 / (exp(2t) + 1), stable at both ends
        g = 0.5 * a * (2.0 - _divide(2.0, tl.exp(2.0 * inner) + 1.0, INTERPRETED))
    return g


@triton.jit
def gated_kernel(
    x_ptr,
    x_stride,
    out_ptr,
    out_stride,
    scale_ptr,
    d,
    ACT: tl.constexpr,
    QUANT: tl.constexpr,
    BLOCK: tl.constexpr,
    INTERPRETED: tl.constexpr,
    PDL: tl.constexpr = False,
):
    await_previous_grid(PDL)
    row, offs, mask = _row_block(d, BLOCK)
    x_row = x_ptr + row * x_stride
    a = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_row + d + offs, mask=mask, other=0.0).to(tl.float32)
    y = gate(a, ACT, INTERPRETED) * b
    if QUANT:
        y = round_to_dtype(y, x_ptr.dtype.element_ty, INTERPRETED)
        y = quantize(y, 1.0 / tl.load(scale_ptr), INTERPRETED)
    tl.store(out_ptr + row * out_stride + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def flat_gated_kernel(
    x_ptr,
    out_ptr,
    scale_ptr,
    total,
    D: tl.constexpr,
    ACT: tl.constexpr,
    QUANT: tl.constexpr,
    BLOCK: tl.constexpr,
    EVEN: tl.constexpr,
    INTERPRETED: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """`gated_kernel` for contiguous ``x [rows, 2D]`` and ``out [rows, D]``, indexed by the
    flat output position (int32: callers keep ``2 * total`` below 2**31). The width is a
    compile-time constant, as in Inductor's kernels: the row index is a multiply, not a
    division. `EVEN`: `BLOCK` divides `total`, so no lane is masked."""
    await_previous_grid(PDL)
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    src = x_ptr + (i // D) * D + i  # row * 2D + column
    if EVEN:
        a = tl.load(src).to(tl.float32)
        b = tl.load(src + D).to(tl.float32)
    else:
        a = tl.load(src, mask=i < total, other=0.0).to(tl.float32)
        b = tl.load(src + D, mask=i < total, other=0.0).to(tl.float32)
    y = gate(a, ACT, INTERPRETED) * b
    if QUANT:
        y = round_to_dtype(y, x_ptr.dtype.element_ty, INTERPRETED)
        y = quantize(y, 1.0 / tl.load(scale_ptr), INTERPRETED)
    if EVEN:
        tl.store(out_ptr + i, y.to(out_ptr.dtype.element_ty))
    else:
        tl.store(out_ptr + i, y.to(out_ptr.dtype.element_ty), mask=i < total)


def flat_config(
    total: int,
    streaming: bool = False,
    act: int = ACT_SILU,
    quant: bool = False,
    gbps_per_sm: float | None = None,
) -> tuple[int, int]:
    """(block, warps) of the flat gated kernel over `total` outputs of gate `act` (`quant`:
    with fp8 output; `tuning.Gates`). `streaming`: the op's bytes do not stay in L2 between
    calls. Decode sizes favour latency: small blocks over many warps. Past them a block takes
    more outputs a thread; streamed from DRAM, more warps keep more loads in flight, unless the
    card's class (`gbps_per_sm`) sets `tuning.DeviceClass.streamed_gates` for the gates
    without fp8 output. The gelu gates, heavier to compute, spread small sizes over more
    programs and large ones within the L2 over fewer warps, each thread computing more
    outputs."""
    table = tuning.COMMON.gates
    gelu = act != ACT_SILU and not quant
    device_launch = tuning.device_class(gbps_per_sm).streamed_gates
    if streaming and device_launch is not None and not quant:
        return device_launch
    if gelu and not streaming:
        if total <= table.decode_outputs:
            if total <= table.gelu_narrow_outputs:
                return table.gelu_narrow_launch
            return table.gelu_decode_launch
        if total <= table.gelu_mid_outputs:
            return table.gelu_mid_launch
        return table.gelu_wide_launch
    if total <= table.decode_outputs:
        return table.decode_launch
    if act == ACT_SILU and total <= table.silu_mid_outputs:
        return table.silu_mid_launch
    if quant or not streaming:
        return table.launch
    return table.streamed_silu if act == ACT_SILU else table.streamed_gelu


def launch_gated(
    x: torch.Tensor,
    out: torch.Tensor,
    act: int,
    scale: torch.Tensor | None = None,
    block: int | None = None,
    num_warps: int | None = None,
    flat: tuple[int, int] | None = None,
) -> None:
    """``out = act(x[..., :d]) * x[..., d:]`` (then quantized with `scale` if given).

    Contiguous rows take the flat kernel (`flat`: its block and warps, for tuning sweeps);
    `block` and `num_warps` (for tuning sweeps) select the row-block kernel with that
    configuration."""
    d = x.shape[-1] // 2
    n = num_rows(x)
    if n == 0 or d == 0:
        return
    values = (x, out, x if scale is None else scale)
    key = None
    if flat is None and block is None and num_warps is None and launch_plans_enabled():
        key = launch_key((act,), x, out, scale)
        if _GATED_PLANS.replay(key, values):
            return
    x2, out2 = rows(x), rows(out)
    dense = x2.stride(0) == 2 * d and out2.stride(0) == d and 2 * n * d < FLAT_INDEX_LIMIT
    if dense and block is None and num_warps is None:
        if flat is None:
            streaming = streams_from_dram(x, tensor_bytes(x, out))
            # the bandwidth is asked only where the rule reads it: even a cached answer costs
            # a visible share of a decode-size launch
            gbps = dram_gbps_per_sm(x) if streaming else None
            flat = flat_config(n * d, streaming, act, scale is not None, gbps)
        flat_block, warps = flat
        grid: tuple[int, ...] = (triton.cdiv(n * d, flat_block),)
        kernel, slots = flat_gated_kernel, (0, 1, 2)
        args: tuple[object, ...] = (x2, out2, scale if scale is not None else x2, n * d)
        kwargs = dict(
            D=d,
            ACT=act,
            QUANT=scale is not None,
            BLOCK=flat_block,
            EVEN=n * d % flat_block == 0,
            INTERPRETED=interpreting(),
            num_warps=warps,
            **launch_options(x2, grid, warps),
        )
    else:
        default_block, default_warps = pointwise_config(
            n, d, compute_heavy=act != ACT_SILU, fp8_out=scale is not None
        )
        block = block or default_block
        warps = num_warps or default_warps
        grid = (n * triton.cdiv(d, block),)
        kernel, slots = gated_kernel, (0, 2, 4)
        args = (
            x2,
            x2.stride(0),
            out2,
            out2.stride(0),
            scale if scale is not None else x2,
            d,
        )
        kwargs = dict(
            ACT=act,
            QUANT=scale is not None,
            BLOCK=block,
            INTERPRETED=interpreting(),
            num_warps=warps,
            **launch_options(x2, grid, warps),
        )
    compiled = kernel[grid](*args, **kwargs)
    if key is not None:
        _GATED_PLANS.record(key, kernel, compiled, grid, args, kwargs, slots)
