"""The last eager choice of an op, remembered behind a tensor guard.

A decoding loop calls each op with arguments of the same properties over and over. Instead of
building the dispatch key each time (a cost that grows with each tensor argument), an op's generated
``__call__`` first asks a guard built from the previous call whether the tensors still have
the same dtype, device, sizes (except the leading one of a tensor of rank 2 or more laid out
row-major with the usual strides, whose layout no leading size changes), strides,
``requires_grad`` and dispatch keys, and whether the other arguments are equal; then the previous
choice stands. The guard is Dynamo's C++ tensor check (``torch._C._dynamo.guards.TensorGuards``,
one call for all tensors). It checks more than the dispatch key records, so it never admits
arguments that the key cache would treat differently.

An op that registered its own dispatch key relates its arguments (for example the token
counts of two tensors), which a per-tensor guard with a free leading size cannot see: its
guard checks every size exactly, so any relation between shapes holds as it did when the
choice was made (a decoding loop keeps its batch size, and hits). The memo is rebuilt after
each call that misses it, at most `MAX_REBUILDS` times per op until its choices are forgotten,
so arguments that keep changing fall back to the key alone.
"""

import logging
from typing import Any

import torch

logger = logging.getLogger("ir_spec")

#: How often an op's memo is rebuilt before it stops trying (until `forget_choices`).
MAX_REBUILDS = 64
#: Stands in for an optional tensor passed as None, so a guard always checks the same number of
#: tensors (the memo's other values record which optional tensors were None).
NONE_TENSOR = torch.empty(0)

_TensorGuards: Any  # its stub declares one list of sizes; it takes one list per tensor
try:
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # pragma: no cover - every torch this project supports has it
    _TensorGuards = None


def available() -> bool:
    """Whether this torch provides the tensor guard."""
    return _TensorGuards is not None


def _row_major(t: torch.Tensor) -> bool:
    """`t`'s strides are those of a new row-major tensor of its shape: then, with the same
    strides, every leading size gives a contiguous tensor. Otherwise a leading size of 1 can
    make a tensor contiguous, or its rows collapse, that are not at another size."""
    expected = 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride()), strict=True):
        if stride != expected:
            return False
        expected *= size
    return True


def guard(tensors: tuple[torch.Tensor, ...], *, exact: bool = False) -> Any | None:
    """A guard that accepts tensors like `tensors` (any leading size where the rank is 2 or
    more, unless `exact`), or None where it cannot be built."""
    if _TensorGuards is None:
        return None
    sizes = [
        [None, *t.shape[1:]] if t.dim() >= 2 and not exact and _row_major(t) else list(t.shape)
        for t in tensors
    ]
    strides = [list(t.stride()) for t in tensors]
    try:
        return _TensorGuards(*tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)
    except Exception as exc:  # an unexpected torch: the key alone still works
        logger.debug("ir_spec: no tensor guard for the last eager choice: %s", exc)
        return None
