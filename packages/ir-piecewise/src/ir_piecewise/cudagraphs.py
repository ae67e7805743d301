"""Capture a callable as one CUDA graph per size and replay it.

All graphs of one compiled model share a memory pool (`GraphPool`). Outputs of every piece but
the last are kept only as weak references (tensors that do not own their memory), so the pool
memory behind them can be reused by captures of other sizes; a replay returns those same
tensors, valid until the next replay, as the eager forward would have used them.
"""

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch.utils import _pytree as pytree

from .counters import counters

logger = logging.getLogger("ir_piecewise")


def weak_ref(tensor: Tensor) -> Tensor:
    """A tensor viewing `tensor`'s memory without keeping it alive."""
    storage = tensor.untyped_storage()
    weak_storage = torch._C._construct_storage_from_data_pointer(
        storage.data_ptr(), tensor.device, storage.nbytes()
    )
    return torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(
        weak_storage, tensor.storage_offset(), tensor.shape, tensor.stride()
    )


@dataclass
class GraphPool:
    """The memory pool shared by one model's graphs, and the addresses of captured outputs
    (inputs at those addresses need no strong reference: the pool keeps them)."""

    handle: Any = None
    output_ptrs: set[int] = field(default_factory=set)
    #: set by `PiecewiseCompiled` around padded calls: pieces capture only then.
    graphs_enabled: bool = False

    def get(self) -> Any:
        if self.handle is None:
            self.handle = torch.cuda.graph_pool_handle()
        return self.handle


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: list[Any]
    outputs: Any


class CUDAGraphRunner:
    """Runs `fn` (flat positional arguments) as one CUDA graph per size.

    The first call of a size warms `fn` up (on copies of the inputs it mutates), captures it and
    replays it. Later calls copy any input whose address differs from the captured one into the
    captured buffer (and back afterwards if `fn` mutates it), then replay.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        pool: GraphPool,
        *,
        name: str,
        weak_outputs: bool,
        mutated_inputs: Collection[int] | None = None,
    ) -> None:
        self.fn = fn
        self.pool = pool
        self.name = name
        self.weak_outputs = weak_outputs
        #: None: any input may be mutated (copy every relocated input back).
        self.mutated_inputs = None if mutated_inputs is None else frozenset(mutated_inputs)
        self.captured: dict[int, _Captured] = {}

    def _mutated(self, index: int) -> bool:
        return self.mutated_inputs is None or index in self.mutated_inputs

    def __call__(self, size: int, *args: Any) -> Any:
        entry = self.captured.get(size)
        if entry is None:
            return self._capture(size, args)
        relocated = []
        for i, (static, live) in enumerate(zip(entry.inputs, args, strict=True)):
            if isinstance(live, Tensor) and live.data_ptr() != static.data_ptr():
                self._check_relocatable(size, i, static, live)
                static.copy_(live)
                relocated.append(i)
        entry.graph.replay()
        for i in relocated:
            if self._mutated(i):
                args[i].copy_(entry.inputs[i])
        return entry.outputs

    def _check_relocatable(self, size: int, index: int, static: Tensor, live: Tensor) -> None:
        """A relocated input is copied into the captured one: it must have its shape and dtype
        (copy_ would broadcast a smaller tensor silently, and the copy back would then fail)."""
        if live.shape != static.shape or live.dtype != static.dtype:
            raise ValueError(
                f"{self.name}: argument {index} has shape {tuple(live.shape)} and dtype "
                f"{live.dtype}, but the CUDA graph of size {size} was captured with shape "
                f"{tuple(static.shape)} and dtype {static.dtype}; pass tensors of the captured "
                "shapes at every size (for example one KV cache for all calls)"
            )

    def _capture(self, size: int, args: tuple[Any, ...]) -> Any:
        logger.info("ir_piecewise: capturing %s for size %d", self.name, size)
        warmup = [
            a.clone() if isinstance(a, Tensor) and self._mutated(i) else a
            for i, a in enumerate(args)
        ]
        self.fn(*warmup)
        del warmup
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool.get()):
            outputs = self.fn(*args)
        inputs = [
            weak_ref(a)
            if isinstance(a, Tensor) and a.untyped_storage().data_ptr() in self.pool.output_ptrs
            else a
            for a in args
        ]
        out_tensors = [t for t in pytree.tree_leaves(outputs) if isinstance(t, Tensor)]
        self.pool.output_ptrs.update(t.untyped_storage().data_ptr() for t in out_tensors)
        kept = pytree.tree_map_only(Tensor, weak_ref, outputs) if self.weak_outputs else outputs
        self.captured[size] = _Captured(graph, inputs, kept)
        counters.num_cudagraph_captured += 1
        graph.replay()
        return outputs
