"""`InplaceFunctionalizationPass`: ``maybe_inplace`` calls become the default overload.

Runs before AOTAutograd on the graph Dynamo recorded. Each activation passed to a
``maybe_inplace`` call is donated: using it again afterwards is the caller's error, reported
with the op, the argument and the later use's source line. Donated graph inputs are recorded
for clone elimination.
"""

import logging

from torch import fx

from .graph_utils import bound_args, ir_op_of, nodes_after, source_line
from .report import PassReport

logger = logging.getLogger("ir_passes")


class InplaceFunctionalizationPass:
    """Turn every ``torch.ops.ir.<op>.maybe_inplace`` node into ``.default``."""

    def __init__(self, report: PassReport) -> None:
        self.report = report

    def __call__(self, graph: fx.Graph) -> fx.Graph:
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for node in list(graph.nodes):
            found = ir_op_of(node.target) if node.op == "call_function" else None
            if found is None or found[1] != "maybe_inplace":
                continue
            op, _ = found
            args = bound_args(op, node)
            names = list(op.signature.parameters)
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
                if donated.op == "placeholder":
                    self.report.donated_inputs.add(placeholders.index(donated))
            node.target = op.torch_op.default
            self.report.functionalized += 1
            logger.debug("ir_passes: functionalized %s (%s)", node.name, op.name)
        graph.lint()
        return graph
