"""The rotary fusions, on the post-grad graph:

- ``enable_qk_norm_rope_fusion`` (`QK_NORM_ROPE_PATTERN`): ``rotary_embedding`` whose query and
  key are each the per-head ``rms_norm`` of a tensor, as a model writes it
  (``rms_norm(q.view(T, H, D), w_q, eps).view(T, H * D)``, often after splitting a packed
  ``qkv``), becomes ``qk_norm_rotary_embedding`` of the unnormalized tensors. Between the tensor
  and the norm, and between the norm and the rotary input, only reshapes may stand (``view``,
  ``reshape``, ``_unsafe_view``, ``unflatten``, ``flatten``, ``squeeze`` / ``unsqueeze``,
  ``clone``): they keep the elements' row-major order, so with the norm's last dimension of
  ``head_size`` each normalized row is one head of one token. The tensor may be a slice of a
  packed projection (``split`` / ``split_with_sizes`` / ``slice`` results).
- ``fuse_rope_kvcache`` (`ROPE_KVCACHE_PATTERN`): ``rotary_embedding`` whose rotated key
  ``write_kv_cache`` stores (with the value) becomes ``rotary_embedding_write_kv_cache``. The
  write is a mutating op: in a functional post-grad graph an ``auto_functionalized`` or
  ``auto_functionalized_v2`` node (see `mutating`), which the fused call replaces in the same
  form, mutated arguments and view information unchanged, at the write's place (so no reader of
  the old cache moves after the new write). Where both fusions match one rotary, the QK-norm
  fusion runs first and the cache write stays apart.
"""

import operator
from typing import TYPE_CHECKING, Any

import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq

from ir_spec import ops

from .config import QK_NORM_ROPE_PATTERN, ROPE_KVCACHE_PATTERN
from .graph_utils import bound_args, fake_of, ir_op_of
from .mutating import (
    AUTO_FUNCTIONALIZED,
    AUTO_FUNCTIONALIZED_V2,
    fake_arguments,
    functionalized_ir_op,
    output_count,
)

if TYPE_CHECKING:
    from .fusion import FusionPass

_aten = torch.ops.aten
#: ops whose result holds the input's elements in the same row-major order
RESHAPES = frozenset(
    getattr(packet, overload)
    for packet, overload in (
        (_aten.view, "default"),
        (_aten.reshape, "default"),
        (_aten._unsafe_view, "default"),
        (_aten.unflatten, "int"),
        (_aten.flatten, "using_ints"),
        (_aten.squeeze, "default"),
        (_aten.squeeze, "dim"),
        (_aten.squeeze, "dims"),
        (_aten.unsqueeze, "default"),
        (_aten.clone, "default"),
    )
    if hasattr(packet, overload)
)


def _is_reshape(node: Any) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target in RESHAPES


def _calls(node: Any, op_name: str) -> bool:
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return False
    found = ir_op_of(node.target)
    return found is not None and found[0].name == op_name and found[1] == "default"


def _same_shape(a: Any, b: Any) -> bool:
    """Statically the same shape (a symbolic size must not gain a guard here)."""
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.dim() == b.dim()
        and statically_known_true(sym_eq(a.shape, b.shape))
    )


def _per_head_norm(arg: Any, head_size: int) -> tuple[fx.Node, Any, float, list[fx.Node]] | None:
    """``(source, weight, epsilon, nodes)`` when rotary input `arg` is the per-head ``rms_norm``
    of `source` (a tensor of `arg`'s shape) reached through reshapes; `nodes` are the norm and
    the reshapes after it, which only the rotary reads."""
    if not isinstance(arg, fx.Node) or len(arg.users) != 1:
        return None
    target = fake_of(arg)
    after: list[fx.Node] = []
    node: Any = arg
    while _is_reshape(node):
        after.append(node)
        node = node.args[0]
        if not isinstance(node, fx.Node) or len(node.users) != 1:
            return None
    if not _calls(node, "rms_norm"):
        return None
    norm = node
    x, weight, epsilon, variance_size = bound_args(ops.rms_norm, norm)
    x_fake = fake_of(x)
    if variance_size is not None or not isinstance(x_fake, torch.Tensor):
        return None
    if not statically_known_true(sym_eq(x_fake.shape[-1], head_size)):
        return None
    source = x
    while isinstance(source, fx.Node) and not _same_shape(fake_of(source), target):
        if not _is_reshape(source):
            return None
        source = source.args[0]
    if not isinstance(source, fx.Node):
        return None
    return source, weight, epsilon, [norm, *reversed(after)]


def fuse_qk_norm_rope(fusion: "FusionPass", graph: fx.Graph) -> None:
    """Apply `QK_NORM_ROPE_PATTERN` everywhere it matches and pays off."""
    for rotary in list(graph.nodes):
        if _calls(rotary, "rotary_embedding"):
            _try_qk_norm_rope(fusion, graph, rotary)


def _try_qk_norm_rope(fusion: "FusionPass", graph: fx.Graph, rotary: fx.Node) -> None:
    positions, x_query, x_key, head_size, cos_sin_cache, is_neox_style = bound_args(
        ops.rotary_embedding, rotary
    )
    if not isinstance(head_size, int):
        return
    query = _per_head_norm(x_query, head_size)
    key = _per_head_norm(x_key, head_size)
    if query is None or key is None:
        return
    (q_source, q_weight, q_eps, q_nodes), (k_source, k_weight, k_eps, k_nodes) = query, key
    if q_eps != k_eps or not fusion.applies("enable_qk_norm_rope_fusion", q_source):
        return
    fused_op = ops.qk_norm_rotary_embedding
    args = [
        positions,
        q_source,
        k_source,
        q_weight,
        k_weight,
        q_eps,
        head_size,
        cos_sin_cache,
        is_neox_style,
    ]
    if not fusion.worth_it(fused_op, args):
        return
    with graph.inserting_before(rotary):
        fused = graph.call_function(fused_op.torch_op.default, tuple(args))
    fused.meta["val"] = fused_op.native(*[fake_of(a) for a in args])
    norm_inputs = [q_nodes[0].args[0], k_nodes[0].args[0]]
    rotary.replace_all_uses_with(fused)
    graph.erase_node(rotary)
    for chain in (q_nodes, k_nodes):  # the last reshape first, then back to the norm
        for node in reversed(chain):
            graph.erase_node(node)
    for norm_input in norm_inputs:
        _erase_unused_reshapes(graph, norm_input)
    fusion.fired(QK_NORM_ROPE_PATTERN, fused)


def _erase_unused_reshapes(graph: fx.Graph, node: Any) -> None:
    """Erase `node` and the reshapes it reads, back from it, while nothing else reads them."""
    while _is_reshape(node) and not node.users:
        source = node.args[0]
        graph.erase_node(node)
        node = source


def fuse_rope_kvcache(fusion: "FusionPass", graph: fx.Graph) -> None:
    """Apply `ROPE_KVCACHE_PATTERN` everywhere it matches and pays off."""
    position = {node: i for i, node in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        direct = _calls(node, "write_kv_cache")
        functional = functionalized_ir_op(node)
        if direct or (functional is not None and functional[0] is ops.write_kv_cache):
            _try_rope_kvcache(fusion, graph, node, position)


def _rotary_results(key: Any) -> tuple[fx.Node, list[fx.Node]] | None:
    """``(rotary, its getitem nodes)`` when `key` is the rotated key of a ``rotary_embedding``
    read only through ``getitem``."""
    if not isinstance(key, fx.Node) or key.target is not operator.getitem or key.args[1] != 1:
        return None
    rotary = key.args[0]
    if not _calls(rotary, "rotary_embedding"):
        return None
    assert isinstance(rotary, fx.Node)
    takes = list(rotary.users)
    if any(t.target is not operator.getitem for t in takes):
        return None
    return rotary, takes


def _try_rope_kvcache(
    fusion: "FusionPass", graph: fx.Graph, write: fx.Node, position: dict[fx.Node, int]
) -> None:
    found = fake_arguments(write)
    if found is None:
        return
    _, (_, _, key_cache, value_cache, _) = found
    if write.target in (AUTO_FUNCTIONALIZED, AUTO_FUNCTIONALIZED_V2):
        written = dict(write.kwargs)
        key, value, slot_mapping = written["key"], written["value"], written["slot_mapping"]
    else:
        key, value, key_cache_node, value_cache_node, slot_mapping = bound_args(
            ops.write_kv_cache, write
        )
    rotary_found = _rotary_results(key)
    if rotary_found is None:
        return
    rotary, takes = rotary_found
    # the fused call stands where the write stands: every reader of the rotary's results
    # must come after it (the write itself aside)
    at = position[write]
    readers = [u for t in takes for u in t.users if u is not write]
    if any(position.get(u, at + 1) <= at for u in readers):
        return
    positions, x_query, x_key, head_size, cos_sin_cache, is_neox_style = bound_args(
        ops.rotary_embedding, rotary
    )
    if not isinstance(head_size, int) or not statically_known_true(
        sym_eq(key_cache.shape[-1], head_size)
    ):
        return
    if not fusion.applies("fuse_rope_kvcache", x_key):
        return
    fused_op = ops.rotary_embedding_write_kv_cache
    plain = {
        "positions": positions,
        "x_query": x_query,
        "x_key": x_key,
        "value": value,
        "head_size": head_size,
        "cos_sin_cache": cos_sin_cache,
        "is_neox_style": is_neox_style,
        "slot_mapping": slot_mapping,
    }
    fakes = {name: fake_of(v) for name, v in plain.items()}
    fakes.update(key_cache=key_cache, value_cache=value_cache)
    if not fusion.worth_it(fused_op, [fakes[n] for n in fused_op.signature.parameters]):
        return
    overload = fused_op.torch_op.default
    rotary_vals = rotary.meta["val"]
    with graph.inserting_before(write):
        if write.target in (AUTO_FUNCTIONALIZED, AUTO_FUNCTIONALIZED_V2):
            # the mutated arguments (v1) or their bases and view information (v2) as they were
            kept = {k: v for k, v in write.kwargs.items() if k not in ("key", "value")}
            hop: Any = write.target
            fused = graph.call_function(hop, (overload,), {**plain, **kept})
            old_outs = output_count(ops.write_kv_cache.torch_op.default)
            fused.meta["val"] = (*rotary_vals, *write.meta["val"][old_outs:])
        else:
            args = [plain[n] for n in ("positions", "x_query", "x_key", "value", "head_size")]
            args += [cos_sin_cache, is_neox_style, key_cache_node, value_cache_node, slot_mapping]
            fused = graph.call_function(overload, tuple(args))
            fused.meta["val"] = rotary_vals
            old_outs = 0
    new_outs = output_count(overload)
    with graph.inserting_after(fused):
        for take in takes:
            index = take.args[1]
            assert isinstance(index, int)
            replacement = graph.call_function(operator.getitem, (fused, index))
            replacement.meta.update(take.meta)
            take.replace_all_uses_with(replacement)
        for take in list(write.users):  # the new values of the caches
            index = take.args[1]
            assert take.target is operator.getitem
            assert isinstance(index, int)
            new_index = index - old_outs + new_outs
            replacement = graph.call_function(operator.getitem, (fused, new_index))
            replacement.meta.update(take.meta)
            take.replace_all_uses_with(replacement)
    for take in [*takes, *write.users]:
        graph.erase_node(take)
    graph.erase_node(write)
    graph.erase_node(rotary)
    fusion.fired(ROPE_KVCACHE_PATTERN, fused)
