"""`PiecewiseGraph`: what the piecewise backend returns for a traced graph, in a form Dynamo's
ahead-of-time compilation can save (see `ir_piecewise.traces`)."""

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, fx
from torch._dynamo.aot_compile_types import SerializableCallable
from torch.utils import _pytree as pytree

if TYPE_CHECKING:
    from .backend import PiecewiseBackend

#: the node metadata a saved trace keeps: what splitting and the compile cache keys read
_KEPT_META = "example_value"


class PiecewiseGraph(SerializableCallable):
    """The traced graph and, once built, the split graph that runs it.

    A freshly traced graph is built at once by the backend; a loaded one is built by
    `build`, which splits it again and loads its pieces from the compile cache.
    """

    def __init__(self, graph: fx.GraphModule, split: fx.GraphModule | None = None) -> None:
        self.graph = graph
        self.split = split

    def build(self, backend: "PiecewiseBackend") -> None:
        """Split the loaded graph and load its pieces with `backend`; raises `NotCached` if the
        compile cache lacks one (the caller then traces afresh rather than compile from
        metadata that was simplified for saving)."""
        self.split = backend.split_and_compile(self.graph, cached_only=True)

    def __call__(self, *args: Any) -> Any:
        if self.split is None:
            raise RuntimeError("ir_piecewise: a loaded trace runs only after build(backend)")
        return self.split(*args)

    @classmethod
    def serialize_compile_artifacts(cls, fn: "PiecewiseGraph") -> bytes:
        from torch.fx._graph_pickler import GraphPickler, Options

        with _picklable_meta(fn.graph):
            return GraphPickler.dumps(fn.graph, Options(ops_filter=None))

    @classmethod
    def deserialize_compile_artifacts(cls, data: bytes) -> "PiecewiseGraph":
        from torch._subclasses import FakeTensorMode
        from torch.fx._graph_pickler import GraphPickler
        from torch.fx.experimental.symbolic_shapes import ShapeEnv

        fake_mode = FakeTensorMode(shape_env=ShapeEnv())
        graph = GraphPickler.loads(data, fake_mode)
        if not isinstance(graph, fx.GraphModule):
            raise TypeError(f"ir_piecewise: a saved trace holds {type(graph).__name__}")
        graph.recompile()
        return cls(graph)


@contextlib.contextmanager
def _picklable_meta(gm: fx.GraphModule) -> Iterator[None]:
    """Strip `gm`'s node metadata to the example values, restoring it afterwards. Views among
    them become plain tensors of the same sizes and strides: the pickler cannot save a view's
    base, and pieces are keyed and loaded by sizes and strides alone."""
    saved = {}
    for node in gm.graph.nodes:
        saved[node] = node.meta
        node.meta = (
            {_KEPT_META: pytree.tree_map_only(Tensor, _unviewed, node.meta[_KEPT_META])}
            if _KEPT_META in node.meta
            else {}
        )
    try:
        yield
    finally:
        for node, meta in saved.items():
            node.meta = meta


def _unviewed(value: Tensor) -> Tensor:
    if not value._is_view():
        return value
    with value.fake_mode:  # type: ignore[attr-defined]
        return torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device=value.device
        )
