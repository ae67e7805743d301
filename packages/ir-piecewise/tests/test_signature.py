"""`ir_piecewise.signature`: layouts compared as at two tokens, on tensors of every memory order
(a permutation of their dimensions, stored contiguously in that order)."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ir_piecewise.signature import static_signature, strides_at_two


@st.composite
def laid_out(draw: st.DrawFn) -> tuple[list[int], list[int], int]:
    """Sizes, a memory order (outermost first) and the dynamic dim of a tensor of 1-4 dims."""
    ndim = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim))
    order = draw(st.permutations(range(ndim)))
    dim = draw(st.integers(0, ndim - 1))
    return sizes, list(order), dim


def make(sizes: list[int], order: list[int], dim: int, tokens: int) -> torch.Tensor:
    """A tensor of `sizes` (`tokens` along `dim`) stored in `order`, as a model makes it."""
    shape = list(sizes)
    shape[dim] = tokens
    stored = torch.empty([shape[d] for d in order])
    return stored.permute(*sorted(range(len(order)), key=order.__getitem__))


@settings(max_examples=300, deadline=None)
@given(laid_out(), st.integers(2, 9))
def test_two_or_more_tokens_give_the_layout_at_two(
    layout: tuple[list[int], list[int], int], tokens: int
) -> None:
    sizes, order, dim = layout
    at_two = make(sizes, order, dim, 2)
    x = make(sizes, order, dim, tokens)
    assert strides_at_two(tuple(x.shape), x.stride(), dim) == (
        list(at_two.shape),
        list(at_two.stride()),
    )
    assert static_signature({"x": x}, [("x", dim)]) == static_signature({"x": at_two}, [("x", dim)])


@settings(max_examples=300, deadline=None)
@given(laid_out(), st.integers(0, 1))
def test_fewer_tokens_outermost_give_the_layout_at_two(
    layout: tuple[list[int], list[int], int], tokens: int
) -> None:
    """With the tokens the outermost dimension (as in a model's activations), the strides of
    an empty or one-token tensor tell its layout."""
    sizes, order, _ = layout
    dim = order[0]
    at_two = make(sizes, order, dim, 2)
    x = make(sizes, order, dim, tokens)
    assert static_signature({"x": x}, [("x", dim)]) == static_signature({"x": at_two}, [("x", dim)])
