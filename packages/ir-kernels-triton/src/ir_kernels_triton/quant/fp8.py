"""Saturating conversion to float8 e4m3 inside kernels.

On a GPU Triton converts float32 to e4m3 with `cvt.rn.satfinite`: round to nearest even,
values beyond +-448 (infinities included) to +-448, NaN to NaN, which is torch's
clamp-then-convert. Triton's interpreter converts some values wrongly (ties away from even,
and a lost carry into the exponent: -127.9 becomes -64) and does not saturate, so under the
interpreter the kernels clamp and round to the e4m3 grid in float32 first, after which the
conversion is exact. The GPU path does not pay for this.

The dynamic scales follow torch's rules for non-finite values, as the reference's ``amax``,
``minimum`` and ``clamp`` do: a NaN anywhere in a row (or group) makes its peak, its scale and
so all its outputs NaN. Triton's ``tl.max`` and ``tl.maximum`` drop a NaN instead (PTX
``max.f32``), so the peaks here are taken by `abs_peak` and `max_keeping_nan`.
"""

import triton
import triton.language as tl

from ..launch.device import interpreting


@triton.jit
def _round_to_e4m3_grid(y):
    bits = y.to(tl.int32, bitcast=True)
    exponent = ((bits >> 23) & 0xFF) - 127
    step_exponent = tl.maximum(exponent, -6) - 3  # 3 mantissa bits; subnormals below 2**-6
    step = ((step_exponent + 127) << 23).to(tl.float32, bitcast=True)
    scaled = y / step
    # adding and removing 1.5 * 2**23 rounds to an integer, half to even
    return ((scaled + 12582912.0) - 12582912.0) * step


@triton.jit
def saturate_fp8(y, EXACT_ROUNDING: tl.constexpr):
    """`y` ready for `.to(tl.float8e4nv)`: as is on a GPU, whose conversion saturates; under
    the interpreter (`EXACT_ROUNDING`) clamped to +-448 and rounded to the e4m3 grid."""
    if EXACT_ROUNDING:
        y = _round_to_e4m3_grid(tl.clamp(y, -448.0, 448.0, propagate_nan=tl.PropagateNan.ALL))
    return y


@triton.jit
def quantize(y, inv_scale, EXACT_ROUNDING: tl.constexpr):
    """`y / scale` in float8 e4m3 (saturated: `saturate_fp8`), as a multiplication by
    `inv_scale`, the scale's reciprocal taken once: a division costs a reciprocal and range
    fix-ups an element, which bound the quantizing tails at decode sizes; either is within an
    ulp of the quotient. NaN stays NaN."""
    q = saturate_fp8(y * inv_scale, EXACT_ROUNDING)
    fp8 = q.to(tl.float8e4nv)
    if EXACT_ROUNDING:
        # the interpreter converts NaN to a finite code (0x7c, 384); e4m3fn's NaN is 0x7f
        bits = tl.where(q != q, 0x7F, fp8.to(tl.uint8, bitcast=True)).to(tl.uint8)
        fp8 = bits.to(tl.float8e4nv, bitcast=True)
    return fp8


@triton.jit
def round_to_dtype(y, dtype: tl.constexpr, INTERPRETED: tl.constexpr):
    """float32 `y` rounded to `dtype` (the activations' type, as the reference rounds before
    quantizing) and widened again. On a GPU bf16 takes one packed conversion for two values:
    ptxas pairs the scalar fp16 conversions by itself but turns each bf16 one into an `F2F`
    on a slow pipe, which bounds the fp8 norms at decode sizes. Same bits either way."""
    if dtype == tl.bfloat16 and not INTERPRETED:
        return tl.inline_asm_elementwise(
            asm="{ .reg .b32 t; cvt.rn.bf16x2.f32 t, $3, $2; shl.b32 $0, t, 16; "
            "and.b32 $1, t, 0xffff0000; }",
            constraints="=r,=r,r,r",
            args=[y],
            dtype=tl.float32,
            is_pure=True,
            pack=2,
        )
    return y.to(dtype).to(tl.float32)


@triton.jit
def max_keeping_nan(a, b):
    """The larger of `a` and `b`, NaN if either is NaN (``torch.maximum``; PTX ``max.NaN``)."""
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def min_keeping_nan(a, b):
    """The smaller of `a` and `b`, NaN if either is NaN (``torch.minimum``; PTX ``min.NaN``)."""
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def abs_peak(x, axis: tl.constexpr):
    """The largest ``|x|`` (float32) along `axis`, NaN where one of them is NaN, as
    ``x.abs().amax()``. Taken over the bits as integers: with the sign cleared, a float's bits
    order as its value, and a NaN's lie above infinity's. A plain reduction, which the
    interpreter runs whole (a custom combine it runs element by element in Python), and on a
    GPU as fast as ``tl.max`` over a row; the group kernel's tiles of groups run slower so and
    keep a float maximum (`max_keeping_nan`)."""
    bits = tl.abs(x).to(tl.int32, bitcast=True)
    return tl.max(bits, axis=axis).to(tl.float32, bitcast=True)


@triton.jit
def dynamic_scale(amax):
    """The scale of a row (or group) of peak `amax`, already bounded by ``scale_ub`` where
    there is one: ``max(amax / 448, 1 / (448 * 512))``, NaN where `amax` is."""
    return max_keeping_nan(amax / 448.0, 1.0 / (448.0 * 512.0))


@triton.jit
def bounded_dynamic_scale(amax, ub_ptr, HAS_UB: tl.constexpr):
    """`dynamic_scale` of `amax` bounded first by ``scale_ub`` (read from `ub_ptr`) where
    `HAS_UB`, as ``minimum(amax, scale_ub)``: NaN where either is."""
    if HAS_UB:
        amax = min_keeping_nan(amax, tl.load(ub_ptr))
    return dynamic_scale(amax)


@triton.jit
def sum_and_max(total_a, peak_a, total_b, peak_b):
    """The combine of the norm kernels' joint reduction of a row's sum of squares and its peak:
    one pass of barriers for both, the peak keeping a NaN (`max_keeping_nan`)."""
    return total_a + total_b, max_keeping_nan(peak_a, peak_b)


def exact_rounding() -> bool:
    """Whether kernels must round to the e4m3 grid themselves (under the interpreter)."""
    return interpreting()
