"""Fusion passes on the high-level ops, on IR nodes (not on any kernel's graph):

- a residual add followed by ``rms_norm`` becomes ``fused_add_rms_norm``
  (`RESIDUAL_ADD_PATTERN`): models written without the fused op, Hugging Face decoder layers
  among them, add the residual with a plain ``+`` and normalize the sum. It runs first, so
  an add, a norm and a static quantization end as one composite;
- a norm or activation followed by fp8 quantization becomes one composite op (`PATTERNS`).

A fusion applies where the composite's selected implementation is a real kernel (Inductor
fuses a native composition by itself), or everywhere with ``PassConfig.force_fusion``.
"""

import logging
import operator
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch._prims_common import make_contiguous_strides_for
from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq

import ir_dispatch
from ir_spec import IrOp, ops

from .graph_utils import alias_root, bound_args, ir_op_of
from .report import PassReport

logger = logging.getLogger("ir_passes")


@dataclass(frozen=True)
class FusionPattern:
    """``producer`` -> (``getitem`` index, or None) -> ``quant``  ==>  ``fused``."""

    name: str
    producer: str
    output_index: int | None
    quant: str
    fused: str


PATTERNS = (
    FusionPattern(
        "rms_norm+static_quant_fp8",
        "rms_norm",
        None,
        "static_quant_fp8",
        "rms_norm_static_quant_fp8",
    ),
    FusionPattern(
        "fused_add_rms_norm+static_quant_fp8",
        "fused_add_rms_norm",
        0,
        "static_quant_fp8",
        "fused_add_rms_norm_static_quant_fp8",
    ),
    FusionPattern(
        "rms_norm+dynamic_quant_fp8",
        "rms_norm",
        None,
        "dynamic_quant_fp8",
        "rms_norm_dynamic_quant_fp8",
    ),
    FusionPattern(
        "silu_and_mul+static_quant_fp8",
        "silu_and_mul",
        None,
        "static_quant_fp8",
        "silu_and_mul_static_quant_fp8",
    ),
)


#: the report's name for ``rms_norm(a + b)`` -> ``fused_add_rms_norm(a, b)``
RESIDUAL_ADD_PATTERN = "add+rms_norm"


def _fake(value: Any) -> Any:
    return value.meta["val"] if isinstance(value, fx.Node) else value


def _default_call_of(node: fx.Node) -> IrOp | None:
    """The IR op whose default overload `node` calls (the overload every fusion matches)."""
    found = ir_op_of(node.target) if node.op == "call_function" else None
    return found[0] if found is not None and found[1] == "default" else None


class FusionPass:
    """Fuse residual adds into ``fused_add_rms_norm``, then apply every pattern of `PATTERNS`
    (each counted in the report)."""

    def __init__(self, report: PassReport, *, force: bool = False) -> None:
        self.report = report
        self.force = force

    def worth_it(self, fused: IrOp, args: list[Any]) -> bool:
        if self.force:
            return True
        with ir_dispatch.mode(ir_dispatch.INDUCTOR):
            return ir_dispatch.select(fused, *[_fake(a) for a in args]).provider != "native"

    def __call__(self, graph: fx.Graph) -> fx.Graph:
        # the order of the graph's nodes; fusing erases and inserts nodes but never reorders
        # the others, so it stays valid for them
        position = {node: i for i, node in enumerate(graph.nodes)}
        for node in list(graph.nodes):
            if _default_call_of(node) is ops.rms_norm:
                self._try_residual_add(graph, node, position)
        for pattern in PATTERNS:
            for node in list(graph.nodes):
                if _default_call_of(node) is getattr(ops, pattern.quant):
                    self._try(graph, pattern, node)
        graph.lint()
        return graph

    def _try_residual_add(
        self, graph: fx.Graph, norm: fx.Node, position: dict[fx.Node, int]
    ) -> None:
        norm_args = bound_args(ops.rms_norm, norm)  # x, weight, epsilon, variance_size
        total = norm_args[0]
        addends = _same_layout_addends(total) if isinstance(total, fx.Node) else None
        if addends is None:
            return
        assert isinstance(total, fx.Node)
        # the fused op replaces the add where the add stands, so the norm's other arguments
        # must exist there already (a node the pass made has no position: left alone)
        before = position[total]
        others = [a for a in norm_args[1:] if isinstance(a, fx.Node)]
        if any(position.get(a, before + 1) > before for a in others):
            return
        fused_op = ops.fused_add_rms_norm
        fused_args = [*addends, *norm_args[1:]]
        if not (
            self.worth_it(fused_op, fused_args) or self._quant_composite_worth_it(norm, fused_args)
        ):
            return
        with graph.inserting_after(total):
            fused = graph.call_function(fused_op.torch_op.default, tuple(fused_args))
        with graph.inserting_after(fused):
            out = graph.call_function(operator.getitem, (fused, 0))
            residual = graph.call_function(operator.getitem, (fused, 1))
        fused.meta["val"] = fused_op.native(*[_fake(a) for a in fused_args])
        out.meta["val"], residual.meta["val"] = fused.meta["val"]
        norm.replace_all_uses_with(out)
        graph.erase_node(norm)
        total.replace_all_uses_with(residual)
        graph.erase_node(total)
        self.report.fusions[RESIDUAL_ADD_PATTERN] += 1
        logger.debug("ir_passes: fused %s -> %s", RESIDUAL_ADD_PATTERN, fused.name)

    def _quant_composite_worth_it(self, norm: fx.Node, fused_args: list[Any]) -> bool:
        """Whether the norm's only reader is a static quantization that, once the add is fused,
        joins it in a real ``fused_add_rms_norm_static_quant_fp8`` kernel: where the fused add
        alone would run natively, the add + norm + quant chain still becomes one kernel."""
        if len(norm.users) != 1 or fused_args[-1] is not None:  # variance_size
            return False
        (quant,) = norm.users
        if _default_call_of(quant) is not ops.static_quant_fp8:
            return False
        quant_args = bound_args(ops.static_quant_fp8, quant)
        if quant_args[0] is not norm:
            return False
        composite = ops.fused_add_rms_norm_static_quant_fp8
        return self.worth_it(composite, [*fused_args[:-1], *quant_args[1:]])

    def _try(self, graph: fx.Graph, pattern: FusionPattern, quant: fx.Node) -> None:
        quant_op = getattr(ops, pattern.quant)
        quant_args = bound_args(quant_op, quant)
        value = quant_args[0]
        if not isinstance(value, fx.Node):
            return
        producer = value
        if pattern.output_index is not None:
            if value.target is not operator.getitem or value.args[1] != pattern.output_index:
                return
            source = value.args[0]
            if not isinstance(source, fx.Node):
                return
            producer = source
        producer_op = _default_call_of(producer)
        if producer_op is None or producer_op.name != pattern.producer:
            return
        if len(value.users) != 1:  # the unquantized result is needed elsewhere
            return
        producer_args = bound_args(producer_op, producer)
        names = list(producer_op.signature.parameters)
        if "variance_size" in names and producer_args[names.index("variance_size")] is not None:
            return
        core = [a for n, a in zip(names, producer_args, strict=True) if n != "variance_size"]
        fused_op: IrOp = getattr(ops, pattern.fused)
        fused_args = core + quant_args[1:]
        if not self.worth_it(fused_op, fused_args):
            return
        with graph.inserting_before(quant):
            fused = graph.call_function(fused_op.torch_op.default, tuple(fused_args))
        fused.meta["val"] = fused_op.native(*[_fake(a) for a in fused_args])
        if pattern.output_index is None:  # same results as the quantizer: (q) or (q, scale)
            quant.replace_all_uses_with(fused)
        else:  # (q, residual_out): q replaces the quantizer, residual_out the producer's
            with graph.inserting_after(fused):
                q = graph.call_function(operator.getitem, (fused, 0))
                residual = graph.call_function(operator.getitem, (fused, 1))
            q.meta["val"], residual.meta["val"] = fused.meta["val"]
            quant.replace_all_uses_with(q)
            for user in list(producer.users):
                if user.target is operator.getitem and user.args[1] == 1:
                    user.replace_all_uses_with(residual)
                    graph.erase_node(user)
        graph.erase_node(quant)
        if pattern.output_index is not None:
            graph.erase_node(value)
        if not producer.users:
            graph.erase_node(producer)
        self.report.fusions[pattern.name] += 1
        logger.debug("ir_passes: fused %s -> %s", pattern.name, fused.name)


def _same_layout_addends(total: fx.Node) -> tuple[fx.Node, fx.Node] | None:
    """``(a, b)`` when `total` is ``aten.add.Tensor(a, b)`` of two distinct, unaliased,
    contiguous tensors of one shape, dtype and device (no broadcast, no type promotion, no
    ``alpha``): then ``fused_add_rms_norm(a, b)``'s residual is the add's result, bit for bit
    and in the same layout."""
    if total.op != "call_function" or total.target is not torch.ops.aten.add.Tensor:
        return None
    if len(total.args) != 2 or total.kwargs.get("alpha", 1) != 1:
        return None
    a, b = total.args
    if not isinstance(a, fx.Node) or not isinstance(b, fx.Node):
        return None
    values = [n.meta.get("val") for n in (a, b, total)]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if len(tensors) != 3:
        return None
    result = tensors[2]
    for v in tensors:
        if v.dtype != result.dtype or v.device != result.device:
            return None
        # statically known only: a symbolic size must not gain a guard here
        if not statically_known_true(sym_eq(v.shape, result.shape)):
            return None
        if not statically_known_true(sym_eq(v.stride(), make_contiguous_strides_for(v.shape))):
            return None
    if alias_root(a) is alias_root(b):  # an in-place kernel would write both through one
        return None
    return a, b
