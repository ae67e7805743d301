"""The provider's kernels as torch ops (``torch.ops.ir_triton.*``), so graphs can hold them.

Eager calls launch the kernels directly (no dispatcher round trip). Under a torch dispatch
mode (fake tensors, make_fx, as when ir-passes lowers an IR op to this provider) they go
through the torch op, which records one opaque node; its fake implementation is the IR op's
native function (the IR op's own fake for an op that stores into a cache; nothing for the
in-place variants, which mutate their activations and return nothing).
"""

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.library import Library, infer_schema

from ir_spec import IrOp

from .device import several_gpus

NAMESPACE = "ir_triton"
_LIB = Library(NAMESPACE, "FRAGMENT")
_depth = torch._C._len_torch_dispatch_stack


def traceable(
    op: IrOp, *, inplace: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: define ``torch.ops.ir_triton.<op>[_inplace]`` running the decorated kernel
    function, and return a function that calls it directly in eager mode and through the torch
    op under a dispatch mode."""

    def decorator(kernel: Callable[..., Any]) -> Callable[..., Any]:
        name = op.name + ("_inplace" if inplace else "")
        # the arguments every call writes (a cache), and in place the activations
        mutates = (op.activations if inplace else ()) + op.mutates
        schema = infer_schema(kernel, mutates_args=mutates)
        if inplace:  # the op mutates its activations and returns nothing
            schema = schema.split(" -> ")[0] + " -> ()"
        _LIB.define(name + schema)
        activation_indices = op.activation_indices
        first_activation = activation_indices[0]

        def launch(*args: Any) -> Any:
            # the eager call and the torch op both launch here, on the rows' GPU
            if several_gpus():
                return _on_device_of(args[first_activation], kernel, args)
            return kernel(*args)

        def run_kernel(*args: Any) -> Any:
            result = launch(*args)
            return None if inplace else result

        def fake(*args: Any) -> Any:
            if inplace:
                return None
            if op.mutates:
                # the IR op's own fake: the native function's store into a cache selects the
                # stored rows by their slots' values, which fake tensors do not have
                return op.torch_op.default(*args)
            return op.native(*args)

        _LIB.impl(name, run_kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIB)
        overload = getattr(getattr(torch.ops, NAMESPACE), name).default

        @functools.wraps(kernel)
        def call(*args: Any) -> Any:
            if not _depth():
                return launch(*args)
            result = overload(*args)
            if inplace:
                outs = tuple(args[i] for i in activation_indices)
                return outs if len(outs) > 1 else outs[0]
            return result

        call.torch_op = overload  # type: ignore[attr-defined]
        return call

    return decorator


def _on_device_of(t: torch.Tensor, kernel: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """`kernel(*args)` with `t`'s GPU current: Triton launches on the current device, which a
    model spread over GPUs (a ``device_map``) leaves on the first while a layer's rows live on
    another."""
    index = t.get_device()
    if index < 0 or index == torch.cuda.current_device():
        return kernel(*args)
    with torch.cuda.device(index):
        return kernel(*args)
