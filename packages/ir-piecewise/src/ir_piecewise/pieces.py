"""`CompiledPiece`: one piece between splitting ops, compiled per range and per size."""

import dataclasses
import hashlib
import logging
from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch import Tensor, fx

import ir_passes
from ir_passes.report import new_report

from . import autotuned
from .cache import CompileCache
from .compilers import PieceRequest
from .config import CompilationConfig
from .counters import counters
from .cudagraphs import CUDAGraphRunner, GraphPool

logger = logging.getLogger("ir_piecewise")
SizeLocator = tuple[int, int | None]  # (argument index, dim) ; dim None: the argument is the size


def passes_for(
    config: CompilationConfig, tokens: tuple[int, int | None] | None
) -> ir_passes.PassConfig:
    """The pass configuration of a piece compiled for the token counts ``tokens = (first,
    last)`` (a compile size is the range of one size; None: a piece that does not depend on
    the token count): the configuration's, for that range, so a fusion with a token threshold
    runs only in the ranges it covers whole."""
    return config.passes if tokens is None else config.passes.for_range(*tokens)


def placeholder_values(gm: fx.GraphModule) -> list[Any]:
    """The example values (fake tensors, SymInts) of `gm`'s inputs."""
    return [n.meta.get("example_value") for n in gm.graph.nodes if n.op == "placeholder"]


def locate_size(values: list[Any], symbol: sympy.Symbol | None) -> SizeLocator | None:
    """Where the token count can be read from the inputs, or None if no input depends on it."""
    if symbol is None:
        return None
    for i, value in enumerate(values):
        if isinstance(value, torch.SymInt) and value.node.expr == symbol:
            return (i, None)
    for i, value in enumerate(values):
        if isinstance(value, Tensor):
            for dim, size in enumerate(value.shape):
                if isinstance(size, torch.SymInt) and size.node.expr == symbol:
                    return (i, dim)
    return None


def mutated_inputs(gm: fx.GraphModule) -> set[int]:
    """Indices of inputs that `gm` may write to: arguments of in-place methods, of ops with
    mutable arguments and of IR ``maybe_inplace`` calls (their kernels may reuse the buffers)."""
    placeholders = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    written: set[int] = set()
    for node in gm.graph.nodes:
        targets: list[Any] = []
        if node.op == "call_method" and str(node.target).endswith("_"):
            targets = [node.args[0]]
        elif node.op == "call_function" and isinstance(
            node.target, torch._ops.OpOverload | torch._ops.OpOverloadPacket
        ):
            overload: Any = node.target
            if isinstance(overload, torch._ops.OpOverloadPacket):
                overload = getattr(overload, "default", None)
            if overload is None:
                continue
            schema: torch.FunctionSchema = overload._schema
            if overload._overloadname == "maybe_inplace":
                targets.extend(node.args)
            for j, argument in enumerate(schema.arguments):
                if argument.alias_info is not None and argument.alias_info.is_write:
                    targets.append(
                        node.args[j] if j < len(node.args) else node.kwargs.get(argument.name)
                    )
        written.update(placeholders[t] for t in targets if t in placeholders)
    return written


def _canonical(value: Any, index: dict[fx.Node, int]) -> str:
    if isinstance(value, fx.Node):
        return f"%{index[value]}"
    if isinstance(value, tuple | list):
        inner = ", ".join(_canonical(v, index) for v in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_canonical(v, index)}" for k, v in value.items()) + "}"
    return repr(value)


def graph_structure(gm: fx.GraphModule) -> str:
    """`gm`'s graph with its node names replaced by positions, so that pieces which differ only
    in naming (the same decoder layer traced at different depths) describe the same code.
    Constants fetched with ``get_attr`` are described by content, since they are part of it."""
    index = {node: i for i, node in enumerate(gm.graph.nodes)}
    lines = []
    for node in gm.graph.nodes:
        target = node.target if isinstance(node.target, str) else _callable_name(node.target)
        if node.op == "get_attr":
            value = _fetch_attr(gm, node.target)
            target = (
                hashlib.sha256(_tensor_bytes(value)).hexdigest()
                if isinstance(value, Tensor)
                else f"{node.target}:{value!r}"
            )
        elif node.op == "placeholder":
            target = ""
        args = _canonical(node.args, index)
        kwargs = _canonical(node.kwargs, index)
        lines.append(f"{node.op} {target} {args} {kwargs}")
    return "\n".join(lines)


def _tensor_bytes(value: Tensor) -> bytes:
    # a fresh copy so the storage holds exactly this tensor's elements
    exact = value.detach().cpu().contiguous().clone().view(-1).view(torch.uint8)
    return bytes(exact.untyped_storage()) + repr((value.dtype, tuple(value.shape))).encode()


def _callable_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return str(target)
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', repr(target))}"


def _fetch_attr(gm: fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _graph_digest(gm: fx.GraphModule, values: list[Any]) -> str:
    described = []
    for value in values:
        if isinstance(value, Tensor):
            described.append(f"T{tuple(map(str, value.shape))}{value.stride()}{value.dtype}")
        else:
            described.append(f"{type(value).__name__}:{value}")
    text = graph_structure(gm) + "\n" + repr(described)
    return hashlib.sha256(text.encode()).hexdigest()


class NotCached(LookupError):
    """A piece of a loaded trace is not in the compile cache."""


class CompiledPiece:
    """Runs one piece: the exact-size artifact if there is one, else its range's; optionally
    replayed as a CUDA graph at capture sizes."""

    def __init__(
        self,
        gm: fx.GraphModule,
        *,
        name: str,
        config: CompilationConfig,
        symbol: sympy.Symbol | None,
        global_key: str,
        cache: CompileCache | None,
        graph_pool: GraphPool | None,
        is_last: bool,
        artifacts: dict[str, Callable[..., Any]] | None = None,
        cached_only: bool = False,
    ) -> None:
        self.gm = gm
        self.name = name
        self.config = config
        self.cache = cache
        self.compiler = config.compiler()
        # compiled code by key, shared by the pieces of one graph: identical layers compile once
        self.artifacts = artifacts if artifacts is not None else {}
        values = placeholder_values(gm)
        output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        # split_module returns a lone value unwrapped; loaded artifacts always return a list
        self.single_output = not isinstance(output.args[0], tuple | list)
        self.size_at = locate_size(values, symbol)
        self.digest = hashlib.sha256((global_key + _graph_digest(gm, values)).encode()).hexdigest()
        self.by_size: dict[int, Callable[..., Any]] = {}
        self.by_range: list[tuple[int, int | None, Callable[..., Any]]] = []
        # only these use the graph's example values; sizes compiled later use real inputs
        if self.size_at is None:
            static = self._compile(
                "static", values, "from_graph", tokens=None, cached_only=cached_only
            )
            self.by_range.append((1, None, static))
        else:
            for first, last in config.ranges:
                label = f"range-{first}-{last or 'inf'}"
                compiled = self._compile(
                    label, values, "from_graph", tokens=(first, last), cached_only=cached_only
                )
                self.by_range.append((first, last, compiled))
        self.cudagraphs = (
            CUDAGraphRunner(
                self._run_compiled,
                graph_pool,
                name=name,
                weak_outputs=not is_last,
                mutated_inputs=mutated_inputs(gm),
            )
            if graph_pool is not None
            else None
        )

    def _compile(
        self,
        label: str,
        example_inputs: list[Any],
        dynamic: str,
        *,
        tokens: tuple[int, int | None] | None,
        cached_only: bool = False,
    ) -> Callable[..., Any]:
        """The piece compiled for `label` by the configuration's piece compiler: the token
        counts `tokens` (None: a piece that does not depend on them), whose pass
        configuration is the range's (`passes_for`)."""
        compiler = self.compiler
        passes = passes_for(self.config, tokens)
        autograd = _records_autograd(example_inputs)
        request = PieceRequest(
            self.gm, example_inputs, dynamic, tokens, passes, self.config, autograd, False
        )
        if not compiler.compiles:
            return compiler.compile(request)
        counters.fusions_enabled[label] = tuple(
            switch for switch in ir_passes.FUSION_SWITCHES if passes.fusion_applies(switch)
        )
        # a piece that records autograd is another artifact than its inference form
        form = ":autograd" if autograd else ""
        key = hashlib.sha256(f"{self.digest}:{label}{form}".encode()).hexdigest()
        shared = self.artifacts.get(key)
        if shared is not None:
            counters.num_artifacts_reused += 1
            return shared
        compiled = self._load_or_compile(key, label, request, cached_only)
        self.artifacts[key] = compiled
        return compiled

    def _load_or_compile(
        self, key: str, label: str, request: PieceRequest, cached_only: bool
    ) -> Callable[..., Any]:
        compiler = self.compiler
        if self.cache is not None:
            found = self.cache.load_with_metadata(key, compiler.load)
            if found is not None:
                counters.num_cache_hits += 1
                logger.debug("ir_piecewise: %s %s loaded from the cache", self.name, label)
                autotuned.restore(label, self.name, found[1])
                return found[0]  # type: ignore[no-any-return]
            counters.num_cache_misses += 1
        if cached_only:
            raise NotCached(f"{self.name} {label}")
        logger.info("ir_piecewise: compiling %s for %s with %s", self.name, label, compiler.name)
        store_in = self.cache if self.cache and compiler.saveable(self.cache.root) else None
        request = dataclasses.replace(request, will_save=store_in is not None)
        with ir_passes.collect_reports() as reports:
            new_report()  # this compilation's, whichever of the passes runs first
            compiled = compiler.compile(request)
        counters.num_backend_compilations += 1
        applied = counters.fusions_applied.setdefault(label, {})
        if not any(report.passes_ran for report in reports):
            unreported = counters.fusions_unreported
            unreported[label] = unreported.get(label, 0) + 1
            logger.debug(
                "ir_piecewise: %s %s compiled without the IR passes running (served by "
                "Inductor's FX graph cache?): its fusions are not counted",
                self.name,
                label,
            )
        for report in reports:
            for pattern, count in report.fusions.items():
                applied[pattern] = applied.get(pattern, 0) + count
        decisions = autotuned.decisions_of(reports)
        autotuned.record(label, self.name, decisions)
        if store_in is not None:
            try:
                store_in.store(
                    key,
                    lambda path: compiler.save(compiled, path),
                    autotuned.metadata_of(decisions),
                )
            except Exception as exc:  # an unsaveable graph still runs; it is just not cached
                logger.warning("ir_piecewise: could not cache %s %s: %s", self.name, label, exc)
        return compiled

    def size_of(self, args: tuple[Any, ...]) -> int | None:
        """The token count of a call, or None if this piece does not depend on it."""
        if self.size_at is None:
            return None
        index, dim = self.size_at
        value = args[index]
        return int(value) if dim is None else int(value.shape[dim])

    def _run_compiled(self, *args: Any) -> Any:
        return self._run_sized(self.size_of(args), args)

    def _run_sized(self, size: int | None, args: tuple[Any, ...]) -> Any:
        out = self._select(size, args)(*args)
        if self.single_output and isinstance(out, tuple | list):
            return out[0]
        return out

    def _select(self, size: int | None, args: tuple[Any, ...]) -> Callable[..., Any]:
        if size is None or size == 0:
            # no tokens (an idle step): the first range's code, which the size-oblivious
            # trace made for every size
            return self.by_range[0][2]
        if size in self.config.compile_sizes:
            compiled = self.by_size.get(size)
            if compiled is None:
                compiled = self._compile(
                    f"size-{size}", list(args), "from_example_inputs", tokens=(size, size)
                )
                self.by_size[size] = compiled
            return compiled
        for first, last, compiled in self.by_range:
            if first <= size and (last is None or size <= last):
                return compiled
        raise AssertionError(f"no compile range holds size {size}")  # ranges cover 1..inf

    def __call__(self, *args: Any) -> Any:
        size = self.size_of(args)
        if (
            self.cudagraphs is not None
            and self.cudagraphs.pool.graphs_enabled
            and size is not None
            and size in (self.config.cudagraph_capture_sizes or ())
            and not torch.cuda.is_current_stream_capturing()
            and any(isinstance(a, Tensor) and a.is_cuda for a in args)
        ):
            return self.cudagraphs(size, *args)
        return self._run_sized(size, args)


def _records_autograd(example_inputs: list[Any]) -> bool:
    """Whether a piece compiled now records autograd: grad enabled, an input requiring grad."""
    return torch.is_grad_enabled() and any(
        isinstance(value, Tensor) and value.requires_grad for value in example_inputs
    )
