"""Whether tensors share memory: what an in-place implementation may be handed.

An in-place implementation overwrites its activations while it reads its other tensor arguments,
so ``maybe_inplace`` runs one only where no activation shares an element with another tensor
argument and no activation's elements share memory among themselves (stride 0, as ``expand``
makes). `overlap` and `internal_overlap` answer True, False, or None where they cannot tell;
`check_inplace_args` applies them to an op call.

The answers are exact for what ``maybe_inplace`` is given in practice: separate tensors, views
whose rows are one stride apart (the row layouts the kernel providers address: slices of rows,
the query and key columns split from one projection, a weight or table row), and stride-0 rows.
They work on fake tensors too (the IR passes ask them at compile time): there, tensors share
memory only where they share a storage, and a symbolic size, stride or offset makes the answer
None.

Real tensors are compared by address, so two storages over one allocation (``from_blob``,
NumPy) count as shared as well.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.symbolic_shapes import statically_known_true

if TYPE_CHECKING:
    from .op import IrOp

logger = logging.getLogger("ir_spec")

#: A tensor's memory in bytes: (storage, first byte, rows, row stride, row width).
#: `storage` is None for real tensors (whose addresses are absolute), else the fake storage.
_Rows = tuple[Any, int, int, int, int]


def _static(*values: Any) -> bool:
    return not any(isinstance(v, torch.SymInt) for v in values)


def _is_fake(t: Tensor) -> bool:
    """Whether `t` has no memory of its own to compare addresses of (fake or meta)."""
    return t.is_meta or (type(t) is not Tensor and isinstance(t, FakeTensor))


def _start(t: Tensor) -> tuple[Any, Any]:
    """(storage key, first byte): the address for a real tensor; the fake storage and the
    storage offset in bytes for a fake one."""
    if _is_fake(t):
        return t.untyped_storage()._cdata, t.storage_offset() * t.element_size()
    return None, t.data_ptr()


def _span(t: Tensor) -> tuple[Any, Any, Any] | None:
    """(storage key, first byte, byte after the last element); None where symbolic."""
    key, lo = _start(t)
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
    if not _static(lo, last):
        return None
    return key, lo, lo + (last + 1) * t.element_size()


def _rows(t: Tensor) -> _Rows | None:
    """`t` as rows one stride apart, each of contiguous elements (or of one element), in bytes;
    None where its dimensions do not collapse so, or are symbolic."""
    size = t.element_size()
    shape, strides = t.shape, t.stride()
    key, lo = _start(t)
    if key is not None and not _static(lo, *shape, *strides):  # a real tensor's are ints
        return None
    # dimensions of size 1 address nothing new, nor do stride-0 ones (``expand``)
    dims = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1 and s != 0]
    if dims and dims[-1][1] == 1:
        width, leading = dims[-1][0], dims[:-1]
    else:
        width, leading = 1, dims
    rows, row_stride = 1, width
    for n, s in reversed(leading):
        if rows == 1:
            rows, row_stride = n, s
        elif s == row_stride * rows:
            rows *= n
        else:
            return None
    return key, lo, rows, row_stride * size, width * size


def _rows_meet_block(rows: _Rows, lo: int, hi: int) -> bool:
    """Whether a row of `rows` shares a byte with ``[lo, hi)``."""
    _, start, n, stride, width = rows
    if n == 1 or stride == 0:
        return start < hi and lo < start + width
    # row k covers [start + k * stride, start + k * stride + width)
    first = max(0, (lo - start - width) // stride + 1)
    last = min(n - 1, -((start - hi) // stride) - 1)
    return first <= last


def _rows_meet_rows(a: _Rows, b: _Rows) -> bool | None:
    """Whether two row layouts of one memory share a byte; None where they are not comparable
    (different row strides, or rows wider than their stride)."""
    _, a_lo, a_n, stride, a_width = a
    _, b_lo, b_n, b_stride, b_width = b
    if b_stride != stride or stride <= 0 or a_width > stride or b_width > stride:
        return None
    # b's row k starts in a's grid at row q + k, column r
    q, r = divmod(b_lo - a_lo, stride)

    def rows_meet(shift: int) -> bool:  # a's row i meets b's row k where i = k + shift
        return max(0, shift) <= min(a_n - 1, b_n - 1 + shift)

    return (r < a_width and rows_meet(q)) or (r + b_width > stride and rows_meet(q + 1))


def overlap(a: Tensor, b: Tensor) -> bool | None:
    """Whether `a` and `b` share at least one byte of memory; None where that cannot be told
    (irregular layouts over the same bytes, or symbolic sizes)."""
    if _is_fake(a) != _is_fake(b) or a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    span_a, span_b = _span(a), _span(b)
    if span_a is None or span_b is None:
        return None if _start(a)[0] == _start(b)[0] else False
    if span_a[0] != span_b[0] or span_a[2] <= span_b[1] or span_b[2] <= span_a[1]:
        return False
    return _rows_overlap(a, b)


def _rows_overlap(a: Tensor, b: Tensor) -> bool | None:
    """`overlap` of two tensors whose spans meet: decided by their rows."""
    rows_a, rows_b = _rows(a), _rows(b)
    if rows_a is None or rows_b is None:
        return None
    if rows_a[2] == 1:
        return _rows_meet_block(rows_b, rows_a[1], rows_a[1] + rows_a[4])
    if rows_b[2] == 1:
        return _rows_meet_block(rows_a, rows_b[1], rows_b[1] + rows_b[4])
    return _rows_meet_rows(rows_a, rows_b)


def _real_span(t: Tensor) -> tuple[int, int]:
    """The bytes ``[first, end)`` a real tensor's elements lie in (empty for no element)."""
    first = t.data_ptr()
    if t.is_contiguous():
        return first, first + t.nbytes
    last = 0
    for n, stride in zip(t.shape, t.stride(), strict=True):
        if n == 0:
            return first, first
        last += (n - 1) * stride
    return first, first + (last + 1) * t.element_size()


def internal_overlap(t: Tensor) -> bool | None:
    """Whether two elements of `t` share memory (a stride 0 over a size above 1, as ``expand``
    makes); None where the layout is too irregular to tell.

    Symbolic sizes (a dynamic token count) are decided where the strides prove it whatever the
    sizes, innermost dimension first, without adding guards: ``[n, h]`` with strides ``[h, 1]``
    does not overlap for any ``n``."""
    shape, strides = list(t.shape), list(t.stride())
    if _is_fake(t) and not _static(*shape, *strides):
        return _symbolic_internal_overlap(shape, strides)
    if t.numel() <= 1:
        return False
    dims = sorted((s, n) for n, s in zip(shape, strides, strict=True) if n != 1)
    if any(s == 0 for s, _ in dims):
        return True
    extent = 0  # the largest element offset the dimensions so far address
    for stride, n in dims:
        if stride <= extent:
            return None
        extent += stride * (n - 1)
    return False


def _symbolic_internal_overlap(shape: list[Any], strides: list[Any]) -> bool | None:
    known = statically_known_true
    dims = [(n, s) for n, s in zip(shape, strides, strict=True) if not known(n == 1)]
    if any(known(s == 0) and known(n > 1) for n, s in dims):
        return True
    extent: Any = 0
    for n, stride in reversed(dims):
        if not known(stride > extent):
            return None
        extent = extent + stride * (n - 1)
    return False


def _same_view(a: Tensor, b: Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and a.stride() == b.stride()
        and _start(a) == _start(b)
    )


_PAIRS: dict[tuple[str, tuple[bool, ...]], list[tuple[int, int]]] = {}


def tensor_pairs(op: IrOp, args: tuple[Any, ...]) -> list[tuple[int, int]]:
    """The pairs of positions `check_inplace_args` compares, in its order: each activation with
    every other tensor argument given (not None), the activation first."""
    given = tuple(args[i] is not None for i in op.tensor_indices)
    pairs = _PAIRS.get((op.name, given))
    if pairs is None:
        present = [i for i, g in zip(op.tensor_indices, given, strict=True) if g]
        activations = set(op.activation_indices)
        pairs = []
        for k, i in enumerate(present):
            for j in present[k + 1 :]:
                if i in activations:
                    pairs.append((i, j))
                elif j in activations:
                    pairs.append((j, i))
        _PAIRS[(op.name, given)] = pairs
    return pairs


def overlap_error(
    op: IrOp, args: tuple[Any, ...], provider: str, pair: tuple[int, int], verdict: bool | None
) -> ValueError:
    """The `ValueError` for activation ``args[pair[0]]`` overlapping ``args[pair[1]]``
    (`verdict` None: it may)."""
    first, second = (op.parameter_names[i] for i in pair)
    a, b = (args[i] for i in pair)
    how = "overlap in memory" if verdict else "may overlap in memory"
    same = " (the same tensor)" if a is b or _same_view(a, b) else ""
    return ValueError(
        f"ir.{op.name}.maybe_inplace: arguments '{first}' and '{second}' {how}{same}; the "
        f"in-place implementation of provider {provider!r} would overwrite '{first}' while "
        f"it reads '{second}'. Pass tensors that do not share memory (a clone), or call "
        f"ir.{op.name}(...), which leaves its inputs alone"
    )


def check_inplace_args(
    op: IrOp,
    args: tuple[Any, ...],
    provider: str,
    pairs: list[tuple[int, int]] | None = None,
) -> tuple[int, ...]:
    """Check the normalized `args` of a call of `op` that its in-place implementation by
    `provider` is to run on; return the positions of the activations it must be given copies
    of, because their own elements share memory (they cannot hold their results). Every other
    activation may be written in place.

    Raises `ValueError`, naming both arguments, where an activation shares memory with another
    tensor argument (or cannot be shown not to): the implementation would read what it has
    already overwritten. `pairs` limits the comparison to those pairs (default `tensor_pairs`).
    """
    spans: dict[int, tuple[int, int]] = {}
    for pair in tensor_pairs(op, args) if pairs is None else pairs:
        a, b = args[pair[0]], args[pair[1]]
        if _is_fake(a) or _is_fake(b):
            verdict = overlap(a, b)
        else:  # real tensors: compare addresses first, each tensor's span taken once
            span_a = spans.get(pair[0]) or spans.setdefault(pair[0], _real_span(a))
            span_b = spans.get(pair[1]) or spans.setdefault(pair[1], _real_span(b))
            if span_a[1] <= span_b[0] or span_b[1] <= span_a[0] or a.device != b.device:
                continue
            if span_a[0] == span_a[1] or span_b[0] == span_b[1]:
                continue
            verdict = _rows_overlap(a, b)
        if verdict is not False:
            raise overlap_error(op, args, provider, pair, verdict)
    copied = tuple(
        i
        for i in op.activation_indices
        if args[i] is not None
        and not (not _is_fake(args[i]) and args[i].is_contiguous())
        and internal_overlap(args[i]) is not False
    )
    if copied:
        logger.debug(
            "ir.%s.maybe_inplace: the elements of %s share memory: computed on copies",
            op.name,
            ", ".join(repr(op.parameter_names[i]) for i in copied),
        )
    return copied
