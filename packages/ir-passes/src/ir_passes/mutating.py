"""IR ops that store into their arguments (`IrOp.mutates`, a KV cache) in post-grad graphs.

After AOTAutograd such a call is an ``auto_functionalized`` (or ``auto_functionalized_v2``,
Inductor's default since torch 2.6) higher-order-op node: it takes the op overload and its
arguments by name (v2: the mutated ones as bases plus view information) and returns the op's
results followed by the new values of the mutated arguments (v2: of their bases); the graph's
epilogue copies those into the caller's tensors. Inductor's reinplacing, after the custom
passes, turns the node back into an in-place call of the op where nothing else reads the old
values, and clones the argument otherwise.

Lowering keeps that structure: the node's op becomes ``ir_lowered::<op>__<provider>``, a torch op
with the IR op's schema (same mutated arguments) that runs that provider's implementation. So
the implementation ir-dispatch selects stores into the real buffers, and Inductor's own
reinplacing and decomposition do the rest without a copy of the cache. These ops are defined
for every registered implementation whenever the selection key is computed, before Inductor or
ir-piecewise loads compiled code that calls them from a cache.
"""

import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import fx
from torch._guards import detect_fake_mode
from torch._higher_order_ops.auto_functionalize import (
    get_mutable_args,
    read_view_information_from_args,
)
from torch.library import infer_schema

import ir_dispatch
import ir_spec
from ir_spec import Impl, IrOp

from .graph_utils import bound_args, fake_of, ir_op_of
from .report import PassReport

logger = logging.getLogger("ir_passes")

#: the torch library namespace of the lowered mutating ops
LOWERED_NAMESPACE = "ir_lowered"
_LIB = torch.library.Library(LOWERED_NAMESPACE, "FRAGMENT")
_DEFINED: set[str] = set()

AUTO_FUNCTIONALIZED = torch.ops.higher_order.auto_functionalized
AUTO_FUNCTIONALIZED_V2: Any = getattr(torch.ops.higher_order, "auto_functionalized_v2", None)


def lowered_name(op: IrOp, provider: str) -> str:
    """The name of the op running `provider`'s implementation of mutating op `op`."""
    return f"{op.name}__{provider}"


def lowered_op(op: IrOp, provider: str) -> torch._ops.OpOverload:
    """``torch.ops.ir_lowered.<op>__<provider>.default``: `op`'s schema (its `IrOp.mutates`
    arguments written in place), running `provider`'s implementation as registered when it
    is called (an in-place one on clones of the activations, as the default overload does);
    defined on first request."""
    name = lowered_name(op, provider)
    if name not in _DEFINED:
        _LIB.define(f"{name}{infer_schema(op.native, mutates_args=op.mutates)}")

        def kernel(*args: Any) -> Any:
            impl = op.impls.get(provider)
            if impl is None:
                raise RuntimeError(
                    f"ir_passes: compiled code calls provider {provider!r} of ir.{op.name}, "
                    f"which is no longer registered (registered: {', '.join(op.impls)})"
                )
            if impl.inplace:
                cloned = list(args)
                for i in op.activation_indices:
                    cloned[i] = args[i].clone()
                return impl.fn(*cloned)
            return impl.fn(*args)

        def fake(*args: Any) -> Any:
            return op.torch_op.default(*args)  # the IR op's own fake kernel, under fake mode

        _LIB.impl(name, kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{LOWERED_NAMESPACE}::{name}", fake, lib=_LIB)
        _DEFINED.add(name)
        logger.debug("ir_passes: defined %s::%s", LOWERED_NAMESPACE, name)
    overload: torch._ops.OpOverload = getattr(torch.ops.ir_lowered, name).default
    return overload


def define_lowered_ops(ops: Iterable[IrOp] | None = None) -> None:
    """Define the lowered op of every registered implementation of every mutating op, so that
    compiled code loaded from a cache finds the ops it calls."""
    for op in ir_spec.ops if ops is None else ops:
        if op.mutates:
            for provider in op.impls:
                lowered_op(op, provider)


def functionalized_ir_op(node: fx.Node) -> tuple[IrOp, torch._ops.OpOverload] | None:
    """``(op, overload)`` when `node` is ``auto_functionalized(_v2)`` of a mutating IR op's
    default overload."""
    if node.op != "call_function" or node.target not in (
        AUTO_FUNCTIONALIZED,
        AUTO_FUNCTIONALIZED_V2,
    ):
        return None
    overload = node.args[0] if node.args else None
    found = ir_op_of(overload)
    if found is None or found[1] != "default" or not found[0].mutates:
        return None
    assert isinstance(overload, torch._ops.OpOverload)
    return found[0], overload


def direct_mutating_ir_op(node: fx.Node) -> IrOp | None:
    """The op when `node` calls a mutating IR op's default overload directly (a graph that is
    not functional, as ``make_fx`` traces one)."""
    found = ir_op_of(node.target) if node.op == "call_function" else None
    if found is None or found[1] != "default" or not found[0].mutates:
        return None
    return found[0]


def fake_arguments(node: fx.Node) -> tuple[IrOp, list[Any]] | None:
    """The mutating IR op `node` calls (directly or auto-functionalized) and its arguments in
    declaration order, fake values for nodes; a v2 node's mutated arguments are rebuilt from
    their bases and view information."""
    direct = direct_mutating_ir_op(node)
    if direct is not None:
        return direct, [fake_of(a) for a in bound_args(direct, node)]
    found = functionalized_ir_op(node)
    if found is None:
        return None
    op, overload = found
    by_name = {k: fake_of(v) for k, v in node.kwargs.items()}
    if node.target is AUTO_FUNCTIONALIZED_V2:
        names, types = get_mutable_args(overload)
        bases = [fake_of(b) for b in by_name.pop("_all_bases")]
        by_name.pop("_only_clone_these_bases", None)
        views = read_view_information_from_args(names, types, by_name, bases)
        fake_mode = detect_fake_mode(bases)
        with fake_mode or contextlib.nullcontext():
            for name in names:
                info = views[name]
                by_name[name] = None if info is None else info.regenerate_view(bases)
    return op, [by_name[name] for name in op.signature.parameters]


def output_count(overload: torch._ops.OpOverload) -> int:
    """How many leading results of an ``auto_functionalized(_v2)`` node are the op's own (a
    result-less op still takes one, None), before the mutated arguments' new values."""
    return max(1, len(overload._schema.returns))


def lower_mutating(
    node: fx.Node,
    report: PassReport,
    choose: Callable[[fx.Node, IrOp, list[Any]], Impl] | None = None,
) -> bool:
    """If `node` calls a mutating IR op (directly or auto-functionalized), make it call the
    lowered op of the implementation ir-dispatch selects on its fake arguments (inductor
    mode; `choose`, given the node, op and fake arguments, where given), record the choice,
    and return True."""
    found = fake_arguments(node)
    if found is None:
        return False
    op, fakes = found
    if choose is not None:
        impl = choose(node, op, fakes)
    else:
        with ir_dispatch.mode(ir_dispatch.INDUCTOR):
            impl = ir_dispatch.select(op, *fakes)
    target = lowered_op(op, impl.provider)
    if node.target in (AUTO_FUNCTIONALIZED, AUTO_FUNCTIONALIZED_V2):
        node.args = (target, *node.args[1:])
    else:
        node.target = target
    report.selected_impls.setdefault(op.name, {})[node.name] = impl.provider
    logger.debug("ir_passes: lowered %s (%s) to %s", node.name, op.name, impl.provider)
    return True
