"""Saturating conversion to float8 e4m3 inside kernels.

On a GPU Triton converts float32 to e4m3 with `cvt.rn.satfinite`: round to nearest even,
values beyond +-448 (infinities included) to +-448, NaN to NaN, which is torch's
clamp-then-convert. Triton's interpreter converts some values wrongly (ties away from even,
and a lost carry into the exponent: -127.9 becomes -64) and does not saturate, so under the
interpreter the kernels clamp and round to the e4m3 grid in float32 first, after which the
conversion is exact. The GPU path does not pay for this.
"""

import triton
import triton.language as tl

from .platform import interpreting


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
        y = _round_to_e4m3_grid(tl.clamp(y, -448.0, 448.0))
    return y


@triton.jit
def quantize(y, inv_scale, EXACT_ROUNDING: tl.constexpr):
    """`y / scale` ready for `.to(tl.float8e4nv)` (`saturate_fp8`), as a multiplication by
    `inv_scale`, the scale's reciprocal taken once: a division costs a reciprocal and range
    fix-ups an element, which bound the quantizing tails at decode sizes; either is within an
    ulp of the quotient."""
    return saturate_fp8(y * inv_scale, EXACT_ROUNDING)


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


def exact_rounding() -> bool:
    """Whether kernels must round to the e4m3 grid themselves (under the interpreter)."""
    return interpreting()


__all__ = ["exact_rounding", "quantize", "round_to_dtype", "saturate_fp8", "triton"]
