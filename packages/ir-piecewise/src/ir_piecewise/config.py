"""`CompilationConfig` and `CUDAGraphMode`: what piecewise compilation compiles and captures."""

import enum
import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from ir_passes import FUSIONS, PassConfig
from ir_passes.dynamo import checked_inductor_options

from .cache import DEFAULT_LOCK_TIMEOUT, CompileCache
from .compilers import PieceCompiler, installed_compilers, piece_compiler

SplittingOp = str | torch._ops.OpOverload | torch._ops.OpOverloadPacket
DEFAULT_MAX_CAPTURE_SIZE = 256


class CUDAGraphMode(enum.Enum):
    """How compiled code is replayed as CUDA graphs.

    NONE: no CUDA graphs. PIECEWISE: one graph per piece between splitting ops and per capture
    size; splitting ops run eagerly between replays. FULL: one graph of the whole forward per
    capture size; every splitting op must be capturable. FULL_AND_PIECEWISE: FULL where every
    splitting op is capturable, PIECEWISE otherwise.
    """

    NONE = "none"
    PIECEWISE = "piecewise"
    FULL = "full"
    FULL_AND_PIECEWISE = "full_and_piecewise"


def op_name(op: SplittingOp) -> str:
    """The qualified name ``namespace::name`` of an op overload, packet or name.

    Names may be written ``ns::name``, ``ns::name.overload``, ``ns.name`` or
    ``ns.name.overload``; overloads are ignored: a splitting op splits at every overload.
    """
    if isinstance(op, torch._ops.OpOverload):
        return op._schema.name
    if isinstance(op, torch._ops.OpOverloadPacket):
        return op._qualified_op_name
    if not isinstance(op, str) or not op:
        raise ValueError(
            f"splitting_ops: got {op!r}; expected an op overload, a packet or a name such as "
            "'ir_stack::attention'"
        )
    namespace, sep, rest = op.partition("::")
    if not sep:
        namespace, _, rest = op.partition(".")
    name = rest.split(".")[0]
    if not namespace or not name:
        raise ValueError(f"splitting_ops: got {op!r}; expected 'namespace::name'")
    return f"{namespace}::{name}"


def _positive_sizes(name: str, values: Iterable[int]) -> tuple[int, ...]:
    sizes = tuple(values)
    for value in sizes:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: got {value!r} in {sizes!r}; expected positive integers")
    return tuple(sorted(set(sizes)))


def default_capture_sizes(max_size: int) -> tuple[int, ...]:
    """1, 2, 4, 8, then every multiple of 16 up to `max_size` (and `max_size` itself)."""
    sizes = {s for s in (1, 2, 4, 8) if s <= max_size}
    sizes.update(range(16, max_size + 1, 16))
    sizes.add(max_size)
    return tuple(sorted(sizes))


@dataclass(frozen=True)
class CompilationConfig:
    """Everything `ir_piecewise.compile` needs.

    Attributes:
        splitting_ops: ops the graph is split at; they run eagerly (attention, cache updates).
        compile_sizes: token counts compiled with static shapes, used for exactly that size.
        compile_ranges_endpoints: ``e1 < e2 < ...`` cut the token counts into the ranges
            ``[1, e1], [e1 + 1, e2], ..., [ek + 1, inf)``, each compiled once with symbolic
            shapes. The token thresholds of the fusions that are on join them
            (`range_endpoints`), so each such fusion has a lower range it runs in.
        backend: the piece compiler, by name: ``"inductor"`` (with the IR passes),
            ``"eager"`` (pieces run as traced) or one an ``ir.piece_compilers`` entry point
            installs (`ir_piecewise.compilers`); its identity and version enter every compile
            cache key. An unknown name raises `ValueError` listing the installed ones.
        inductor_compile_config: Inductor options (``torch._inductor.config`` names, as
            ``torch.compile(options=...)`` takes them) for the pieces the ``inductor``
            compiler compiles; an unknown name raises `ValueError`. The IR passes' own hooks
            cannot be set here.
        max_autotune_compile_sizes: compile the `compile_sizes` with Inductor's max-autotune
            and coordinate-descent tuning (longer compilations, kernels tuned for exactly that
            token count), as the seeds do for the sizes they specialize.
        cudagraph_mode: see `CUDAGraphMode`; CUDA graphs are used only for CUDA tensors.
        cudagraph_capture_sizes: token counts captured; a call is padded up to the next one.
            Default: 1, 2, 4, 8 and multiples of 16 up to `max_capture_size`.
        max_capture_size: largest captured size (default: the largest capture size, or 256);
            larger calls run without CUDA graphs.
        cache_dir: compile cache directory; None means the user cache directory of
            ``ir-piecewise`` (platformdirs).
        cache: False turns the on-disk compile cache off.
        cache_lock_timeout: seconds a write to the compile cache waits for its lock (other
            processes hold it only to rename or remove a file). Where another process holds
            it longer, this process warns once and stores nothing more in that directory;
            it still loads from it.
        check_guards: keep Dynamo's guards and raise `RecompileError` on any call that would
            need a recompile, instead of dropping the guards after the first trace (and
            tracing again, without raising, where a call's static sizes, dtypes or plain
            values differ from the trace's).
        passes: the ir-passes configuration applied to every compiled piece, per compile
            range: a range ``[first, last]`` (a compile size: ``[n, n]``) compiles with
            ``passes.for_range(first, last)``, so a fusion with a token threshold runs only in
            the ranges it covers whole: the ranges up to its threshold, which is an endpoint
            (`range_endpoints`); ``counters.fusions_enabled`` / ``fusions_applied`` say which
            range got which.
    """

    splitting_ops: tuple[SplittingOp, ...] = ()
    compile_sizes: tuple[int, ...] = ()
    compile_ranges_endpoints: tuple[int, ...] = ()
    backend: str = "inductor"
    inductor_compile_config: Mapping[str, Any] = field(default_factory=dict, hash=False)
    max_autotune_compile_sizes: bool = False
    cudagraph_mode: CUDAGraphMode = CUDAGraphMode.NONE
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    max_capture_size: int | None = None
    cache_dir: str | Path | None = None
    cache: bool = True
    cache_lock_timeout: float = DEFAULT_LOCK_TIMEOUT
    check_guards: bool = False
    passes: PassConfig = field(default_factory=PassConfig)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "splitting_ops", tuple(self.splitting_ops))
        for op in self.splitting_ops:
            op_name(op)
        set_(self, "compile_sizes", _positive_sizes("compile_sizes", self.compile_sizes))
        endpoints = tuple(self.compile_ranges_endpoints)
        _positive_sizes("compile_ranges_endpoints", endpoints)
        if list(endpoints) != sorted(set(endpoints)):
            raise ValueError(
                f"compile_ranges_endpoints: got {endpoints!r}; expected strictly increasing sizes"
            )
        set_(self, "compile_ranges_endpoints", endpoints)
        if not isinstance(self.backend, str):
            raise ValueError(
                f"backend: got {self.backend!r}; expected the name of a piece compiler "
                f"({', '.join(installed_compilers())})"
            )
        piece_compiler(self.backend, origin="backend")
        if not isinstance(self.inductor_compile_config, Mapping):
            raise ValueError(
                f"inductor_compile_config: got {self.inductor_compile_config!r}; expected a "
                "mapping of Inductor option names to values"
            )
        set_(
            self,
            "inductor_compile_config",
            MappingProxyType(
                checked_inductor_options(self.inductor_compile_config, "inductor_compile_config")
            ),
        )
        if not isinstance(self.max_autotune_compile_sizes, bool):
            raise ValueError(
                f"max_autotune_compile_sizes: got {self.max_autotune_compile_sizes!r}; expected "
                "a bool"
            )
        if not isinstance(self.cudagraph_mode, CUDAGraphMode):
            raise ValueError(
                f"cudagraph_mode: got {self.cudagraph_mode!r}; expected one of "
                f"{[m.name for m in CUDAGraphMode]}"
            )
        if self.max_capture_size is not None:
            _positive_sizes("max_capture_size", [self.max_capture_size])
        if self.cudagraph_capture_sizes is None:
            sizes = default_capture_sizes(self.max_capture_size or DEFAULT_MAX_CAPTURE_SIZE)
        else:
            sizes = _positive_sizes("cudagraph_capture_sizes", self.cudagraph_capture_sizes)
            if not sizes:
                raise ValueError("cudagraph_capture_sizes: got (); expected at least one size")
        if self.max_capture_size is not None:
            sizes = tuple(s for s in sizes if s <= self.max_capture_size)
        set_(self, "cudagraph_capture_sizes", sizes)
        set_(self, "max_capture_size", max(sizes) if sizes else 0)
        timeout = self.cache_lock_timeout
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 <= timeout < math.inf
        ):
            raise ValueError(
                f"cache_lock_timeout: got {timeout!r}; expected a finite number of seconds >= 0"
            )
        if not isinstance(self.passes, PassConfig):
            raise ValueError(f"passes: got {self.passes!r}; expected an ir_passes.PassConfig")

    @property
    def splitting_op_names(self) -> frozenset[str]:
        """Qualified names of the splitting ops."""
        return frozenset(op_name(op) for op in self.splitting_ops)

    @property
    def fusion_endpoints(self) -> tuple[int, ...]:
        """The token thresholds of the fusions that `passes` turns on (those with one), in
        increasing order: endpoints of the compile ranges, as the seeds split the ranges so
        that a fusion profitable only for few tokens runs in the lower compiled range (without
        them the default single range ``[1, inf)`` would never run a fusion of threshold
        256). A lower-bound threshold ``m`` (sequence parallelism's ``sp_min_token_num``)
        ends a range at ``m - 1``, so the next one starts at ``m``."""
        passes = self.passes
        limits: set[int] = set()
        for f in FUSIONS:
            limit = passes.max_tokens(f.switch)
            if limit is None or not passes.fusion_on(f.switch):
                continue
            end = limit - 1 if f.lower_bound else limit
            if end >= 1:
                limits.add(end)
        return tuple(sorted(limits))

    @property
    def range_endpoints(self) -> tuple[int, ...]:
        """The endpoints of the compile ranges: `compile_ranges_endpoints` and
        `fusion_endpoints` together, in increasing order."""
        return tuple(sorted({*self.compile_ranges_endpoints, *self.fusion_endpoints}))

    @property
    def ranges(self) -> tuple[tuple[int, int | None], ...]:
        """The compile ranges as ``(first, last)`` pairs; ``last`` None means unbounded. They
        end at `range_endpoints`: the configured endpoints and the fusions' thresholds."""
        bounds: list[tuple[int, int | None]] = []
        first = 1
        for end in self.range_endpoints:
            bounds.append((first, end))
            first = end + 1
        bounds.append((first, None))
        return tuple(bounds)

    def padded_size(self, size: int) -> int | None:
        """The capture size a call of `size` tokens is padded to, or None above the largest."""
        assert self.cudagraph_capture_sizes is not None
        return next((s for s in self.cudagraph_capture_sizes if s >= size), None)

    def compiler(self) -> PieceCompiler:
        """The piece compiler `backend` names."""
        return piece_compiler(self.backend, origin="backend")

    def compile_cache(self) -> CompileCache:
        """The compile cache this configuration names (whether or not `cache` is on)."""
        return CompileCache(self.resolved_cache_dir(), lock_timeout=self.cache_lock_timeout)

    def resolved_cache_dir(self) -> Path:
        """Where compiled artifacts are stored."""
        if self.cache_dir is not None:
            return Path(self.cache_dir)
        from platformdirs import user_cache_dir

        return Path(user_cache_dir("ir-piecewise")) / f"torch-{torch.__version__}"

    def key(self) -> str:
        """A stable digest of everything that changes the compiled code: the splitting, the
        sizes and ranges, the piece compiler (name, identity and version, its options) and the
        passes."""
        text = repr(
            (
                sorted(self.splitting_op_names),
                self.compile_sizes,
                self.compile_ranges_endpoints,
                self.backend,
                self.compiler().identity(),
                self.compiler().options_key(self),
                self.passes.key(),
            )
        )
        return hashlib.sha256(text.encode()).hexdigest()
