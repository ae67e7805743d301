"""Argument checks shared by the catalog's checkers.

They read metadata only (dtype, rank, sizes, device), so they run unchanged on fake tensors at
trace time and cost little per eager call.
"""

from __future__ import annotations

from typing import Any

import torch

from .errors import argument_error

FLOAT_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})
FLOAT_DTYPE_NAMES = "float32, float16 or bfloat16"


def activation(op: str, arg: str, x: Any, *, min_rank: int = 1) -> torch.Tensor:
    """A float32/float16/bfloat16 tensor of rank >= `min_rank`."""
    if not isinstance(x, torch.Tensor):
        raise argument_error(op, arg, x, "a Tensor")
    if x.dtype not in FLOAT_DTYPES:
        raise argument_error(op, arg, x, f"dtype {FLOAT_DTYPE_NAMES}")
    if x.dim() < min_rank:
        raise argument_error(op, arg, x, f"a tensor of rank >= {min_rank}")
    return x


def like(op: str, arg: str, t: Any, x: torch.Tensor, x_name: str) -> torch.Tensor:
    """A tensor of the same shape, dtype and device as `x`."""
    if not isinstance(t, torch.Tensor):
        raise argument_error(op, arg, t, "a Tensor")
    if t.shape != x.shape or t.dtype != x.dtype or t.device != x.device:
        raise argument_error(
            op,
            arg,
            t,
            f"the shape, dtype and device of '{x_name}' ({tuple(x.shape)}, {x.dtype}, {x.device})",
        )
    return t


def norm_weight(op: str, weight: Any, x: torch.Tensor) -> None:
    """None, or a 1-D weight of x's hidden size on x's device, of x's dtype or float32.

    The norms multiply in float32, so a float32 weight beside half-precision rows is exact
    where the rows' dtype would round it (Gemma's ``1 + w``)."""
    if weight is None:
        return
    if not isinstance(weight, torch.Tensor):
        raise argument_error(op, "weight", weight, "a Tensor or None")
    hidden = x.shape[-1]
    if weight.dim() != 1 or weight.shape[0] != hidden:
        raise argument_error(op, "weight", weight, f"a 1-D tensor of size {hidden} (x.shape[-1])")
    if weight.dtype not in (x.dtype, torch.float32) or weight.device != x.device:
        dtypes = "float32" if x.dtype == torch.float32 else f"{x.dtype} (as x) or float32"
        raise argument_error(op, "weight", weight, f"dtype {dtypes} on {x.device}")


def epsilon(op: str, eps: Any) -> None:
    """A positive finite float."""
    if isinstance(eps, bool) or not isinstance(eps, (float, int)) or not 0 < eps < float("inf"):
        raise argument_error(op, "epsilon", eps, "a positive float")


def variance_size(op: str, size: Any, x: torch.Tensor) -> None:
    """None, or an int in 1..x.shape[-1]."""
    if size is None:
        return
    if isinstance(size, bool) or not isinstance(size, (int, torch.SymInt)):
        raise argument_error(op, "variance_size", size, "an int or None")
    if not 0 < size <= x.shape[-1]:
        raise argument_error(op, "variance_size", size, f"an int in 1..{x.shape[-1]}")


def even_last_dim(op: str, arg: str, x: torch.Tensor) -> None:
    """The last dimension splits into two equal halves."""
    if x.shape[-1] % 2 != 0:
        raise argument_error(op, arg, x, "an even last dimension (two halves of size d)")


def scalar_scale(op: str, arg: str, scale: Any, x: torch.Tensor) -> None:
    """A one-element float32 tensor on x's device."""
    if not isinstance(scale, torch.Tensor):
        raise argument_error(op, arg, scale, "a one-element float32 Tensor")
    if scale.numel() != 1 or scale.dtype != torch.float32 or scale.device != x.device:
        raise argument_error(op, arg, scale, f"a one-element float32 tensor on {x.device}")


def optional_scalar_scale(op: str, arg: str, scale: Any, x: torch.Tensor) -> None:
    """None or a one-element float32 tensor on x's device."""
    if scale is not None:
        scalar_scale(op, arg, scale, x)
