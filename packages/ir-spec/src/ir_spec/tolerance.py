"""Comparison tolerances per dtype, overridable per op."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Tolerance:
    """Absolute and relative tolerance for `torch.testing.assert_close`."""

    atol: float
    rtol: float


#: Defaults for results in each dtype: about two units in the last place.
DEFAULT_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
    torch.float16: Tolerance(atol=1e-3, rtol=1e-3),
    torch.bfloat16: Tolerance(atol=1e-2, rtol=1.6e-2),
    # e4m3 keeps 3 mantissa bits: one unit in the last place is 1/8 relative; the smallest
    # subnormal is 2**-9. Results are compared after converting to float32.
    torch.float8_e4m3fn: Tolerance(atol=2.0**-9, rtol=0.125),
}
