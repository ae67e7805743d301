"""FX helpers shared by the passes: finding IR ops, source lines, aliasing, inlining."""

import contextlib
import logging
import operator
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import fx
from torch._dispatch.python import enable_python_dispatcher
from torch._guards import detect_fake_mode
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

import ir_spec
from ir_spec import IrOp

logger = logging.getLogger("ir_passes")


def ir_op_of(target: Any) -> tuple[IrOp, str] | None:
    """(op, overload name) when `target` is ``torch.ops.ir.<op>.<overload>``, else None."""
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != ir_spec.NAMESPACE:
        return None
    name = target._schema.name.split("::", 1)[1]
    if name not in ir_spec.ops:
        return None
    return getattr(ir_spec.ops, name), target._overloadname


def bound_args(op: IrOp, node: fx.Node) -> list[Any]:
    """The node's arguments in declaration order, defaults filled in."""
    return list(op.normalize(tuple(node.args), dict(node.kwargs)))


#: Where ir-spec's own frames come from: its generated call paths (``<ir_spec fast path for
#: rms_norm>``) and its package. A stack trace that ends in one of them ends inside an op call.
_IR_SPEC_FILES = ("<ir_spec ", str(Path(ir_spec.__file__).parent))


def source_line(node: fx.Node) -> str:
    """Where the user's code made `node`: the last frame of its stack trace outside ir-spec
    (an IR op's own call path is no place to fix a program), as ``File "...", line N, in f |
    <the line>``; its name where it has no stack trace."""
    frames: list[list[str]] = []
    for raw in (node.meta.get("stack_trace") or "").splitlines():
        line = raw.strip()
        if line.startswith('File "'):
            frames.append([line])
        elif frames and line.strip("^~ "):  # a source line, not the markers under one
            frames[-1].append(line)
    if not frames:
        return f"node {node.name}"
    user = [f for f in frames if not f[0].split('"')[1].startswith(_IR_SPEC_FILES)] or frames
    header, *code = user[-1]
    return f"{header} | {code[0]}" if code else header


def _aliases_input(node: fx.Node) -> fx.Node | None:
    """The input node that `node`'s result aliases (a view or an in-place result), if any."""
    if node.op != "call_function":
        return None
    if node.target is operator.getitem:
        source = node.args[0]
        return source if isinstance(source, fx.Node) and _aliases_input(source) else None
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.returns or schema.returns[0].alias_info is None:
        return None
    first = node.args[0] if node.args else None
    return first if isinstance(first, fx.Node) else None


def alias_root(node: fx.Node) -> fx.Node:
    """The node whose storage `node` shares, following views and in-place results."""
    while (parent := _aliases_input(node)) is not None:
        node = parent
    return node


def alias_groups(graph: fx.Graph) -> dict[fx.Node, fx.Node]:
    """Map every node to its alias root."""
    return {node: alias_root(node) for node in graph.nodes}


def mutates_aten(graph: fx.Graph) -> bool:
    """Whether a node of `graph` is an ATen (or prims) op that writes one of its arguments."""
    return any(
        node.op == "call_function"
        and isinstance(node.target, torch._ops.OpOverload)
        and node.target.namespace in ("aten", "prims")
        and node.target._schema.is_mutable
        for node in graph.nodes
    )


def inline(
    graph: fx.Graph, node: fx.Node, fn: Callable[..., Any], args: list[Any]
) -> list[fx.Node]:
    """Trace ``fn(*args)`` (graph nodes among `args` stand for their fake values) and splice the
    traced nodes in before `node`; returns the nodes of the outputs, in order.

    Where the trace writes with ATen ops (an in-place implementation in plain PyTorch: ``add_``,
    ``copy_`` into its arguments), it is traced again functionalized: Inductor expects a
    functional graph after AOTAutograd and miscompiles such writes (``KeyError: 'buf1'`` in its
    CPU code generation). Opaque ops that declare what they write (kernels registered as torch
    ops) stay as they are: Inductor runs them in place.
    """
    positions = [i for i, a in enumerate(args) if isinstance(a, fx.Node)]
    fakes = [args[i].meta["val"] for i in positions]

    def flat(*tensors: Any) -> Any:
        full = list(args)
        for i, t in zip(positions, tensors, strict=True):
            full[i] = t
        result = fn(*full)
        return tuple(result) if isinstance(result, (tuple, list)) else (result,)

    # Decomposed like the rest of a post-grad graph (Inductor refuses undecomposed ops there),
    # under the graph's fake mode: an implementation that allocates its output and passes it to
    # an out-variant kernel (the cuda provider's) gets a fake tensor to pass, not a real one
    # beside fake inputs (which the fake mode refuses).
    fake_mode = detect_fake_mode(fakes)

    def trace(target: Callable[..., Any]) -> fx.GraphModule:
        with enable_python_dispatcher(), fake_mode or contextlib.nullcontext():
            return make_fx(target, decomposition_table=select_decomp_table(), tracing_mode="real")(
                *fakes
            )

    traced = trace(flat)
    if mutates_aten(traced.graph):
        logger.debug("ir_passes: %r writes with ATen ops; traced functionalized", fn)
        traced = trace(torch.func.functionalize(flat))
    env: dict[fx.Node, Any] = {}
    placeholders = iter(args[i] for i in positions)
    outputs: list[fx.Node] = []
    with graph.inserting_before(node):
        for sub in traced.graph.nodes:
            if sub.op == "placeholder":
                env[sub] = next(placeholders)
            elif sub.op == "output":
                outputs = [env[o] for o in sub.args[0]]
            elif sub.op == "get_attr":
                raise NotImplementedError(f"{fn!r} traces to a constant ({sub.target})")
            else:
                env[sub] = graph.node_copy(sub, lambda n: env[n])
    return outputs


def replace_results(node: fx.Node, outputs: list[fx.Node], multiple: bool) -> None:
    """Point every use of `node`'s results at `outputs` and erase it."""
    if multiple:
        for user in list(node.users):
            index = user.args[1]
            if user.target is operator.getitem and isinstance(index, int):
                user.replace_all_uses_with(outputs[index])
                user.graph.erase_node(user)
            else:
                raise NotImplementedError(f"result of {node.name} used whole by {user.name}")
    else:
        node.replace_all_uses_with(outputs[0])
    node.graph.erase_node(node)


def dump(debug_dir: str | None, name: str, graph: fx.Graph) -> None:
    """Write the graph's text to ``debug_dir/name.txt`` (when a debug directory is set)."""
    if debug_dir is None:
        return
    path = Path(debug_dir)
    path.mkdir(parents=True, exist_ok=True)
    index = len(list(path.glob("*.txt")))
    (path / f"{index:03d}-{name}.txt").write_text(str(graph))
    logger.debug("ir_passes: wrote %s", path / f"{index:03d}-{name}.txt")


def nodes_after(graph: fx.Graph, node: fx.Node) -> Iterable[fx.Node]:
    """Nodes strictly after `node` in graph order."""
    seen = False
    for n in graph.nodes:
        if seen:
            yield n
        elif n is node:
            seen = True


def fake_of(value: Any) -> Any:
    """A node's fake value (``meta["val"]``), or `value` itself when it is not a node."""
    return value.meta["val"] if isinstance(value, fx.Node) else value


def static_tokens(value: Any) -> int | None:
    """The token count of an activation (every dimension but the last), when static."""
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return None
    tokens = 1
    for size in value.shape[:-1]:
        if not isinstance(size, int):
            return None
        tokens *= size
    return tokens
