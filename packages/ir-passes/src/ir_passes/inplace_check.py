"""The check of a compiled ``maybe_inplace`` call's arguments, decided at compile time where
the fake tensors are final, at run time where they are not.

Eager ``maybe_inplace`` refuses, with `ValueError`, to run an in-place implementation on an
activation that shares memory with another tensor argument (`ir_spec.aliasing`). Compiled code
must refuse the same calls. For memory the graph allocates, the fake tensors say it for good
where their layouts are static: where its buffers lie is fixed by the graph. For the graph's
inputs they do not: Dynamo guards shapes and strides, not where views lie, so tensors it saw
apart may later arrive as overlapping views of one buffer, and run the same compiled code. Nor
do they with a symbolic token count: one tensor twice, or overlapping views of one buffer,
share memory unless they are empty, which only the call's tensors tell.

So `InplaceFunctionalizationPass` decides each pair of `ir_spec.aliasing.tensor_pairs` on the
fake tensors, unless both lie in memory given to the graph (two inputs, or one input's storage
that another input shares) or the fake tensors cannot tell, and puts a call of
``torch.ops.ir_passes.check_inplace_args`` before the ``maybe_inplace`` call where a pair is
left to run time or refused. At run time it
compares the pairs left to it, in eager's order, then raises the refusal decided at compile
time, if any: the same `ValueError`, for the same pair, as eager. It reads only metadata, so a
CUDA graph that captured it replays without it. After AOTAutograd, `keep_checks` makes each
check a new node that writes an empty token: Inductor then hands it the tensors as they are
(it constrains the layouts of nodes AOTAutograd traced, and had copied an intermediate passed
twice), and keeps it because its schema writes, whatever its rule for registered side effects.
"""

import contextlib
import logging
from collections import Counter
from typing import Any

import torch
from torch import Tensor, fx
from torch._guards import detect_fake_mode

import ir_spec
from ir_spec import IrOp, aliasing

logger = logging.getLogger("ir_passes")


@torch.library.custom_op("ir_passes::check_inplace_args", mutates_args=())
def check_inplace_args(
    op: str, provider: str, tensors: list[Tensor | None], pairs: list[int], refusal: str
) -> None:
    """Raise eager ``maybe_inplace``'s `ValueError` where a pair of tensor arguments of a call
    of ir op `op` (`tensors`: its tensor parameters in order) share memory that `provider`'s
    in-place implementation would write: first comparing `pairs` (flattened argument
    positions), then raising `refusal`, if given."""
    ir_op = getattr(ir_spec.ops, op)
    args: list[Any] = [None] * len(ir_op.parameter_names)
    for i, t in zip(ir_op.tensor_indices, tensors, strict=True):
        args[i] = t
    pairs_at = list(zip(pairs[::2], pairs[1::2], strict=True))
    aliasing.check_inplace_args(ir_op, tuple(args), provider, pairs_at)
    if refusal:
        raise ValueError(refusal)


@check_inplace_args.register_fake
def _check_inplace_args_fake(
    op: str, provider: str, tensors: list[Tensor | None], pairs: list[int], refusal: str
) -> None:
    return None


#: The check returns nothing: without this, dead-code elimination would remove it.
CHECK = torch.ops.ir_passes.check_inplace_args.default
torch.fx.node.has_side_effect(CHECK)


@torch.library.custom_op("ir_passes::check_inplace_args_ordered", mutates_args=("token",))
def check_inplace_args_ordered(
    token: Tensor,
    op: str,
    provider: str,
    tensors: list[Tensor | None],
    pairs: list[int],
    refusal: str,
) -> None:
    """`check_inplace_args`, writing (nothing into) an empty `token`: Inductor keeps an op whose
    schema writes in the compiled code (torch 2.11 and later also keep a registered side effect;
    earlier versions did so only where the schema writes)."""
    check_inplace_args(op, provider, tensors, pairs, refusal)


@check_inplace_args_ordered.register_fake
def _check_inplace_args_ordered_fake(
    token: Tensor,
    op: str,
    provider: str,
    tensors: list[Tensor | None],
    pairs: list[int],
    refusal: str,
) -> None:
    return None


CHECK_ORDERED = torch.ops.ir_passes.check_inplace_args_ordered.default


def keep_checks(graph: fx.Graph) -> None:
    """Turn each check (post-grad) into `CHECK_ORDERED` writing a new empty token. Reading the
    call's tensors orders it before the in-place implementation writes them."""
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not CHECK:
            continue
        fakes = [fake_value(t) for t in node.args[2] if t is not None]
        device = next((f.device for f in fakes if isinstance(f, Tensor)), torch.device("cpu"))
        fake_mode = detect_fake_mode(fakes)
        with graph.inserting_before(node):
            token = graph.call_function(
                torch.ops.aten.empty.memory_format, ([0],), {"dtype": torch.uint8, "device": device}
            )
            # a new node: Inductor constrains the layouts of a node AOTAutograd traced (it may
            # copy its inputs to match), not of one a pass inserts
            ordered = graph.call_function(CHECK_ORDERED, (token, *node.args))
        with fake_mode or contextlib.nullcontext():
            token.meta["val"] = torch.empty(0, dtype=torch.uint8, device=device)
        ordered.meta["val"] = None
        ordered.meta["stack_trace"] = node.meta.get("stack_trace")
        graph.erase_node(node)


def fake_value(node: Any) -> Any:
    """The fake tensor (or value) a graph node stands for: ``val`` after AOTAutograd and in
    make_fx graphs, ``example_value`` in Dynamo's; a non-node argument is itself."""
    if not isinstance(node, fx.Node):
        return node
    return node.meta.get("val", node.meta.get("example_value"))


def _storage(t: Tensor) -> int:
    return int(t.untyped_storage()._cdata)


def input_storages(graph: fx.Graph) -> Counter[int]:
    """How many of the graph's inputs (placeholders and attributes) lie in each fake storage."""
    storages: Counter[int] = Counter()
    for node in graph.nodes:
        value = fake_value(node) if node.op in ("placeholder", "get_attr") else None
        if isinstance(value, Tensor):
            storages[_storage(value)] += 1
    return storages


def plan_check(
    op: IrOp, values: tuple[Any, ...], provider: str, inputs: Counter[int]
) -> tuple[list[int], str] | None:
    """For a call of `op` with fake `values` (normalized arguments) that `provider`'s in-place
    implementation will run: the pairs to compare at run time (flattened) and the refusal
    decided now (or ""), in eager's order; None where every pair is proven apart for good.

    A pair in memory the graph allocates, or in one input's own storage, is decided on its fake
    tensors where they can tell. Where they cannot (a symbolic token count: one tensor twice,
    or two views of one buffer, share memory unless they are empty), the real tensors decide
    when the call runs, as eager's check does: the clones that lowering gives an in-place
    implementation would compute the right values, but eager refuses the call.
    """
    later: list[int] = []
    for i, j in aliasing.tensor_pairs(op, values):
        a, b = values[i], values[j]
        if not isinstance(a, Tensor) or not isinstance(b, Tensor):
            later += [i, j]  # no fake tensor to decide on
            continue
        sa, sb = _storage(a), _storage(b)
        if sa in inputs and sb in inputs and (sa != sb or inputs[sa] > 1):
            later += [i, j]
            continue
        verdict = aliasing.overlap(a, b)
        if verdict is True:
            return later, str(aliasing.overlap_error(op, values, provider, (i, j), True))
        if verdict is None:
            later += [i, j]
    return (later, "") if later else None
