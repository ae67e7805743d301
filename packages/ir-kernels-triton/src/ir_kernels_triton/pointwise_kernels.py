"""Triton kernels for the elementwise ops: the gated activations and static fp8 quantization.

Both run over the flat index of the output where rows are contiguous (no partial blocks at row
ends, as Inductor lays them out), else over a 2-D grid (row, column block). The quantizers
that reduce before they scale are in `dynamic_quant_kernels`.
"""

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from .fp8 import exact_rounding, quantize, round_to_dtype
from .launch import await_previous_grid, launch_options
from .plans import launch_key, launch_plans_enabled, plans_for
from .platform import (
    deep_loads,
    dram_gbps_per_sm,
    interpreting,
    next_power_of_2,
    num_rows,
    rows,
    streams_from_dram,
    tensor_bytes,
)

ACT_SILU = 0
ACT_GELU = 1
ACT_GELU_TANH = 2


@triton.jit
def _row_block(width, BLOCK: tl.constexpr):
    """(row, column offsets, mask) of this program in a flat grid of rows x column blocks, a
    row's blocks on consecutive programs (DRAM locality, as Inductor lays them out)."""
    pid = tl.program_id(0)
    blocks_per_row = tl.cdiv(width, BLOCK)
    row = (pid // blocks_per_row).to(tl.int64)
    offs = (pid % blocks_per_row) * BLOCK + tl.arange(0, BLOCK)
    return row, offs, offs < width


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
    Phi(-|a|) = exp(-a^2 / 2) * t * P(t), t = 1 / (1 + 0.253 |a|) (coefficients fitted by
    `benchmarks/kernels/gelu_tail_fit.py`): largest relative error in float32 under 1e-6 for
    a >= -4, where the erf form 0.5 * (1 + erf(a / sqrt 2)) cancels. Two special-function
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
def _gate(a, ACT: tl.constexpr, INTERPRETED: tl.constexpr):
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
    y = _gate(a, ACT, INTERPRETED) * b
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
    y = _gate(a, ACT, INTERPRETED) * b
    if QUANT:
        y = round_to_dtype(y, x_ptr.dtype.element_ty, INTERPRETED)
        y = quantize(y, 1.0 / tl.load(scale_ptr), INTERPRETED)
    if EVEN:
        tl.store(out_ptr + i, y.to(out_ptr.dtype.element_ty))
    else:
        tl.store(out_ptr + i, y.to(out_ptr.dtype.element_ty), mask=i < total)


#: Rows up to which a gated kernel favours latency (small blocks, many programs).
FEW_ROWS = 64
#: Largest index the flat kernels address with 32-bit arithmetic.
FLAT_INDEX_LIMIT = 2**31


#: Outputs up to which the flat kernels favour latency (decode sizes).
FLAT_DECODE_OUTPUTS = 1 << 17
#: Outputs up to which the gelu gates take 256-element blocks over 4 warps.
GELU_NARROW_OUTPUTS = 1 << 13
#: Outputs up to which silu gates past the decode sizes take 1024-element blocks over 8 warps.
SILU_EIGHT_WARPS_OUTPUTS = 1 << 19


def flat_config(
    total: int,
    streaming: bool = False,
    act: int | None = None,
    quant: bool = False,
    gbps_per_sm: float | None = None,
) -> tuple[int, int]:
    """(block, warps) of the flat elementwise kernels over `total` outputs: the fp8
    quantization alone (`act` None) or a gated activation (`quant`: with fp8 output).
    `streaming`: the op's bytes do not stay in L2 between calls. H100 sweeps
    (`benchmarks/results/triton-tuning-H100.log`, sections 1 and 8-10): up to 128K outputs,
    512-element blocks over 8 warps for latency; above, the quantization alone runs best on
    2048-element blocks, over 4 warps while its data stays in L2 (up to 30 % faster than 1024
    over 4 warps) and 8 once it streams from memory; the gated kernels on 1024 over 4 warps,
    except streaming silu (1024 over 8, 1-1.5 % faster) and gelu (2048 over 8, up to 1 %).
    The gelu gates, heavier to compute (these sweeps ran when gelu took libdevice's erf),
    spread small sizes over more programs: 256-element blocks over 4 warps up to 8K outputs
    (one token of 5632: 1.38 to 1.33 µs), 512 over 8 up to 128K (one token of 14336 fastest so
    in four sweeps, 0.02-0.04 µs ahead; sections 1, 2, 9, 15), 512 over 4 up to 1M; above,
    while in L2, 512 over a single warp (16 outputs a thread: 128 x 28672 from 6.68 to 6.42
    µs; sections 9 and 10). Cards with `gbps_per_sm` of DRAM bandwidth per SM from
    `DEEP_LOADS_GBPS_PER_SM` stream the gates without fp8 output on 1024 over 4 warps, as
    Inductor launches them (H200, 16384 x 28672: silu 668.8 to 643.2 µs; gelu, from its
    normal tail, within 0.3 % of the fastest of 16 launches at four shapes;
    `triton-tuning-H200.log`, rounds 2 and 3). The silu gates from 128K to 512K outputs (16
    tokens of 14336 or 28672) take 1024 over 8 warps: on an H200 the quantizing silu at 16 x
    14336 1.53 to 1.48 µs and at 16 x 28672 1.71 to 1.65, silu at 16 x 28672 1.64 to 1.60
    (`triton-tuning-H200.log`, round 15); on an H100, silu at 16 x 14336 1.62 to 1.61 and 1.57
    to 1.56 (`triton-tuning-H100.log`, rounds 6 and 9)."""
    gelu = act is not None and act != ACT_SILU and not quant
    if streaming and deep_loads(gbps_per_sm) and act is not None and not quant:
        return 1024, 4
    if gelu and not streaming:
        if total <= FLAT_DECODE_OUTPUTS:
            return (256, 4) if total <= GELU_NARROW_OUTPUTS else (512, 8)
        return (512, 4) if total <= 8 * FLAT_DECODE_OUTPUTS else (512, 1)
    if total <= FLAT_DECODE_OUTPUTS:
        return 512, 8
    if act == ACT_SILU and total <= SILU_EIGHT_WARPS_OUTPUTS:
        return 1024, 8
    if act is None:
        return (2048, 8) if streaming else (2048, 4)
    if quant or not streaming:
        return 1024, 4
    return (1024, 8) if act == ACT_SILU else (2048, 8)


def pointwise_config(
    rows_: int, width: int, compute_heavy: bool, fp8_out: bool = False
) -> tuple[int, int]:
    """(block, warps) for an elementwise kernel, from sweeps on an H200 (tune_triton.py).
    Elementwise results do not depend on the configuration, so it may depend on the number of
    rows: few rows favour latency (small blocks, many programs). Gates with erf/tanh run best
    with 2 warps, fp8 outputs with 4, the rest with 8."""
    if rows_ <= FEW_ROWS:
        return min(512, next_power_of_2(width)), 4
    warps = 2 if compute_heavy else (4 if fp8_out else 8)
    return min(2048, next_power_of_2(width)), warps


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

    Contiguous rows take the flat kernel (`flat`: its block and warps, for tuning); `block` and
    `num_warps` (for tuning) select the row-block kernel with that configuration."""
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
            # the bandwidth asked only where it is used: asked at every launch, it cost H200
            # decode launches 0.1-0.2 µs of replayed time (`triton-tuning-H200.log`, round 2)
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


#: Plans of the launchers below (`plans`). A replay passes the launcher's `values` tuple,
#: which each kernel variant takes at its own slots.
_GATED_PLANS = plans_for("gated")
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


def launch_static_quant(
    x: torch.Tensor,
    scale: torch.Tensor,
    q: torch.Tensor,
    flat: tuple[int, int] | None = None,
) -> None:
    """``q = saturate(x / scale)`` (`flat`: block and warps of the flat kernel, for tuning)."""
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
