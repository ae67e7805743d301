"""The tensor-parallel passes, on the post-grad graph, in this order:

- ``enable_sp`` (sequence parallelism, `SP_PATTERNS`): ``all_reduce`` whose only reader is a
  norm (``rms_norm``, ``fused_add_rms_norm`` or their static-fp8 composites) becomes
  ``reduce_scatter`` -> the same norm of this rank's block of rows (the replicated residual
  sliced to that block) -> ``all_gather`` of each result. The rows must divide among the
  group's ranks, so it runs on static token counts only: in a graph compiled for one size
  (``token_range`` ``(n, n)``) a count that does not divide raises `ValueError`; elsewhere a
  count that does not divide, or a symbolic one, is skipped with the reason.
- ``fuse_gemm_comms`` (`GEMM_COMMS_PATTERNS`): ``all_gather`` read only by matrix products
  (``aten.mm``) becomes ``torch.ops.symm_mem.fused_all_gather_matmul``, and a matrix product
  read only by ``reduce_scatter`` becomes ``torch.ops.symm_mem.fused_matmul_reduce_scatter``.
  Those run on CUDA tensors over an NCCL group only: elsewhere (the CPU, gloo) the pass skips
  with the reason.
- ``fuse_allreduce_rms`` (`ALLREDUCE_RMS_PATTERNS`): ``all_reduce`` whose only reader is
  ``rms_norm``, ``fused_add_rms_norm`` (the sum as either addend), a same-layout residual add
  normalized by ``rms_norm``, or one of the static-fp8 norm composites, becomes the matching
  ``all_reduce_*`` composite; a ``static_quant_fp8`` alone reading the norm's output joins it.

Each acts only on a group of more than one rank (a group of one has nothing to reduce; the
reason is recorded) and under its `PassConfig` switch and threshold. Skips worth knowing are
logged and listed in the report (`PassReport.skipped`).
"""

import logging
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import fx

from ir_spec import IrOp, ops, process_groups

from .graph_utils import bound_args, fake_of, ir_op_of, static_tokens

if TYPE_CHECKING:
    from .fusion import FusionPass

logger = logging.getLogger("ir_passes")
_aten = torch.ops.aten


@dataclass(frozen=True)
class _Norm:
    """A norm that may read an all-reduced sum: its composite with the all-reduce, and its
    composite with a static fp8 quantization after it (None: it quantizes already)."""

    residual: bool
    fused: str
    with_quant: str | None


_NORMS = {
    "rms_norm": _Norm(False, "all_reduce_rms_norm", "all_reduce_rms_norm_static_quant_fp8"),
    "fused_add_rms_norm": _Norm(
        True, "all_reduce_fused_add_rms_norm", "all_reduce_fused_add_rms_norm_static_quant_fp8"
    ),
    "rms_norm_static_quant_fp8": _Norm(False, "all_reduce_rms_norm_static_quant_fp8", None),
    "fused_add_rms_norm_static_quant_fp8": _Norm(
        True, "all_reduce_fused_add_rms_norm_static_quant_fp8", None
    ),
}


def _default_op(node: Any) -> IrOp | None:
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return None
    found = ir_op_of(node.target)
    return found[0] if found is not None and found[1] == "default" else None


def _fake_call(op: Any, *args: Any) -> Any:
    """`op` on the fake values of `args` (nodes or constants)."""
    return op(*[fake_of(a) for a in args])


def _group(fusion: "FusionPass", switch: str, node: fx.Node, group_name: Any) -> int | None:
    """The size of the group `node` reduces over, or None (reason recorded) for a group of
    one rank or a name that is not a constant."""
    if not isinstance(group_name, str):
        return None
    world = process_groups.group_size(group_name, switch)
    if world == 1:
        fusion.skipped(switch, node, f"group {group_name!r} has one rank: nothing to reduce")
        return None
    return world


@dataclass
class _Match:
    """An ``all_reduce`` and the norm reading its sum."""

    reduce: fx.Node
    x: Any  # the all-reduce's input
    group_name: str
    world: int
    norm: fx.Node  # the norm node, or the add for `add`
    norm_op: IrOp
    args: list[Any]  # the norm's arguments, the sum replaced by None
    add: fx.Node | None = None  # a residual add normalized by `norm`
    pattern: str = ""


def _match_norm(fusion: "FusionPass", switch: str, reduce: fx.Node) -> _Match | None:
    x, group_name = bound_args(ops.all_reduce, reduce)
    if len(reduce.users) != 1:
        if any(_default_op(u) in _NORM_OPS for u in reduce.users):
            fusion.skipped(
                switch,
                reduce,
                "the reduced sum is read beside the norm (as the first layer's residual is)",
            )
        return None
    (reader,) = reduce.users
    if reader.op == "call_function" and reader.target is _aten.add.Tensor:
        return _match_add(fusion, switch, reduce, reader, x, group_name)
    norm_op = _default_op(reader)
    if norm_op is None or norm_op.name not in _NORMS:
        return None
    args = bound_args(norm_op, reader)
    names = list(norm_op.signature.parameters)
    if "variance_size" in names and args[names.index("variance_size")] is not None:
        fusion.skipped(switch, reader, "the norm reads part of each row (variance_size)")
        return None
    args = [a for n, a in zip(names, args, strict=True) if n != "variance_size"]
    if _NORMS[norm_op.name].residual:
        if (args[0] is reduce) == (args[1] is reduce):
            return None
        if args[1] is reduce:  # addition commutes: the sum as x, the other addend as residual
            args[0], args[1] = args[1], args[0]
    elif args[0] is not reduce:
        return None
    args[0] = None
    world = _group(fusion, switch, reduce, group_name)
    if world is None:
        return None
    return _Match(reduce, x, group_name, world, reader, norm_op, args)


def _match_add(
    fusion: "FusionPass", switch: str, reduce: fx.Node, add: fx.Node, x: Any, group_name: Any
) -> _Match | None:
    """``rms_norm(all_reduce(x) + r)``: the add's result is the residual the composite
    returns."""
    from .fusion import _same_layout_addends

    addends = _same_layout_addends(add)
    norms = [u for u in add.users if _default_op(u) is ops.rms_norm]
    if addends is None or len(norms) != 1:
        return None
    (norm,) = norms
    _, weight, epsilon, variance_size = bound_args(ops.rms_norm, norm)
    if bound_args(ops.rms_norm, norm)[0] is not add or variance_size is not None:
        return None
    residual = addends[1] if addends[0] is reduce else addends[0]
    if residual is reduce:
        return None
    world = _group(fusion, switch, reduce, group_name)
    if world is None:
        return None
    args = [None, residual, weight, epsilon]
    return _Match(reduce, x, group_name, world, norm, ops.fused_add_rms_norm, args, add=add)


_NORM_OPS = frozenset(getattr(ops, name) for name in _NORMS)


def _single_quant(value: fx.Node) -> fx.Node | None:
    """The ``static_quant_fp8`` that alone reads `value`, if any."""
    if len(value.users) != 1:
        return None
    (quant,) = value.users
    return quant if _default_op(quant) is ops.static_quant_fp8 else None


def _index(take: fx.Node) -> int:
    """The index a ``getitem`` node takes."""
    index = take.args[1]
    assert take.target is operator.getitem
    assert isinstance(index, int)
    return index


def _position(graph: fx.Graph) -> dict[fx.Node, int]:
    return {node: i for i, node in enumerate(graph.nodes)}


# --------------------------------------------------------------------- all-reduce + norm
def fuse_allreduce_rms(fusion: "FusionPass", graph: fx.Graph) -> None:
    """Apply `ALLREDUCE_RMS_PATTERNS` wherever they match and pay off."""
    if not fusion.config.fusion_on("fuse_allreduce_rms"):
        return
    for node in list(graph.nodes):
        if _default_op(node) is ops.all_reduce:
            _try_allreduce_rms(fusion, graph, node)


def _try_allreduce_rms(fusion: "FusionPass", graph: fx.Graph, reduce: fx.Node) -> None:
    switch = "fuse_allreduce_rms"
    if not fusion.applies(switch, reduce.args[0]):
        return
    match = _match_norm(fusion, switch, reduce)
    if match is None:
        return
    info = _NORMS[match.norm_op.name]
    # the norm's output, read by one static quantization only: the quantization joins
    out_value: fx.Node | None = match.norm
    if info.residual and match.add is None:
        takes = [u for u in match.norm.users if u.args[1] == 0]
        out_value = takes[0] if len(takes) == 1 else None
    quant = _single_quant(out_value) if out_value is not None else None
    if info.with_quant is None or quant is None:
        quant = None
    core = [match.x, *match.args[1:]]
    if quant is not None:
        assert info.with_quant is not None
        fused_op: IrOp = getattr(ops, info.with_quant)
        scale = bound_args(ops.static_quant_fp8, quant)[1]
        fused_args = [*core, scale, match.group_name]
    else:
        fused_name = "all_reduce_fused_add_rms_norm" if match.add is not None else info.fused
        fused_op = getattr(ops, fused_name)
        fused_args = [*core, match.group_name]
    if not fusion.worth_it(fused_op, fused_args):
        return
    anchor = match.add if match.add is not None else match.norm
    # the fused op stands where the add (or the norm) stood: its other arguments, a scale the
    # quantization read among them, must exist there already
    position = _position(graph)
    others = [a for a in fused_args[1:] if isinstance(a, fx.Node)]
    if any(position[a] > position[anchor] for a in others):
        return
    if match.add is not None:
        inserting = graph.inserting_after(match.add)
    else:
        inserting = graph.inserting_before(anchor)
    with inserting:
        fused = graph.call_function(fused_op.torch_op.default, tuple(fused_args))
    fused.meta["val"] = _fake_call(fused_op.torch_op.default, *fused_args)
    name = "all_reduce+" + ("add+rms_norm" if match.add is not None else match.norm_op.name)
    name = name.replace("_static_quant_fp8", "+static_quant_fp8")
    if quant is not None:
        name += "+static_quant_fp8"
    residual = info.residual or match.add is not None
    if not residual:  # one result, as the norm's (or the quantization's)
        (quant or match.norm).replace_all_uses_with(fused)
    else:
        with graph.inserting_after(fused):
            out = graph.call_function(operator.getitem, (fused, 0))
            res = graph.call_function(operator.getitem, (fused, 1))
        out.meta["val"], res.meta["val"] = fused.meta["val"]
        if match.add is not None:
            (quant or match.norm).replace_all_uses_with(out)
            match.add.replace_all_uses_with(res)
        else:
            if quant is not None:
                quant.replace_all_uses_with(out)
                graph.erase_node(quant)
                quant = None
            for take in list(match.norm.users):
                take.replace_all_uses_with(out if take.args[1] == 0 else res)
                graph.erase_node(take)
    for dead in (quant, match.norm, match.add):
        if dead is not None:
            graph.erase_node(dead)
    graph.erase_node(match.reduce)
    fusion.fired(name, fused)


# --------------------------------------------------------------------- sequence parallel
def enable_sp(fusion: "FusionPass", graph: fx.Graph) -> None:
    """Apply `SP_PATTERNS` wherever they match."""
    if not fusion.config.fusion_on("enable_sp"):
        return
    for node in list(graph.nodes):
        if _default_op(node) is ops.all_reduce:
            _try_sp(fusion, graph, node)


def _try_sp(fusion: "FusionPass", graph: fx.Graph, reduce: fx.Node) -> None:
    switch = "enable_sp"
    x = reduce.args[0]
    if not fusion.applies(switch, x):
        return
    match = _match_norm(fusion, switch, reduce)
    if match is None:
        return
    if match.add is not None:
        fusion.skipped(switch, reduce, "a residual add before rms_norm: fuse it first")
        return
    tokens = static_tokens(fake_of(x))
    fake_x = fake_of(x)
    world = match.world
    token_range = fusion.config.token_range
    if tokens is None or fake_x.dim() != 2:
        fusion.skipped(
            switch,
            reduce,
            "the token count is symbolic: sequence parallelism splits a static count among "
            f"the {world} ranks (compile the sizes it should run at: compile_sizes)",
        )
        return
    if tokens % world:
        if token_range is not None and token_range[0] == token_range[1]:
            raise ValueError(
                f"ir_passes: enable_sp: compile size {tokens} does not divide among the "
                f"{world} ranks of group {match.group_name!r}; expected compile sizes from "
                f"sp_min_token_num up that are multiples of {world} (the world size)"
            )
        fusion.skipped(switch, reduce, f"{tokens} tokens do not divide among {world} ranks")
        return
    rank = process_groups.group_rank(match.group_name, switch)
    rows = tokens // world
    norm, info = match.norm, _NORMS[match.norm_op.name]
    with graph.inserting_before(norm):
        scattered = graph.call_function(
            ops.reduce_scatter.torch_op.default, (match.x, match.group_name)
        )
        scattered.meta["val"] = _fake_call(
            ops.reduce_scatter.torch_op.default, match.x, match.group_name
        )
        local_args: list[Any] = [scattered, *match.args[1:]]
        if info.residual:
            residual = match.args[1]
            local_res = graph.call_function(
                _aten.slice.Tensor, (residual, 0, rank * rows, (rank + 1) * rows)
            )
            local_res.meta["val"] = _fake_call(
                _aten.slice.Tensor, residual, 0, rank * rows, (rank + 1) * rows
            )
            local_args[1] = local_res
        local = graph.call_function(match.norm_op.torch_op.default, tuple(local_args))
        local.meta["val"] = _fake_call(match.norm_op.torch_op.default, *local_args)
    results = list(local.meta["val"]) if info.residual else [local.meta["val"]]
    # the results read after the norm (each gathered once; a residual nothing reads is not)
    takes: dict[int, fx.Node] = {0: norm}
    if info.residual:
        takes = {_index(t): t for t in norm.users}
    cursor = local
    for index, take in sorted(takes.items()):
        piece = local
        if info.residual:
            with graph.inserting_after(cursor):
                piece = graph.call_function(operator.getitem, (local, index))
            piece.meta["val"] = results[index]
            cursor = piece
        with graph.inserting_after(cursor):
            full = graph.call_function(ops.all_gather.torch_op.default, (piece, match.group_name))
        full.meta["val"] = _fake_call(ops.all_gather.torch_op.default, piece, match.group_name)
        cursor = full
        take.replace_all_uses_with(full)
        if take is not norm:
            graph.erase_node(take)
    graph.erase_node(norm)
    graph.erase_node(reduce)
    fusion.fired(f"sp:all_reduce+{match.norm_op.name}", scattered)


# --------------------------------------------------------------------- GEMM + collective
def symm_mem_ops_reason() -> str:
    """Why torch's symmetric-memory fused matrix products are missing here, or ``""``."""
    symm = getattr(torch.ops, "symm_mem", None)
    needed = ("fused_all_gather_matmul", "fused_matmul_reduce_scatter")
    if symm is None or not all(hasattr(symm, name) for name in needed):
        return f"this torch ({torch.__version__}) has no torch.ops.symm_mem.{'/'.join(needed)}"
    return ""


def _gemm_comms_reason(value: Any, group_name: str) -> str:
    """Why the fused ops cannot run on `value` over `group_name`, or ``""``."""
    reason = symm_mem_ops_reason()
    if reason:
        return reason
    if not isinstance(value, torch.Tensor) or not value.is_cuda:
        device = value.device if isinstance(value, torch.Tensor) else type(value).__name__
        return f"torch's symmetric-memory fused ops need CUDA tensors; this one is on {device}"
    import torch.distributed as dist

    backend = str(dist.get_backend(process_groups.resolve("fuse_gemm_comms", group_name)))
    if backend != "nccl":
        return f"torch's symmetric-memory fused ops need an NCCL group; {group_name!r} is {backend}"
    return ""


def fuse_gemm_comms(fusion: "FusionPass", graph: fx.Graph) -> None:
    """Apply `GEMM_COMMS_PATTERNS` wherever they match and can run."""
    if not fusion.config.fusion_on("fuse_gemm_comms"):
        return
    for node in list(graph.nodes):
        op = _default_op(node)
        if op is ops.all_gather:
            _try_all_gather_matmul(fusion, graph, node)
        elif op is ops.reduce_scatter:
            _try_matmul_reduce_scatter(fusion, graph, node)


def _usable(fusion: "FusionPass", node: fx.Node, value: Any, group_name: Any) -> bool:
    switch = "fuse_gemm_comms"
    if not isinstance(group_name, str) or not fusion.applies(switch, value):
        return False
    reason = _gemm_comms_reason(fake_of(value), group_name)
    if reason:
        fusion.skipped(switch, node, reason)
        return False
    return True


def _try_all_gather_matmul(fusion: "FusionPass", graph: fx.Graph, gather: fx.Node) -> None:
    x, group_name = bound_args(ops.all_gather, gather)
    users = list(gather.users)
    if not users or any(u.target is not _aten.mm.default or u.args[0] is not gather for u in users):
        return
    if not _usable(fusion, gather, x, group_name):
        return
    weights = [u.args[1] for u in users]
    fused_op = torch.ops.symm_mem.fused_all_gather_matmul.default
    with graph.inserting_before(users[0]):
        fused = graph.call_function(fused_op, (x, weights, 0, group_name), {"return_A": False})
        products = graph.call_function(operator.getitem, (fused, 1))
    fused.meta["val"] = (None, [u.meta["val"] for u in users])
    products.meta["val"] = fused.meta["val"][1]
    for i, user in enumerate(users):
        with graph.inserting_before(user):
            take = graph.call_function(operator.getitem, (products, i))
        take.meta["val"] = user.meta["val"]
        user.replace_all_uses_with(take)
        graph.erase_node(user)
    graph.erase_node(gather)
    fusion.fired("all_gather+matmul", fused)


def _try_matmul_reduce_scatter(fusion: "FusionPass", graph: fx.Graph, scatter: fx.Node) -> None:
    product, group_name = bound_args(ops.reduce_scatter, scatter)
    if not isinstance(product, fx.Node) or product.target is not _aten.mm.default:
        return
    if len(product.users) != 1 or not _usable(fusion, scatter, product, group_name):
        return
    a, b = product.args
    fused_op = torch.ops.symm_mem.fused_matmul_reduce_scatter.default
    with graph.inserting_before(scatter):
        fused = graph.call_function(fused_op, (a, b, "sum", 0, group_name))
    fused.meta["val"] = scatter.meta["val"]
    scatter.replace_all_uses_with(fused)
    graph.erase_node(scatter)
    graph.erase_node(product)
    fusion.fired("matmul+reduce_scatter", fused)
