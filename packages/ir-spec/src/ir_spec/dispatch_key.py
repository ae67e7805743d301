"""Dispatch keys: cheap, hashable summaries of an op call's arguments.

An eager call is checked and its implementation chosen once per key; later calls with the same
key reuse the choice. A key therefore holds everything the argument check and `supports_args`
predicates may depend on (dtypes, devices, ranks, layout, hidden sizes, non-tensor arguments)
and never the number of tokens, so a decoding loop hits one entry.

The generic key, generated from an op's signature, summarizes each tensor by its dtype, device,
rank, last dimension and row layout (`row_layout`) and keeps every other argument as it is. An
op whose check relates the leading (token) dimensions of several tensors registers its own key
that adds the outcome of that comparison (see the catalog's `fused_add_rms_norm` and
`rotary_embedding`).
"""

from collections.abc import Callable, Hashable
from typing import Any

import torch

from .layout import row_view

DispatchKey = Callable[..., Hashable]

#: `row_layout` values
CONTIGUOUS, ROWS, OTHER = 2, 1, 0


def row_layout(t: torch.Tensor) -> int:
    """`CONTIGUOUS`; else `ROWS` where the rows are one stride apart (`row_view`: the layout the
    kernel providers address); else `OTHER`. Contiguity alone would let a choice made for
    rows that collapse into one row index be reused for rows that do not."""
    return CONTIGUOUS if t.is_contiguous() else strided_row_layout(t)


def strided_row_layout(t: torch.Tensor) -> int:
    """`row_layout` of a tensor known not to be contiguous."""
    return ROWS if row_view(t) is not None else OTHER


def tensor_summary(t: torch.Tensor) -> tuple[Any, ...]:
    """What a key records of one tensor."""
    return (t.dtype, t.device, t.dim(), t.shape[-1], row_layout(t))
