"""Fusion passes on the high-level ops: a norm or activation followed by fp8 quantization
becomes one composite op. One pattern each, on IR nodes (not on any kernel's graph).

A fusion applies where the composite's selected implementation is a real kernel (Inductor
fuses a native composition by itself), or everywhere with ``PassConfig.force_fusion``.
"""

import logging
import operator
from dataclasses import dataclass
from typing import Any

from torch import fx

import ir_dispatch
from ir_spec import IrOp, ops

from .graph_utils import bound_args, ir_op_of
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


def _fake(value: Any) -> Any:
    return value.meta["val"] if isinstance(value, fx.Node) else value


class FusionPass:
    """Apply every pattern of `PATTERNS` (counted in the report)."""

    def __init__(self, report: PassReport, *, force: bool = False) -> None:
        self.report = report
        self.force = force

    def worth_it(self, fused: IrOp, args: list[Any]) -> bool:
        if self.force:
            return True
        with ir_dispatch.mode(ir_dispatch.INDUCTOR):
            return ir_dispatch.select(fused, *[_fake(a) for a in args]).provider != "native"

    def __call__(self, graph: fx.Graph) -> fx.Graph:
        for pattern in PATTERNS:
            for node in list(graph.nodes):
                found = ir_op_of(node.target) if node.op == "call_function" else None
                if found is None or found[0].name != pattern.quant or found[1] != "default":
                    continue
                self._try(graph, pattern, node)
        graph.lint()
        return graph

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
        found = ir_op_of(producer.target) if producer.op == "call_function" else None
        if found is None or found[0].name != pattern.producer or found[1] != "default":
            return
        if len(value.users) != 1:  # the unquantized result is needed elsewhere
            return
        producer_op = found[0]
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
