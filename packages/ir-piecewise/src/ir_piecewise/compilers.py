"""Piece compilers: what turns one piece of a split graph into code (`CompilationConfig.backend`).

A piece compiler is a `PieceCompiler`: its name, its identity and version (both enter every
compile cache key), how it compiles a piece for a compile range or size, and, where it can,
how it saves and loads what it compiled (the compile cache). ir-piecewise has two, declared
the way a platform package declares its own, in the entry point group
``ir.piece_compilers``::

    [project.entry-points."ir.piece_compilers"]
    my_compiler = "my_package.compiler:MyCompiler"

The entry point names a `PieceCompiler` instance, or a class or callable making one, named as
the entry point is. ``inductor`` compiles with ``torch._inductor.standalone_compile`` and the IR
passes (its options: `CompilationConfig.inductor_compile_config`, and max-autotune for the
compile sizes where `CompilationConfig.max_autotune_compile_sizes` says so); ``eager`` runs each
piece as traced. A compiler package that fails to import or supplies something else is logged
and skipped (`ir_dispatch.plugins`); an unknown name raises `ValueError` listing the installed
compilers.
"""

import abc
import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import fx

import ir_passes
from ir_dispatch.plugins import PluginLoad, PluginRegistry

if TYPE_CHECKING:
    from .config import CompilationConfig

logger = logging.getLogger("ir_piecewise")
GROUP = "ir.piece_compilers"
# whether this torch's standalone_compile can save a graph that records autograd (`aot=True`)
_AOT_SAVE = "aot" in inspect.signature(torch._inductor.standalone_compile).parameters
#: Inductor options that tune a compile size as the seeds do (`max_autotune_compile_sizes`)
AUTOTUNE_OPTIONS: Mapping[str, Any] = {"max_autotune": True, "coordinate_descent_tuning": True}


@dataclass(frozen=True)
class PieceRequest:
    """One piece to compile.

    Attributes:
        graph: the piece's graph.
        example_inputs: its inputs: fake tensors and SymInts for a compile range, real
            tensors for a compile size.
        dynamic_shapes: ``"from_graph"`` (a range: the token count stays symbolic) or
            ``"from_example_inputs"`` (a size: every shape static).
        tokens: the token counts ``(first, last)`` it serves (a size: ``(n, n)``; ``last``
            None: unbounded), or None for a piece that does not depend on them.
        passes: the IR pass configuration of those token counts.
        config: the whole configuration (compiler options among it).
        autograd: whether the piece records autograd (grad enabled, an input requiring grad).
        will_save: whether the compile cache will ask `PieceCompiler.save` for the result.
    """

    graph: fx.GraphModule
    example_inputs: list[Any]
    dynamic_shapes: str
    tokens: tuple[int, int | None] | None
    passes: ir_passes.PassConfig
    config: "CompilationConfig"
    autograd: bool
    will_save: bool

    @property
    def is_size(self) -> bool:
        """Whether the piece is compiled for one token count (a compile size)."""
        return self.tokens is not None and self.tokens[0] == self.tokens[1]


class PieceCompiler(abc.ABC):
    """Compiles pieces; subclass it, name it (`name`) and declare it as an entry point.

    `compile` is required. A compiler whose results can be saved overrides `saveable`,
    `save` and `load`; the compile cache then keys them by the piece, the configuration and
    `identity`. `options_key` names the configuration that changes its code beyond what
    ir-piecewise keys already (the IR pass configuration, the ops and their implementations).
    """

    #: the name `CompilationConfig.backend` takes
    name: str = ""
    #: False for a compiler that runs the piece as traced: nothing is counted or cached
    compiles: bool = True

    @property
    def version(self) -> str:
        """The version of the code that compiles: by default the version of the distribution
        providing the compiler's module, or "unknown"."""
        top = type(self).__module__.split(".")[0]
        for name in (top.replace("_", "-"), top):
            try:
                return version(name)
            except PackageNotFoundError:
                continue
        return "unknown"

    def identity(self) -> str:
        """Name, class and version: part of every compile cache key."""
        cls = type(self)
        return f"{self.name} {cls.__module__}.{cls.__qualname__} {self.version}"

    def options_key(self, config: "CompilationConfig") -> str:
        """What of `config` changes the compiled code besides what ir-piecewise keys."""
        return ""

    @abc.abstractmethod
    def compile(self, request: PieceRequest) -> Callable[..., Any]:
        """The piece compiled: a callable taking the piece's inputs, positionally."""

    def saveable(self, cache_root: Path) -> bool:
        """Whether what `compile` returns now can be saved into the cache at `cache_root`."""
        return False

    def save(self, compiled: Callable[..., Any], path: Path) -> None:
        """Write `compiled` to the file `path` (only called where `saveable`)."""
        raise NotImplementedError(f"piece compiler {self.name!r} saves nothing")

    def load(self, path: Path) -> Callable[..., Any]:
        """What `save` wrote to `path`, ready to run."""
        raise NotImplementedError(f"piece compiler {self.name!r} loads nothing")

    def __repr__(self) -> str:
        return f"<piece compiler {self.name!r}: {type(self).__qualname__}>"


class InductorCompiler(PieceCompiler):
    """``inductor``: ``torch._inductor.standalone_compile`` with the IR passes installed, the
    configuration's Inductor options, and max-autotune for the compile sizes on request."""

    name = "inductor"

    @property
    def version(self) -> str:
        return f"torch {torch.__version__}"

    def options_key(self, config: "CompilationConfig") -> str:
        return repr(
            (sorted(config.inductor_compile_config.items()), config.max_autotune_compile_sizes)
        )

    def compile(self, request: PieceRequest) -> Callable[..., Any]:
        config = request.config
        patches = dict(config.inductor_compile_config)
        if request.is_size and config.max_autotune_compile_sizes:
            patches.update(AUTOTUNE_OPTIONS)
        patches.update(ir_passes.inductor_options(request.passes))
        save: dict[str, Any] = {"aot": True} if request.autograd and _AOT_SAVE else {}
        dynamic, context = _symbols_of(request)
        with _unsaveable_expected(not request.will_save), context:
            artifact: Callable[..., Any] = torch._inductor.standalone_compile(
                request.graph,
                request.example_inputs,
                dynamic_shapes=dynamic,  # type: ignore[arg-type]
                options={"config_patches": patches},
                **save,
            )
        return artifact

    def saveable(self, cache_root: Path) -> bool:
        if inductor_graph_cache_on():
            return True
        _warn_pieces_not_stored(cache_root)
        return False

    def save(self, compiled: Callable[..., Any], path: Path) -> None:
        compiled.save(path=str(path), format="binary")  # type: ignore[attr-defined]

    def load(self, path: Path) -> Callable[..., Any]:
        from torch._inductor.standalone_compile import CompiledArtifact

        artifact: Callable[..., Any] = CompiledArtifact.load(path=str(path), format="binary")
        return artifact


def _symbols_of(
    request: PieceRequest,
) -> tuple[str, contextlib.AbstractContextManager[Any]]:
    """The ``dynamic_shapes`` argument for `request`'s piece and the context to compile it in.

    ``"from_graph"`` takes the shape environment from a fake tensor the graph returns; a piece
    that returns none (one that only writes a cache) would get a new, empty one, in which the
    symbols of its inputs have no ranges and Inductor fails on the first comparison of two of
    them. Such a piece compiles in a tracing context of its inputs' fake mode instead."""
    dynamic = request.dynamic_shapes
    if dynamic != "from_graph" or _returns_a_fake_tensor(request.graph):
        return dynamic, contextlib.nullcontext()
    fake_mode = torch._guards.detect_fake_mode(request.example_inputs)
    if fake_mode is None:
        return dynamic, contextlib.nullcontext()
    context = torch._guards.TracingContext(fake_mode)
    return "from_tracing_context", torch._guards.tracing(context)


def _returns_a_fake_tensor(graph: fx.GraphModule) -> bool:
    output = next(n for n in reversed(graph.graph.nodes) if n.op == "output")
    returned = output.args[0]
    values = [returned] if isinstance(returned, fx.Node) else returned
    fake = torch._subclasses.fake_tensor.FakeTensor
    return any(
        isinstance(v, fx.Node) and isinstance(v.meta.get("example_value"), fake) for v in values
    )


class EagerCompiler(PieceCompiler):
    """``eager``: each piece runs as traced (no passes, no compilation, nothing cached)."""

    name = "eager"
    compiles = False

    @property
    def version(self) -> str:
        return f"torch {torch.__version__}"

    def compile(self, request: PieceRequest) -> Callable[..., Any]:
        return request.graph


#: the built-in compilers, also declared as entry points of ir-piecewise
INDUCTOR = InductorCompiler()
EAGER = EagerCompiler()


def _accept(obj: object) -> PieceCompiler:
    if not isinstance(obj, PieceCompiler):
        raise TypeError(f"got {obj!r}, expected an ir_piecewise.compilers.PieceCompiler")
    if not isinstance(obj.name, str) or not obj.name:
        raise ValueError(f"{obj!r}: its name is {obj.name!r}, expected a non-empty str")
    return obj


COMPILERS: PluginRegistry[PieceCompiler] = PluginRegistry(
    GROUP,
    "piece compiler",
    accept=_accept,
    name_of=lambda c: c.name,
    builtins=lambda: (INDUCTOR, EAGER),
    builtin_source="built into ir-piecewise",
)


def piece_compiler(name: str, *, origin: str = "backend") -> PieceCompiler:
    """The installed piece compiler `name`; an unknown one raises `ValueError` naming `origin`
    and listing the installed compilers."""
    return COMPILERS.get(name, origin=origin)


def installed_compilers() -> list[str]:
    """The names of the installed piece compilers (``eager``, ``inductor`` and the entry
    points')."""
    return COMPILERS.names()


def compiler_loads() -> list[PluginLoad]:
    """What happened to each ``ir.piece_compilers`` entry point."""
    return COMPILERS.loads()


def inductor_graph_cache_on() -> bool:
    """Whether Inductor's FX graph cache is on: ``standalone_compile`` makes the artifact a
    piece is saved as from what that cache records, and has none without it."""
    config = torch._inductor.config
    return bool(config.fx_graph_cache) and not bool(getattr(config, "force_disable_caches", False))


@functools.cache
def _warn_pieces_not_stored(root: Path) -> None:
    """Once per cache directory: the pieces compiled while Inductor's graph cache is off are
    not stored."""
    logger.warning(
        "ir_piecewise: Inductor's FX graph cache is off (TORCHINDUCTOR_FX_GRAPH_CACHE=0 or "
        "force_disable_caches), and standalone_compile saves a piece only through it: pieces "
        "compiled now are not stored in the compile cache %s",
        root,
    )


@contextlib.contextmanager
def _unsaveable_expected(expected: bool) -> Iterator[None]:
    """Where no piece will be saved (`expected`), hold back ``standalone_compile``'s warning
    that it could not make an artifact to save (one a piece, with the graph cache off)."""
    if not expected:
        yield
        return
    standalone = logging.getLogger("torch._inductor.standalone_compile")
    level = standalone.level
    standalone.setLevel(logging.ERROR)
    try:
        yield
    finally:
        standalone.setLevel(level)
