"""What a trace is specialized to, and the example inputs a trace is made from.

A trace with a dynamic token dimension runs every later call whose `static_signature` is its
own: the same structure, dtypes, devices and plain values, the same sizes but in the dynamic
dims, and the same layout. The layout is compared as it would be at two tokens
(`strides_at_two`): the strides of a dimension of one element, and those outside an empty one,
describe no layout (torch computes them as if the dimension had one element: a [2, 0, h]
tensor has strides [h, h, 1], a column-major [1, h] one [1, 1]). An ahead-of-time trace (and
a first call of no tokens is traced that way) is made on an example grown to two tokens in that
layout (`laid_out_for_two`). (A call of one token is traced as it is: Dynamo reads the strides
of a dimension of one element as products of the sizes, as at any other count.)
"""

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torch.utils import _pytree as pytree

_PLAIN = (int, float, bool, str, type(None), enum.Enum, torch.dtype, torch.device)


def is_plain(value: Any) -> bool:
    """Whether `value` is a plain value a trace specializes to by value: numbers, strings,
    enums, dtypes, devices, dataclass instances, and tuples and lists of them."""
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, tuple | list):
        return all(is_plain(v) for v in value)
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def strides_at_two(
    shape: tuple[int, ...], strides: tuple[int, ...], dim: int
) -> tuple[list[int], list[int]]:
    """The sizes and strides of a tensor of `shape` and `strides` grown (or shrunk) to 2 along
    `dim`, in its memory order: the dimensions inside `dim` keep their strides (rows padded as
    they are), `dim` keeps its own, and the dimensions outside it are laid out around it. Of
    equal strides, a dimension of one element (an empty one counts as one) lies inside a longer
    one, and `dim` inside another of one element."""
    sizes, out = list(shape), list(strides)
    order = sorted(range(len(sizes)), key=lambda d: (out[d], sizes[d] > 1, d != dim))
    sizes[dim] = 2
    at = order.index(dim)
    for inner, outer in zip(order[at:], order[at + 1 :], strict=False):
        out[outer] = out[inner] * sizes[inner]
    return sizes, out


def laid_out_for_two(value: Tensor, dim: int) -> Tensor:
    """A new (uninitialized) tensor like `value` but of 2 along `dim`, laid out as
    `strides_at_two` says."""
    sizes, strides = strides_at_two(tuple(value.shape), value.stride(), dim)
    return value.new_empty_strided(sizes, strides)


def _layout(value: Tensor, dims: tuple[int, ...]) -> tuple[int | None, ...]:
    """The strides at two tokens along each of `dims`; None for another dimension of one
    element, whose stride describes nothing."""
    shape, strides = tuple(value.shape), value.stride()
    for dim in dims:
        sizes, grown = strides_at_two(shape, strides, dim)
        shape, strides = tuple(sizes), tuple(grown)
    return tuple(
        None if n == 1 and d not in dims else s
        for d, (n, s) in enumerate(zip(shape, strides, strict=True))
    )


def _tensor_part(leaf: Tensor, dims: tuple[int, ...]) -> tuple[Any, ...]:
    if not dims:
        return (leaf.shape, leaf.stride(), leaf.dtype, leaf.device, leaf.requires_grad)
    sizes = tuple(-1 if d in dims else s for d, s in enumerate(leaf.shape))
    return (sizes, _layout(leaf, dims), leaf.dtype, leaf.device, leaf.requires_grad)


def static_signature(
    arguments: Mapping[str, Any], dynamic: list[tuple[str, int]]
) -> tuple[Any, ...]:
    """What a trace of a call with `arguments` is specialized to: the structure of each
    argument; each tensor's sizes (the `dynamic` dims left out), layout at two tokens, dtype,
    device and whether it requires grad; every other leaf's value (plain values) or type."""
    parts: list[Any] = []
    for name, value in arguments.items():
        dims = tuple(d for n, d in dynamic if n == name)
        # computed on every call: tensors and lists of tensors (KV caches) skip pytree
        if isinstance(value, Tensor):
            parts.append(_tensor_part(value, dims))
            continue
        if type(value) in (list, tuple) and all(isinstance(v, Tensor) for v in value):
            parts.append((type(value), tuple(_tensor_part(v, dims) for v in value)))
            continue
        leaves, spec = pytree.tree_flatten(value)
        parts.append(spec)
        for leaf in leaves:
            if isinstance(leaf, Tensor):
                parts.append(_tensor_part(leaf, dims))
            elif is_plain(leaf):
                parts.append((type(leaf), repr(leaf)))
            else:
                parts.append(type(leaf))
    return tuple(parts)
