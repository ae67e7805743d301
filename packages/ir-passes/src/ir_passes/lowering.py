"""`LoweringPass`: each IR op node becomes the implementation ir-dispatch selects for it.

Runs after AOTAutograd. The choice is made with `ir_dispatch.select` on the node's fake
tensors in ``inductor`` mode, the same rule as eager dispatch. The implementation is traced
(`make_fx`) and spliced in: native implementations become ATen ops Inductor fuses, kernel
providers' implementations their own torch ops. An in-place implementation gets clones of its
activations, so the graph stays functional; `CloneEliminationPass` removes the clones it can
prove unneeded. Every choice is recorded in the report. Ops that store into their arguments
(a KV cache) keep their place and form in the graph and call the selected implementation through
a torch op of the same schema (`mutating.lower_mutating`).

With ``PassConfig.autotune`` the choice is made by measurement instead (`ir_passes.autotune`):
the candidates are timed on the node's arguments at both ends of the compile range and the
one fastest at each replaces the priority's choice (``native``: the op is left for Inductor to
fuse, as the priority's ``native`` is). Each decision is recorded in the report
(``PassReport.autotune``), with every candidate's time and whether it changed the choice.
"""

import logging
from typing import Any

import torch
from torch import fx

import ir_dispatch
from ir_spec import Impl, IrOp

from . import autotune
from .config import PassConfig
from .graph_utils import bound_args, inline, ir_op_of, replace_results
from .mutating import lower_mutating
from .report import PassReport

logger = logging.getLogger("ir_passes")

#: Meta key marking the clones lowering inserts (the only ones clone elimination removes).
INSERTED_CLONE = "ir_passes_inserted_clone"


def _with_clones(op: IrOp, impl: Impl) -> Any:
    """`impl` called on contiguous clones of the activations it writes.

    Contiguous, not the source's layout: a clone that keeps a row stride of a dimension of
    size one (a slice of one token) is a buffer Inductor must copy into that exact layout for
    the kernel and copy back after it, and its scheduler fails on the copy back (a node that
    depends on itself)."""

    def call(*args: Any) -> Any:
        cloned = list(args)
        for i in op.activation_indices:
            cloned[i] = args[i].clone(memory_format=torch.contiguous_format)
        return impl.fn(*cloned)

    return call


class LoweringPass:
    """Replace every ``torch.ops.ir.*.default`` node by its selected implementation (the
    fastest measured one where `config` turns ``autotune`` on)."""

    def __init__(self, report: PassReport, config: PassConfig | None = None) -> None:
        self.report = report
        self.config = config or PassConfig()

    def choose(self, node: fx.Node, op: IrOp, fakes: list[Any]) -> Impl:
        """The implementation `node` (a call of `op` on `fakes`) is lowered to."""
        if self.config.autotune:
            decision = autotune.autotune(op, fakes, self.config.token_range)
            if decision is not None:
                self.report.autotune[node.name] = decision
                return op.impls[decision.choice]
        with ir_dispatch.mode(ir_dispatch.INDUCTOR):
            return ir_dispatch.select(op, *fakes)

    def __call__(self, graph: fx.Graph) -> fx.Graph:
        for node in list(graph.nodes):
            if lower_mutating(node, self.report, self.choose):  # stores into a cache: `mutating`
                continue
            found = ir_op_of(node.target) if node.op == "call_function" else None
            if found is None:
                continue
            op, overload = found
            if overload != "default":
                raise ValueError(
                    f"ir_passes: {node.name} calls ir.{op.name}.{overload}; run "
                    "InplaceFunctionalizationPass before lowering"
                )
            args = bound_args(op, node)
            fakes = [a.meta["val"] if isinstance(a, fx.Node) else a for a in args]
            impl = self.choose(node, op, fakes)
            fn = _with_clones(op, impl) if impl.inplace else impl.fn
            before = set(graph.nodes)
            outputs = inline(graph, node, fn, args)
            if impl.inplace:
                clones = [
                    n
                    for n in graph.nodes
                    if n not in before
                    and n.op == "call_function"
                    and n.target is torch.ops.aten.clone.default
                    and n.args[0] in [args[i] for i in op.activation_indices]
                ]
                for clone in clones:
                    clone.meta[INSERTED_CLONE] = True
                self.report.clones_inserted += len(clones)
            replace_results(node, outputs, multiple=isinstance(node.meta.get("val"), tuple))
            self.report.selected_impls.setdefault(op.name, {})[node.name] = impl.provider
            logger.debug("ir_passes: lowered %s (%s) to %s", node.name, op.name, impl.provider)
        if self.config.autotune:
            autotune.log_summary(list(self.report.autotune.values()))
        graph.lint()
        return graph
