"""Split an FX graph at splitting ops into pieces that are compiled and pieces run eagerly."""

import operator
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.fx.passes.split_module import split_module

from .config import op_name


@dataclass(frozen=True)
class Piece:
    """One submodule of the split graph.

    Attributes:
        name: attribute name of the submodule in the split graph (``submod_<i>``).
        index: position in execution order.
        module: the piece's graph.
        is_splitting: True for a piece of splitting ops (runs eagerly, never compiled).
        capturable: False when a splitting op in it is tagged ``cudagraph_unsafe``.
    """

    name: str
    index: int
    module: fx.GraphModule
    is_splitting: bool
    capturable: bool


def node_op_name(node: fx.Node) -> str | None:
    """The qualified op name a ``call_function`` node calls, or None for non-ops."""
    if node.op != "call_function":
        return None
    target = node.target
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return op_name(target)
    return None


def _is_cudagraph_unsafe(node: fx.Node) -> bool:
    target: Any = node.target
    if isinstance(target, torch._ops.OpOverloadPacket):
        target = getattr(target, "default", None)
    tags = getattr(target, "tags", ())
    return hasattr(torch.Tag, "cudagraph_unsafe") and torch.Tag.cudagraph_unsafe in tags


def split_graph(
    gm: fx.GraphModule, splitting_ops: Collection[str]
) -> tuple[fx.GraphModule, list[Piece]]:
    """Split `gm` at the ops named in `splitting_ops`, keeping node order.

    Consecutive splitting ops share one piece; a ``getitem`` of a node stays in its producer's
    piece; placeholders and the output belong to no piece.
    """
    piece_of: dict[fx.Node, int] = {}
    splitting_pieces: set[int] = set()
    used: set[int] = set()
    current = 0
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if node.op == "call_function" and node.target is operator.getitem:
            producer = node.args[0]
            if isinstance(producer, fx.Node) and producer in piece_of:
                piece_of[node] = piece_of[producer]
                continue
        is_splitting = node_op_name(node) in splitting_ops
        if is_splitting != (current in splitting_pieces) and current in used:
            current += 1
        if is_splitting:
            splitting_pieces.add(current)
        piece_of[node] = current
        used.add(current)

    root: Any = None  # only used to copy attributes, which Dynamo graphs do not reference
    split = split_module(gm, root, lambda node: piece_of[node], keep_original_order=True)
    pieces: list[Piece] = []
    order = [n.target for n in split.graph.nodes if n.op == "call_module"]
    for index, name in enumerate(order):
        assert isinstance(name, str)
        module = getattr(split, name)
        number = int(name.removeprefix("submod_"))
        is_splitting = number in splitting_pieces
        capturable = not (
            is_splitting
            and any(_is_cudagraph_unsafe(n) for n in module.graph.nodes if n.op == "call_function")
        )
        pieces.append(Piece(name, index, module, is_splitting, capturable))
    return split, pieces
