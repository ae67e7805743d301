"""`InplaceFunctionalizationPass`: ``maybe_inplace`` calls become the default overload.

Runs before AOTAutograd on the graph Dynamo recorded. Each activation passed to a
``maybe_inplace`` call is donated: using it again afterwards is the caller's error, reported
with the op, the argument and the later use's source line. Donated graph inputs are recorded
for clone elimination. A call that will run an in-place implementation (selected as lowering
will select it) gets the run-time check of `inplace_check` before it, unless its fake tensors
prove that no activation can share memory with another tensor argument: compiled code refuses
such arguments as eager ``maybe_inplace`` does.
"""

import logging
from collections import Counter
from typing import Any

from torch import fx

import ir_dispatch
from ir_spec import IrOp

from .graph_utils import bound_args, ir_op_of, nodes_after, source_line
from .inplace_check import CHECK, fake_value, input_storages, plan_check
from .report import PassReport

logger = logging.getLogger("ir_passes")


def refuse_reuse(graph: fx.Graph, node: fx.Node, op: IrOp, args: list[Any]) -> None:
    """Raise `ValueError` where an activation that the ``maybe_inplace`` call `node` (of `op`,
    with bound `args`) donates is used again after it, naming the op, the argument and the
    later use's source line."""
    names = op.parameter_names
    later = list(nodes_after(graph, node))
    for index in op.activation_indices:
        donated = args[index]
        if not isinstance(donated, fx.Node):
            continue
        reuse = next((u for u in later if donated in u.all_input_nodes), None)
        if reuse is not None:
            raise ValueError(
                f"ir.{op.name}.maybe_inplace: argument '{names[index]}' ({donated.name}) "
                f"is donated but used again by {reuse.name} at {source_line(reuse)}; "
                "use the default overload, or pass a clone"
            )


def check_donations(graph: fx.Graph) -> None:
    """`refuse_reuse` for every ``maybe_inplace`` call of `graph`, which stays as it is: for a
    graph that is compiled in parts (ir-piecewise splits it), where a donated value may be
    used again in another part than the call's."""
    for node in graph.nodes:
        found = ir_op_of(node.target) if node.op == "call_function" else None
        if found is not None and found[1] == "maybe_inplace":
            refuse_reuse(graph, node, found[0], bound_args(found[0], node))


class InplaceFunctionalizationPass:
    """Turn every ``torch.ops.ir.<op>.maybe_inplace`` node into ``.default``."""

    def __init__(self, report: PassReport) -> None:
        self.report = report

    def __call__(self, graph: fx.Graph) -> fx.Graph:
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        inputs = input_storages(graph)
        for node in list(graph.nodes):
            found = ir_op_of(node.target) if node.op == "call_function" else None
            if found is None or found[1] != "maybe_inplace":
                continue
            op, _ = found
            args = bound_args(op, node)
            refuse_reuse(graph, node, op, args)
            for index in op.activation_indices:
                donated = args[index]
                if isinstance(donated, fx.Node) and donated.op == "placeholder":
                    self.report.donated_inputs.add(placeholders.index(donated))
            self._check_at_run_time(graph, node, op, args, inputs)
            node.target = op.torch_op.default
            self.report.functionalized += 1
            logger.debug("ir_passes: functionalized %s (%s)", node.name, op.name)
        graph.lint()
        return graph

    def _check_at_run_time(
        self, graph: fx.Graph, node: fx.Node, op: IrOp, args: list[Any], inputs: Counter[int]
    ) -> None:
        """Put the check of `node`'s tensor arguments before it, where an in-place
        implementation will run and its fake tensors do not prove them apart for good."""
        values = tuple(fake_value(a) for a in args)
        with ir_dispatch.mode(ir_dispatch.INDUCTOR):
            impl = ir_dispatch.select(op, *values)
        plan = plan_check(op, values, impl.provider, inputs) if impl.inplace else None
        if plan is None:
            return
        pairs, refusal = plan
        tensors = [args[i] for i in op.tensor_indices]
        with graph.inserting_before(node):
            check = graph.call_function(CHECK, (op.name, impl.provider, tensors, pairs, refusal))
        check.meta["val"] = check.meta["example_value"] = None
        check.meta["stack_trace"] = node.meta.get("stack_trace")
        self.report.inplace_checks += 1
        logger.debug(
            "ir_passes: %s (%s) checked at run time%s",
            node.name,
            op.name,
            ", refused" if refusal else "",
        )
