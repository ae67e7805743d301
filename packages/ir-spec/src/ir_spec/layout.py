"""`row_view`: the rows a row-wise kernel addresses, shared by the kernel providers."""

from torch import Tensor


def row_view(t: Tensor) -> Tensor | None:
    """`t` as ``[rows, hidden]`` sharing its memory, or None where that needs a copy.

    Row-wise kernels address a tensor by one row stride: its leading dimensions must collapse
    into one row index and its last dimension be contiguous (strided rows are fine).
    """
    if t.dim() == 0 or (t.shape[-1] > 1 and t.stride(-1) != 1):
        return None
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return None
