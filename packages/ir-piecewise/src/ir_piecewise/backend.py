"""`PiecewiseBackend`: the Dynamo backend that splits a traced graph and compiles its pieces."""

import functools
import hashlib
import importlib
import logging
from pathlib import Path
from typing import Any

import sympy
import torch
from torch import Tensor, fx

import ir_passes
from ir_passes.fingerprint import code_fingerprint
from ir_passes.functionalize import check_donations

from .config import CompilationConfig, CUDAGraphMode
from .counters import counters
from .cudagraphs import GraphPool
from .pieces import CompiledPiece, placeholder_values
from .serialized import PiecewiseGraph
from .split import split_graph

logger = logging.getLogger("ir_piecewise")


class UnexpectedRetrace(RuntimeError):
    """Dynamo traced again after the first call (its caches were reset): the dynamic dims were
    not marked for this trace, so `PiecewiseCompiled` traces once more with them marked."""


def token_symbol(gm: fx.GraphModule, *, first: bool = False) -> sympy.Symbol | None:
    """The one symbol of the graph's dynamic dimension, or None for a static graph. Only the
    inputs' sizes count: Dynamo also lifts a symbolic stride (of a view input, such as rows
    sliced from a wider buffer) as an input of its own, which is no dimension. With `first`,
    a graph of several takes the first in input order (the token count of a graph Dynamo made
    dynamic by itself is the leading dimension of its first dynamic input); otherwise several
    raise `ValueError`."""
    symbols: dict[sympy.Symbol, None] = {}
    for value in placeholder_values(gm):
        if isinstance(value, Tensor):
            for size in value.shape:
                if isinstance(size, torch.SymInt):
                    symbols.update(dict.fromkeys(sorted(size.node.expr.free_symbols, key=str)))
    if len(symbols) > 1 and first:
        return next(iter(symbols))
    if len(symbols) > 1:
        raise ValueError(
            "dynamic_arg_dims: the traced graph has several dynamic sizes "
            f"{sorted(map(str, symbols))}; expected one token dimension (mark only dims of "
            "the same size dynamic; where no op relates two of them, say that they are "
            "equal: torch._check(a.shape[0] == b.shape[0]))"
        )
    return next(iter(symbols), None)


#: the modules of this package, whose code every key covers (how pieces are compiled)
_MODULES = tuple(
    f"{__package__}.{path.stem}"
    for path in sorted(Path(__file__).parent.glob("*.py"))
    if path.stem != "__init__"
)


@functools.cache
def _own_fingerprint() -> str:
    return code_fingerprint(importlib.import_module(name) for name in _MODULES)


def global_key(config: CompilationConfig) -> str:
    """What every cache key shares: the configuration, the code of this package and
    `ir_passes.selection_key` (package versions, the IR selection state, the code of the
    passes, ops and implementations, and the world size and rank: each rank of a distributed
    model keeps its own entries in a shared cache directory)."""
    text = ":".join((config.key(), _own_fingerprint(), ir_passes.selection_key(config.passes)))
    return hashlib.sha256(text.encode()).hexdigest()


class PiecewiseBackend:
    """Called by Dynamo with each traced graph: splits it and replaces every non-splitting
    piece with a `CompiledPiece`."""

    def __init__(self, config: CompilationConfig) -> None:
        self.config = config
        self.graph_pool = GraphPool()
        #: True when the whole forward may be captured (every splitting op is capturable).
        self.full_graph_capturable = True
        #: set by `PiecewiseCompiled` while it traces with the dynamic dims marked.
        self.expecting_trace = False

    def __call__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> "PiecewiseGraph":
        if not self.expecting_trace:
            raise UnexpectedRetrace("traced again after the first call")
        return PiecewiseGraph(gm, self.split_and_compile(gm))

    def split_and_compile(
        self, gm: fx.GraphModule, *, cached_only: bool = False, first_symbol: bool = False
    ) -> fx.GraphModule:
        """`gm` split at the splitting ops, each compiled piece replaced by a `CompiledPiece`
        (loaded from the compile cache where it holds the piece; with `cached_only`, a piece
        the cache lacks raises `NotCached` instead of compiling). `first_symbol`: see
        `token_symbol`."""
        config = self.config
        counters.num_graphs_seen += 1
        # each piece's passes see only that piece: a donated value used again in a later piece
        # (or around a splitting op that runs eagerly) is refused here, on the whole graph
        check_donations(gm.graph)
        split, pieces = split_graph(gm, config.splitting_op_names)
        counters.num_piecewise_graphs_seen += len(pieces)
        compiled = [p for p in pieces if not p.is_splitting]
        counters.num_piecewise_capturable_graphs_seen += len(compiled)
        self.full_graph_capturable = all(p.capturable for p in pieces)
        mode = config.cudagraph_mode
        if mode is CUDAGraphMode.FULL and not self.full_graph_capturable:
            unsafe = sorted(
                str(n.target)
                for p in pieces
                if not p.capturable
                for n in p.module.graph.nodes
                if n.op == "call_function"
            )
            raise ValueError(
                f"cudagraph_mode: got FULL, but splitting ops {unsafe} are tagged "
                "cudagraph_unsafe; expected PIECEWISE or FULL_AND_PIECEWISE for this model"
            )
        piecewise_graphs = mode is CUDAGraphMode.PIECEWISE or (
            mode is CUDAGraphMode.FULL_AND_PIECEWISE and not self.full_graph_capturable
        )
        symbol = token_symbol(gm, first=first_symbol)
        key = global_key(config)
        cache = config.compile_cache() if config.cache else None
        logger.info(
            "ir_piecewise: graph split into %d pieces (%d compiled) with token size %s, "
            "compile ranges %s (fusion thresholds among their ends: %s)",
            len(pieces),
            len(compiled),
            symbol,
            config.ranges,
            config.fusion_endpoints,
        )
        last = compiled[-1].name if compiled else None
        artifacts: dict[str, Any] = {}
        for piece in compiled:
            runner = CompiledPiece(
                piece.module,
                name=piece.name,
                config=config,
                symbol=symbol,
                global_key=key,
                cache=cache,
                graph_pool=self.graph_pool if piecewise_graphs else None,
                is_last=piece.name == last,
                artifacts=artifacts,
                cached_only=cached_only,
            )
            delattr(split, piece.name)  # a submodule slot; the runner is a plain callable
            setattr(split, piece.name, runner)
        return split
