"""`CloneEliminationPass`: remove the clones lowering added where that is provably safe.

Lowering clones the activations of an in-place implementation. Using the original instead is
safe exactly when nothing can observe the in-place write: no node reads the original's storage
(the original itself, the tensor it views, or any other view of that storage) at or after the
first use of the clone, the storage is not a graph output, if it is a graph input, that
input was donated (passed to ``maybe_inplace``), the original's own elements provably do
not share memory (a stride-0 ``expand`` cannot hold one result per element; a symbolic layout
cannot be told), and the original provably has the clone's layout. Lowering's clones are
contiguous, so a strided original (a padded row, a column slice) keeps its clone: without it
the kernel's results would have the original's strides, and the graph after it, compiled for
the clone's, would get tensors of another layout. Any clone that fails one condition stays.
"""

import logging

from torch import Tensor, fx
from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq

from ir_spec import aliasing

from .graph_utils import alias_groups
from .lowering import INSERTED_CLONE
from .report import PassReport

logger = logging.getLogger("ir_passes")


class CloneEliminationPass:
    """Remove inserted clones whose removal cannot change any result."""

    def __init__(self, report: PassReport) -> None:
        self.report = report

    def __call__(self, graph: fx.Graph) -> fx.Graph:
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for clone in [n for n in graph.nodes if n.meta.get(INSERTED_CLONE)]:
            original = clone.args[0]
            if isinstance(original, fx.Node) and self._removable(
                graph, clone, original, placeholders
            ):
                clone.replace_all_uses_with(original)
                graph.erase_node(clone)
                self.report.clones_removed += 1
                logger.debug("ir_passes: removed clone of %s", original.name)
        graph.lint()
        return graph

    def _removable(
        self, graph: fx.Graph, clone: fx.Node, original: fx.Node, placeholders: list[fx.Node]
    ) -> bool:
        value = original.meta.get("val")
        if not isinstance(value, Tensor) or aliasing.internal_overlap(value) is not False:
            return False
        cloned = clone.meta.get("val")
        if not isinstance(cloned, Tensor) or not same_layout(value, cloned):
            return False
        order = {n: i for i, n in enumerate(graph.nodes)}
        roots = alias_groups(graph)
        root = roots[original]
        if root.op == "placeholder" and placeholders.index(root) not in self.report.donated_inputs:
            return False
        if root.op == "get_attr":
            return False
        storage = {n for n, r in roots.items() if r is root}
        first_write = min(order[u] for u in clone.users) if clone.users else order[clone]
        for member in storage:
            for user in member.users:
                if user is clone:
                    continue
                if user.op == "output" or order[user] >= first_write:
                    return False
        return True


def same_layout(a: Tensor, b: Tensor) -> bool:
    """Whether `a` and `b` provably have one shape and the same strides, but in dimensions of
    one element (whose stride Inductor's layout checks ignore too), without adding guards on
    symbolic sizes."""
    if not statically_known_true(sym_eq(a.shape, b.shape)):
        return False
    return all(
        statically_known_true(size == 1) or statically_known_true(stride_a == stride_b)
        for size, stride_a, stride_b in zip(a.shape, a.stride(), b.stride(), strict=True)
    )
