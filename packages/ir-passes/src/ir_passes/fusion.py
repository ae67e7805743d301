"""Fusion passes on the high-level ops, on IR nodes (not on any kernel's graph), one pattern a
fusion, each under its `PassConfig` switch and token threshold (`config.FUSIONS`):

- ``fuse_residual_add``: a residual add followed by ``rms_norm`` becomes ``fused_add_rms_norm``
  (`RESIDUAL_ADD_PATTERN`): models written without the fused op, Hugging Face decoder layers
  among them, add the residual with a plain ``+`` and normalize the sum. It runs first, so
  an add, a norm and a quantization end as one composite;
- ``fuse_norm_quant`` / ``fuse_act_quant``: a norm or activation followed by fp8 quantization
  (static, dynamic per token, or per token group) becomes one composite op (`PATTERNS`);
- ``enable_sp``, ``fuse_gemm_comms`` and ``fuse_allreduce_rms``, on the collectives of a
  tensor-parallel model: see `tp_fusion`;
- ``enable_qk_norm_rope_fusion`` and ``fuse_rope_kvcache``: see `rope_fusion`.

A fusion applies where the fused op's selected implementation is a real kernel (Inductor
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

from .config import RESIDUAL_ADD_PATTERN, PassConfig
from .graph_utils import alias_root, bound_args, fake_of, ir_op_of, static_tokens
from .report import PassReport
from .rope_fusion import fuse_qk_norm_rope, fuse_rope_kvcache
from .tp_fusion import enable_sp, fuse_allreduce_rms, fuse_gemm_comms

logger = logging.getLogger("ir_passes")


@dataclass(frozen=True)
class FusionPattern:
    """``producer`` -> (``getitem`` index, or None) -> ``quant``  ==>  ``fused``, under the
    `PassConfig` switch ``switch``.

    The fused op returns the quantizer's results, then (where the producer is
    ``fused_add_rms_norm``, read through ``getitem`` `output_index`) the residual."""

    name: str
    producer: str
    output_index: int | None
    quant: str
    fused: str
    switch: str = "fuse_norm_quant"


def _norm_quant(producer: str, index: int | None, quant: str, fused: str) -> FusionPattern:
    return FusionPattern(f"{producer}+{quant}", producer, index, quant, fused)


PATTERNS = (
    _norm_quant("rms_norm", None, "static_quant_fp8", "rms_norm_static_quant_fp8"),
    _norm_quant("fused_add_rms_norm", 0, "static_quant_fp8", "fused_add_rms_norm_static_quant_fp8"),
    _norm_quant("rms_norm", None, "dynamic_quant_fp8", "rms_norm_dynamic_quant_fp8"),
    _norm_quant(
        "fused_add_rms_norm", 0, "dynamic_quant_fp8", "fused_add_rms_norm_dynamic_quant_fp8"
    ),
    _norm_quant("rms_norm", None, "group_quant_fp8", "rms_norm_group_quant_fp8"),
    _norm_quant("fused_add_rms_norm", 0, "group_quant_fp8", "fused_add_rms_norm_group_quant_fp8"),
    FusionPattern(
        "silu_and_mul+static_quant_fp8",
        "silu_and_mul",
        None,
        "static_quant_fp8",
        "silu_and_mul_static_quant_fp8",
        "fuse_act_quant",
    ),
    FusionPattern(
        "silu_and_mul+group_quant_fp8",
        "silu_and_mul",
        None,
        "group_quant_fp8",
        "silu_and_mul_group_quant_fp8",
        "fuse_act_quant",
    ),
)
#: the composite a quantizer forms with a ``fused_add_rms_norm`` before it
_FUSED_ADD_COMPOSITE = {p.quant: p for p in PATTERNS if p.producer == "fused_add_rms_norm"}


def _fake(value: Any) -> Any:
    return fake_of(value)


def _default_call_of(node: fx.Node) -> IrOp | None:
    """The IR op whose default overload `node` calls (the overload every fusion matches)."""
    found = ir_op_of(node.target) if node.op == "call_function" else None
    return found[0] if found is not None and found[1] == "default" else None


class FusionPass:
    """Apply every fusion `config` turns on: residual adds into ``fused_add_rms_norm``, the
    patterns of `PATTERNS`, then the rotary fusions of `rope_fusion` (each counted in the
    report under its pattern's name).

    `force`, where given, overrides the config's ``force_fusion``."""

    def __init__(
        self, report: PassReport, config: PassConfig | None = None, *, force: bool | None = None
    ) -> None:
        self.report = report
        self.config = config or PassConfig()
        self.force = self.config.force_fusion if force is None else force

    def worth_it(self, fused: IrOp, args: list[Any]) -> bool:
        if self.force:
            return True
        with ir_dispatch.mode(ir_dispatch.INDUCTOR):
            return ir_dispatch.select(fused, *[_fake(a) for a in args]).provider != "native"

    def applies(self, switch: str, activation: Any) -> bool:
        """Whether fusion `switch` runs on an op whose activation is `activation` (a node or
        value): switched on, and within its token threshold for this graph."""
        return self.config.fusion_applies(switch, static_tokens(_fake(activation)))

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
        enable_sp(self, graph)
        fuse_gemm_comms(self, graph)
        fuse_allreduce_rms(self, graph)
        fuse_qk_norm_rope(self, graph)
        fuse_rope_kvcache(self, graph)
        graph.lint()
        return graph

    def fired(self, name: str, node: fx.Node) -> None:
        """Count pattern `name`, which made `node`."""
        self.report.fusions[name] += 1
        logger.debug("ir_passes: fused %s -> %s", name, node.name)

    def skipped(self, switch: str, node: fx.Node, reason: str) -> None:
        """Record (`PassReport.skipped`) and log that fusion `switch` left `node` alone."""
        entry = f"{switch}: {node.name}: {reason}"
        self.report.skipped.append(entry)
        logger.info("ir_passes: %s", entry)

    def _try_residual_add(
        self, graph: fx.Graph, norm: fx.Node, position: dict[fx.Node, int]
    ) -> None:
        norm_args = bound_args(ops.rms_norm, norm)  # x, weight, epsilon, variance_size
        total = norm_args[0]
        addends = _same_layout_addends(total) if isinstance(total, fx.Node) else None
        if addends is None or not self.applies("fuse_residual_add", total):
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
        self.fired(RESIDUAL_ADD_PATTERN, fused)

    def _quant_composite_worth_it(self, norm: fx.Node, fused_args: list[Any]) -> bool:
        """Whether the norm's only reader is a quantization that, once the add is fused, joins
        it in a real ``fused_add_rms_norm_*_quant_fp8`` kernel: where the fused add alone would
        run natively, the add + norm + quant chain still becomes one kernel."""
        if len(norm.users) != 1 or fused_args[-1] is not None:  # variance_size
            return False
        (quant,) = norm.users
        quant_op = _default_call_of(quant)
        pattern = _FUSED_ADD_COMPOSITE.get(quant_op.name) if quant_op is not None else None
        if pattern is None or quant_op is None:
            return False
        quant_args = bound_args(quant_op, quant)
        if quant_args[0] is not norm or not self.applies(pattern.switch, norm):
            return False
        composite: IrOp = getattr(ops, pattern.fused)
        return self.worth_it(composite, [*fused_args[:-1], *quant_args[1:]])

    def _try(self, graph: fx.Graph, pattern: FusionPattern, quant: fx.Node) -> None:
        quant_op = getattr(ops, pattern.quant)
        quant_args = bound_args(quant_op, quant)
        value = quant_args[0]
        if not isinstance(value, fx.Node) or not self.applies(pattern.switch, value):
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
        else:  # (*the quantizer's results, residual_out)
            results = fused.meta["val"]
            with graph.inserting_after(fused):
                taken = [
                    graph.call_function(operator.getitem, (fused, i)) for i in range(len(results))
                ]
            for node, val in zip(taken, results, strict=True):
                node.meta["val"] = val
            *quantized, residual = taken
            if isinstance(quant.meta.get("val"), tuple):
                for user in list(quant.users):
                    index = user.args[1] if user.target is operator.getitem else None
                    if not isinstance(index, int):
                        raise NotImplementedError(
                            f"ir_passes: result of {quant.name} used whole by {user.name}"
                        )
                    user.replace_all_uses_with(quantized[index])
                    graph.erase_node(user)
            else:
                quant.replace_all_uses_with(quantized[0])
            for user in list(producer.users):
                if user.target is operator.getitem and user.args[1] == 1:
                    user.replace_all_uses_with(residual)
                    graph.erase_node(user)
            for node in taken:  # results nothing reads (a scale the graph drops)
                if not node.users:
                    graph.erase_node(node)
        graph.erase_node(quant)
        if pattern.output_index is not None:
            graph.erase_node(value)
        if not producer.users:
            graph.erase_node(producer)
        self.fired(pattern.name, fused)


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
