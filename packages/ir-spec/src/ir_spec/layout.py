"""Row layouts shared by the kernel providers: `row_view` (the rows a row-wise kernel
addresses), `empty_rows` (an output with the input's rows) and `shares_memory` (whether an
output is written over an input)."""

import torch
from torch import Tensor


def row_view(t: Tensor) -> Tensor | None:
    """`t` as ``[rows, hidden]`` sharing its memory, or None where that needs a copy.

    Row-wise kernels address a tensor by one row stride: its leading dimensions must collapse
    into one row index and its last dimension be contiguous (strided rows are fine). A view
    that needs a copy raises `RuntimeError` on a real tensor and `ValueError` on a fake one
    (as compiled code's implementation selection sees it): either means None.
    """
    if t.dim() == 0 or (t.shape[-1] > 1 and t.stride(-1) != 1):
        return None
    try:
        return t.view(-1, t.shape[-1])
    except (RuntimeError, ValueError):
        return None


def empty_rows(x: Tensor, width: int | None = None, dtype: torch.dtype | None = None) -> Tensor:
    """A new row-major tensor with `x`'s leading shape and device: rows of `width` elements
    (default: `x`'s) of `dtype` (default: `x`'s)."""
    shape = (*x.shape[:-1], x.shape[-1] if width is None else width)
    return torch.empty(shape, dtype=dtype or x.dtype, device=x.device)


def shares_memory(a: Tensor, b: Tensor) -> bool:
    """Whether `a` and `b` are views of the same storage on the same device (an output written
    in place over an input, or any two views of one buffer)."""
    return a.device == b.device and (
        a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    )
