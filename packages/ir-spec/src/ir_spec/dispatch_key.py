"""Dispatch keys: cheap, hashable summaries of an op call's arguments.

An eager call is checked and its implementation chosen once per key; later calls with the same
key reuse the choice. A key therefore holds everything the argument check and `supports_args`
predicates may depend on (dtypes, devices, ranks, layout, hidden sizes, non-tensor arguments)
and never the number of tokens, so a decoding loop hits one entry.

The generic key, generated from an op's signature, summarizes each tensor by its dtype, device,
rank, last dimension and contiguity and keeps every other argument as it is. An op whose check
relates the leading (token) dimensions of several tensors registers its own key that adds the
outcome of that comparison (see the catalog's `fused_add_rms_norm` and `rotary_embedding`).
"""

from collections.abc import Callable, Hashable
from typing import Any

import torch

DispatchKey = Callable[..., Hashable]


def tensor_summary(t: torch.Tensor) -> tuple[Any, ...]:
    """What a key records of one tensor."""
    return (t.dtype, t.device, t.dim(), t.shape[-1], t.is_contiguous())
