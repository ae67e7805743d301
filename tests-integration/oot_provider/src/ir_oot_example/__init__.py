"""Provider ``oot_example``: an rms_norm written with torch ops, counting its calls."""

import torch
from torch import Tensor

from ir_spec import ops

CALLS = {"rms_norm": 0}


def supports(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    # decide on dtype and static sizes only, never on the number of tokens
    return x.dtype == torch.float32 and variance_size is None


@ops.rms_norm.register_impl("oot_example", supports_args=supports, batch_invariant=True)
def rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    CALLS["rms_norm"] += 1
    out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)
    return out if weight is None else out * weight
