"""Gradients of the ops, taken from their native functions.

A provider's kernel computes an op's forward only: its outputs carry no autograd history. So
that a model written with IR ops still trains (or is fine-tuned), the functional overload
``torch.ops.ir.<name>.default`` has an autograd formula: the forward runs the chosen
implementation, and the backward runs the op's native function again on the saved inputs and
differentiates it. The gradient is therefore the native semantics' gradient whatever kernel ran
the forward, at the cost of one more forward pass in the backward.

Outputs outside `DIFFERENTIABLE_DTYPES`, the quantizers' fp8 values, pass no gradient back
(torch's own cast to fp8 would pass one, in fp8); their float32 scales do.

Eagerly an op goes through the torch op (and so through this formula) only when grad mode is
on and one of its tensor arguments requires grad (`requires_grad`); inference calls keep the
direct path.

The in-place overload ``torch.ops.ir.<name>.maybe_inplace`` has no formula of its own (torch
derives none for mutated arguments). When a call to it needs a gradient, it computes out of
place through the functional overload instead, as the op's ``maybe_inplace`` method does, and
leaves its arguments unchanged; its results are the values to use either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.library import Library

if TYPE_CHECKING:
    from .op import IrOp

#: Output dtypes whose gradients flow back through the native function.
DIFFERENTIABLE_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def requires_grad(*values: Any) -> bool:
    """Whether grad mode is on and any tensor among `values` requires grad."""
    return torch.is_grad_enabled() and any(
        isinstance(v, torch.Tensor) and v.requires_grad for v in values
    )


def register(op: IrOp, lib: Library, qualname: str) -> None:
    """Give the functional torch op `qualname` of `op` the native function's gradient."""
    native = op.native

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        positions = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor)]
        ctx.tensor_positions = positions
        ctx.others = [None if isinstance(a, torch.Tensor) else a for a in inputs]
        ctx.save_for_backward(*(inputs[i] for i in positions))

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        return _native_vjp(native, ctx, grads)

    torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=lib)


def register_maybe_inplace(lib: Library, name: str, functional: Any, inplace: Any) -> None:
    """Route the in-place overload `name` of `lib` to `functional` when a gradient is needed.

    Without this kernel torch's fallback would run the in-place kernel and backpropagate
    through its arguments as if they were its outputs, unchanged: wrong gradients, with only
    a deprecation warning. Otherwise the in-place kernel runs, and the arguments it may write
    have their version counters bumped, so that a gradient saved from them earlier fails loudly.
    """
    written = [
        (i, arg.name)
        for i, arg in enumerate(inplace._schema.arguments)
        if arg.alias_info is not None and arg.alias_info.is_write
    ]

    def kernel(keyset: Any, *args: Any, **kwargs: Any) -> Any:
        if requires_grad(*args, *kwargs.values()):
            return functional(*args, **kwargs)
        result = inplace.redispatch(keyset & torch._C._after_autograd_keyset, *args, **kwargs)
        for position, arg_name in written:
            value = args[position] if position < len(args) else kwargs.get(arg_name)
            if isinstance(value, torch.Tensor):
                torch.autograd.graph.increment_version(value)
        return result

    lib.impl(name, kernel, "Autograd", with_keyset=True)


def _native_vjp(native: Callable[..., Any], ctx: Any, grads: tuple[Any, ...]) -> tuple[Any, ...]:
    args = list(ctx.others)
    wanted: list[tuple[int, torch.Tensor]] = []
    for position, saved in zip(ctx.tensor_positions, ctx.saved_tensors, strict=True):
        leaf = saved.detach()
        if ctx.needs_input_grad[position] and leaf.dtype in DIFFERENTIABLE_DTYPES:
            leaf.requires_grad_(True)
            wanted.append((position, leaf))
        args[position] = leaf
    result: list[Any] = [None] * len(args)
    if not wanted:
        return tuple(result)
    with torch.enable_grad():
        outputs = native(*args)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    pairs = [
        (out, grad)
        for out, grad in zip(outputs, grads, strict=True)
        if grad is not None
        and isinstance(out, torch.Tensor)
        and out.requires_grad
        and out.dtype in DIFFERENTIABLE_DTYPES
    ]
    if not pairs:
        return tuple(result)
    found = torch.autograd.grad(
        [out for out, _ in pairs],
        [leaf for _, leaf in wanted],
        [grad for _, grad in pairs],
        allow_unused=True,
    )
    for (position, _), grad in zip(wanted, found, strict=True):
        result[position] = grad
    return tuple(result)
