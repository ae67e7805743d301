"""Saturating conversion to float8 e4m3 inside kernels.

On a GPU the conversion instruction rounds to nearest even. Triton's interpreter converts
some values wrongly (ties away from even, and a lost carry into the exponent: -127.9 becomes
-64), so under the interpreter the kernels first round to the e4m3 grid in float32, after
which the conversion is exact. The GPU path does not pay for this.
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
    """Clamp to +-448 (and, under the interpreter, round to the e4m3 grid)."""
    y = tl.clamp(y, -448.0, 448.0)
    if EXACT_ROUNDING:
        y = _round_to_e4m3_grid(y)
    return y


def exact_rounding() -> bool:
    """Whether kernels must round to the e4m3 grid themselves (under the interpreter)."""
    return interpreting()


__all__ = ["exact_rounding", "saturate_fp8", "triton"]
