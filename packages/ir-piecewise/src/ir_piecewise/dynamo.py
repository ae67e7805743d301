"""Piecewise compilation of the graphs Dynamo hands a backend (``torch.compile(model,
backend=...)``), where `ir_piecewise.compile` traces by itself instead.

`DynamoPiecewiseBackend(config)` is a Dynamo backend: each graph Dynamo traces (one per guard
set: Dynamo's own recompilations bring the other shapes) is split at the splitting ops, its
pieces compiled per compile range and size by the configuration's piece compiler, and run as
`GraphRunner`. The token count is the graph's dynamic dimension; where Dynamo made several
dimensions dynamic, the first one of the inputs (`token_symbol`). A static graph (Dynamo's
first trace of a shape, unless ``dynamic=True`` or ``mark_dynamic``) compiles its pieces once,
for its one shape.

CUDA graphs follow `CompilationConfig.cudagraph_mode` for calls on CUDA tensors of a graph with
a token dimension: a call of at most ``max_capture_size`` tokens is copied into this graph's
persistent buffers of the next capture size (padding rows hold what earlier calls left, zeros
at first), replayed, and its outputs are sliced back to the call's tokens; they are valid until
the next call. Models whose padding rows must hold particular values (positions that a cache
write skips) need `ir_piecewise.compile`'s ``pad_values``.
"""

import logging
from typing import Any

import torch
from torch import Tensor, fx
from torch.utils import _pytree as pytree

from .backend import PiecewiseBackend, token_symbol
from .config import CompilationConfig, CUDAGraphMode
from .cudagraphs import CUDAGraphRunner
from .pieces import placeholder_values

logger = logging.getLogger("ir_piecewise")
#: where a graph input holds the token count: (input index, dim); dim None: the input is it
Site = tuple[int, int | None]


class GraphRunner:
    """Runs one split and compiled Dynamo graph, padding calls to capture sizes for CUDA
    graphs as the configuration says (see the module docstring)."""

    def __init__(self, backend: PiecewiseBackend, gm: fx.GraphModule, split: fx.GraphModule):
        self.backend = backend
        self.config = backend.config
        self.split = split
        symbol = token_symbol(gm, first=True)
        self.sites: list[Site] = []
        if symbol is not None:
            for i, value in enumerate(placeholder_values(gm)):
                if isinstance(value, torch.SymInt) and value.node.expr == symbol:
                    self.sites.append((i, None))
                elif isinstance(value, Tensor):
                    dims = [
                        d
                        for d, size in enumerate(value.shape)
                        if isinstance(size, torch.SymInt) and size.node.expr == symbol
                    ]
                    self.sites += [(i, dims[0])] if dims else []
        #: padded size -> input index -> persistent buffer
        self.static_inputs: dict[int, dict[int, Tensor]] = {}
        self.full_graph = CUDAGraphRunner(
            self.split, backend.graph_pool, name="full graph", weak_outputs=False
        )

    def _size(self, args: tuple[Any, ...]) -> int | None:
        if not self.sites:
            return None
        index, dim = self.sites[0]
        value = args[index]
        return int(value) if dim is None else int(value.shape[dim])

    def _padded(self, args: tuple[Any, ...]) -> tuple[int, int] | None:
        """(tokens, padded tokens) of a call that replays CUDA graphs, else None."""
        if self.config.cudagraph_mode is CUDAGraphMode.NONE:
            return None
        size = self._size(args)
        if size is None or not any(isinstance(a, Tensor) and a.is_cuda for a in args):
            return None
        padded = self.config.padded_size(size)
        return None if padded is None else (size, padded)

    def __call__(self, *args: Any) -> Any:
        sizes = self._padded(args)
        if sizes is None:
            return self.split(*args)
        size, padded = sizes
        padded_args = self._pad(list(args), size, padded)
        mode = self.config.cudagraph_mode
        full = mode is CUDAGraphMode.FULL or (
            mode is CUDAGraphMode.FULL_AND_PIECEWISE and self.backend.full_graph_capturable
        )
        if full:
            out = self.full_graph(padded, *padded_args)
        else:
            pool = self.backend.graph_pool
            pool.graphs_enabled = True
            try:
                out = self.split(*padded_args)
            finally:
                pool.graphs_enabled = False
        dims = {dim for _, dim in self.sites if dim is not None}
        return pytree.tree_map_only(Tensor, lambda t: _unpad(t, dims, size, padded), out)

    def _pad(self, args: list[Any], size: int, padded: int) -> list[Any]:
        buffers = self.static_inputs.setdefault(padded, {})
        for index, dim in self.sites:
            if dim is None:
                args[index] = padded
                continue
            value: Tensor = args[index]
            buffer = buffers.get(index)
            if buffer is None:
                shape = list(value.shape)
                shape[dim] = padded
                buffer = torch.zeros(shape, dtype=value.dtype, device=value.device)
                buffers[index] = buffer
            buffer.narrow(dim, 0, size).copy_(value)
            args[index] = buffer
        return args


def _unpad(t: Tensor, dims: set[int], size: int, padded: int) -> Tensor:
    for dim in sorted(dims):
        if t.dim() > dim and t.shape[dim] == padded:
            t = t.narrow(dim, 0, size)
    return t


class DynamoPiecewiseBackend:
    """A Dynamo backend compiling each graph piecewise with `config` (see the module
    docstring). Its graphs share one CUDA-graph memory pool."""

    def __init__(self, config: CompilationConfig) -> None:
        self.config = config
        self.backend = PiecewiseBackend(config)

    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> GraphRunner:
        split = self.backend.split_and_compile(gm, first_symbol=True)
        return GraphRunner(self.backend, gm, split)
