"""`ir_spec.aliasing`: whether tensors share memory, against the element addresses of random
views of one buffer (brute force), and on fake tensors."""

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch import Tensor

from ir_spec import aliasing


def element_addresses(t: Tensor) -> set[int]:
    """Every byte address an element of `t` occupies (brute force)."""
    size = t.element_size()
    offsets = torch.zeros(t.shape, dtype=torch.int64)
    for dim, stride in enumerate(t.stride()):
        shape = [1] * t.dim()
        shape[dim] = t.shape[dim]
        offsets = offsets + torch.arange(t.shape[dim]).reshape(shape) * stride
    base = t.data_ptr()
    return {base + int(o) * size + b for o in offsets.reshape(-1) for b in range(size)}


@st.composite
def views(draw: st.DrawFn, buffer: Tensor) -> Tensor:
    """A random 1-D or 2-D strided view inside `buffer` (a 1-D tensor): rows of a stride
    (possibly 0, or narrower than the rows), elements of stride 1, 2 or 0."""
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    if draw(st.booleans()):
        shape = (draw(st.integers(1, 12)),)
        strides = (draw(st.integers(0, 3)),)
    else:
        shape = (draw(st.integers(1, 6)), draw(st.integers(1, 6)))
        strides = (draw(st.integers(0, 12)), draw(st.sampled_from([1, 1, 1, 2, 0])))
    span = sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + 1
    assume(span <= buffer.numel())
    offset = draw(st.integers(0, buffer.numel() - span))
    return buffer.as_strided(shape, strides, offset)


def row_stride(t: Tensor) -> int | None:
    """The stride of `t`'s rows where it is rows of contiguous elements one stride apart, no
    narrower than a row (0: one row, or one expanded); None for another layout."""
    if t.dim() == 1:
        return 0 if t.stride(0) == 1 or t.shape[0] == 1 else None
    rows, width = t.shape
    if width > 1 and t.stride(1) != 1:
        return None
    if rows == 1 or t.stride(0) == 0:
        return 0
    return t.stride(0) if t.stride(0) >= width else None


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_overlap_agrees_with_element_addresses(data: st.DataObject) -> None:
    buffer = torch.zeros(64)
    a = data.draw(views(buffer))
    b = data.draw(views(buffer))
    verdict = aliasing.overlap(a, b)
    truth = bool(element_addresses(a) & element_addresses(b))
    if verdict is not None:
        assert verdict == truth, (a.shape, a.stride(), a.storage_offset(), b.stride())
    one_row = [row_stride(t) == 0 for t in (a, b)]
    strides = {row_stride(t) for t in (a, b)} - {0}
    if None not in strides and (any(one_row) or len(strides) == 1):
        assert verdict is not None  # rows of one stride, or one row against rows: decided


def test_an_expanded_row_is_told_apart_from_other_columns_of_its_rows() -> None:
    """The expanded first row of columns 8:12 and columns 0:4 of every row share no byte,
    though each one's span covers the other's."""
    base = torch.randn(5, 12)
    key = base[:1, 8:12].expand(5, 4)
    assert aliasing.overlap(key, base[:, 0:4]) is False
    assert aliasing.overlap(key, base[:, 6:10]) is True


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_internal_overlap_agrees_with_element_addresses(data: st.DataObject) -> None:
    t = data.draw(views(torch.zeros(64)))
    verdict = aliasing.internal_overlap(t)
    truth = len(element_addresses(t)) < t.numel() * t.element_size()
    if verdict is not None:
        assert verdict == truth, (t.shape, t.stride())
    else:
        assert not t.is_contiguous()


def test_overlap_of_separate_tensors_and_of_fake_tensors() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert aliasing.overlap(torch.randn(4, 8), torch.randn(4, 8)) is False
    with FakeTensorMode():
        base = torch.empty(8, 16)
        a, b, c = base[:4], base[4:], base[2:6]
        assert aliasing.overlap(a, b) is False
        assert aliasing.overlap(a, c) is True
        assert aliasing.overlap(a, torch.empty(4, 16)) is False
        assert aliasing.internal_overlap(torch.empty(1, 16).expand(4, 16)) is True


def test_internal_overlap_of_symbolic_rows_is_decided_without_guards() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    shape_env = ShapeEnv()
    with FakeTensorMode(shape_env=shape_env):
        tokens = shape_env.create_unbacked_symint()
        torch._check(tokens >= 2)
        rows = torch.empty(tokens, 16)
        wide = torch.empty(tokens, 3, 16)
        assert aliasing.internal_overlap(rows) is False
        assert aliasing.internal_overlap(wide) is False
        assert aliasing.internal_overlap(rows[:, :8]) is False
        assert aliasing.internal_overlap(torch.empty(1, 16).expand(tokens, 16)) is True
    assert not shape_env.guards
