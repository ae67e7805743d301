"""`compile`: trace once with a dynamic token dimension, then run the piecewise backend."""

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.fx.experimental import _config as fx_config
from torch.utils import _pytree as pytree

from ir_passes.inductor import refusals_unwrapped

from . import traces
from .backend import PiecewiseBackend, UnexpectedRetrace, global_key
from .cache import CompileCache
from .config import CompilationConfig, CUDAGraphMode
from .counters import counters
from .cudagraphs import CUDAGraphRunner
from .pieces import NotCached
from .serialized import PiecewiseGraph
from .signature import laid_out_for_two, static_signature

logger = logging.getLogger("ir_piecewise")
DynamicArgDims = Mapping[str, int | tuple[int, ...]]


class RecompileError(RuntimeError):
    """Raised in guard-check mode by a call that would have needed a recompile."""


class PiecewiseCompiled:
    """A function or module compiled piecewise; call it like the original.

    The first call traces (Dynamo, ``fullgraph=True``) with the dynamic dims marked; later calls
    skip guard evaluation (or, with ``check_guards``, raise `RecompileError` where a guard
    fails). Skipping guards is safe because every call's static signature
    (`ir_piecewise.signature`: the sizes of every dimension but the dynamic ones, layouts,
    dtypes, devices, plain values) is compared with the trace's: a call that differs (say, KV
    caches of another number of slots) runs a trace of its own, made on its first such call, as
    a recompile would. With the compile cache on, a module's trace is saved there too and a
    later process loads it instead of tracing (`ir_piecewise.traces` says when a saved trace is
    used). With CUDA graphs, a call of ``n <= max_capture_size`` tokens is padded to the next
    capture size, and outputs are sliced back; captured outputs are valid until the next call.
    Padding rows hold `pad_values` where given (say, -1 positions that a cache write skips),
    else what earlier calls left there (zeros at first).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        config: CompilationConfig,
        dynamic_arg_dims: DynamicArgDims | None,
        pad_values: Mapping[str, float] | None = None,
    ) -> None:
        self.fn = fn
        self.config = config
        self.signature = inspect.signature(fn.forward if isinstance(fn, nn.Module) else fn)
        self.dynamic_arg_dims = _check_dims(self.signature, dynamic_arg_dims)
        self.pad_values = dict(pad_values or {})
        for name in self.pad_values:
            if name not in self.signature.parameters:
                raise ValueError(
                    f"pad_values: unknown argument {name!r}; expected one of "
                    f"{list(self.signature.parameters)}"
                )
        self.backend = PiecewiseBackend(config)
        options: dict[str, Any] = {}
        if not config.check_guards:
            options["guard_filter_fn"] = lambda guards: [False for _ in guards]
        self.compiled = torch.compile(
            fn, backend=self.backend, fullgraph=True, dynamic=False, options=options
        )
        #: what runs a traced call: the Dynamo-compiled function, or a saved or saveable trace
        self._forward: Callable[..., Any] = self.compiled
        self.trace_cache = self._trace_cache()
        self._options = options
        self.traced = False
        self.static_inputs: dict[int, dict[str, Tensor]] = {}
        self.full_graph = CUDAGraphRunner(
            self._run_flat, self.backend.graph_pool, name="full graph", weak_outputs=False
        )
        self._treespec: Any = None
        #: the static signature this object's trace is for (set by the first call), and the
        #: compiled functions of the other signatures called since
        self._signature: tuple[Any, ...] | None = None
        self._other_signatures: dict[tuple[Any, ...], PiecewiseCompiled] = {}

    def _dynamic(self, bound: inspect.BoundArguments) -> list[tuple[str, int]]:
        dims: list[tuple[str, int]] = []
        if self.dynamic_arg_dims is None:
            for name, value in bound.arguments.items():
                if isinstance(value, Tensor) and value.dim() > 0:
                    dims.append((name, 0))
            return dims
        for name, spec in self.dynamic_arg_dims.items():
            value = bound.arguments.get(name)
            if not isinstance(value, Tensor):
                raise ValueError(
                    f"dynamic_arg_dims: argument {name!r} is {type(value).__name__}; expected a "
                    "tensor"
                )
            for dim in (spec,) if isinstance(spec, int) else spec:
                dims.append((name, dim % value.dim()))
        return dims

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        bound = self.signature.bind(*args, **kwargs)
        dynamic = self._dynamic(bound)
        if not self.config.check_guards:  # with the guards kept, Dynamo's own check decides
            signature = static_signature(bound.arguments, dynamic)
            if self._signature is None:
                self._signature = signature
            elif signature != self._signature:
                return self._for_signature(signature)._call_bound(bound, dynamic)
        return self._call_bound(bound, dynamic)

    def _call_bound(self, bound: inspect.BoundArguments, dynamic: list[tuple[str, int]]) -> Any:
        """Run a call whose arguments are bound and whose static signature is this trace's."""
        with refusals_unwrapped():  # a program the IR passes refuse raises their ValueError
            if not self.traced:
                return self._trace(bound, dynamic)
            try:
                return self._call_traced(bound, dynamic)
            except torch._dynamo.exc.BackendCompilerFailed as exc:
                if not isinstance(exc.inner_exception, UnexpectedRetrace):
                    raise
                logger.warning(
                    "ir_piecewise: Dynamo's caches were reset; tracing %s again", self.fn
                )
                return self._trace(bound, dynamic)

    def _for_signature(self, signature: tuple[Any, ...]) -> "PiecewiseCompiled":
        """The compiled function of calls of `signature` (made on first use)."""
        compiled = self._other_signatures.get(signature)
        if compiled is None:
            logger.info(
                "ir_piecewise: %s called with inputs of other static sizes, layouts, dtypes or "
                "values than its trace's; tracing for them (%d traces)",
                self._name(),
                len(self._other_signatures) + 2,
            )
            compiled = PiecewiseCompiled(
                self.fn, self.config, self.dynamic_arg_dims, self.pad_values
            )
            compiled._signature = signature
            self._other_signatures[signature] = compiled
        return compiled

    def _call_traced(self, bound: inspect.BoundArguments, dynamic: list[tuple[str, int]]) -> Any:
        size = int(bound.arguments[dynamic[0][0]].shape[dynamic[0][1]]) if dynamic else None
        padded = self._padded_size(size, bound)
        if padded is None:
            with self._guard_check():
                return self._forward(*bound.args, **bound.kwargs)
        assert size is not None
        self._pad_into_static(bound, dynamic, size, padded)
        pool = self.backend.graph_pool
        with self._guard_check():
            if self._full():
                flat, self._treespec = pytree.tree_flatten((bound.args, bound.kwargs))
                out = self.full_graph(padded, *flat)
            else:
                pool.graphs_enabled = True
                try:
                    out = self._forward(*bound.args, **bound.kwargs)
                finally:
                    pool.graphs_enabled = False
        dim = dynamic[0][1]
        return pytree.tree_map_only(
            Tensor,
            lambda t: t.narrow(dim, 0, size) if t.dim() > dim and t.shape[dim] == padded else t,
            out,
        )

    def _trace_cache(self) -> CompileCache | None:
        """The compile cache, where this function's trace may be saved: a module without
        forward hooks, compiled with the cache on and guards dropped."""
        fn = self.fn
        if not (self.config.cache and not self.config.check_guards and isinstance(fn, nn.Module)):
            return None
        if fn._forward_hooks or fn._forward_pre_hooks:
            return None
        return self.config.compile_cache()

    def _trace(self, bound: inspect.BoundArguments, dynamic: list[tuple[str, int]]) -> Any:
        without_tokens = any(bound.arguments[name].shape[dim] == 0 for name, dim in dynamic)
        if self.trace_cache is None:
            if without_tokens:
                return self._trace_without_tokens(bound, dynamic)
            return self._trace_with_dynamo(bound, dynamic)
        assert isinstance(self.fn, nn.Module)
        key = traces.trace_key(global_key(self.config), self.fn, dict(bound.arguments), dynamic)
        compiled = traces.load_trace(self.trace_cache, key, traces.forward_globals(self.fn))
        if compiled is not None and not self._build_loaded(compiled):
            compiled = None
        if compiled is not None:
            counters.num_traces_loaded += 1
            logger.info("ir_piecewise: loaded the trace of %s", type(self.fn).__qualname__)
        else:
            compiled = self._trace_ahead_of_time(bound, dynamic)
            if compiled is None:
                if without_tokens:
                    return self._run_eagerly(bound)
                return self._trace_with_dynamo(bound, dynamic)
            # where the piece compiler cannot save its pieces (Inductor without its graph
            # cache), a trace whose pieces are missing is loaded only to be traced again
            compiler = self.config.compiler()
            if not compiler.compiles or compiler.saveable(self.trace_cache.root):
                traces.save_trace(self.trace_cache, key, compiled)
        return self._run_ahead_of_time(compiled, bound)

    def _run_ahead_of_time(self, compiled: Any, bound: inspect.BoundArguments) -> Any:
        """Make `compiled` (an ahead-of-time trace, saved, loaded or fresh) this function's
        trace, and run the call on it."""
        compiled.disable_guard_check()
        fn = self.fn
        self._forward = functools.partial(compiled, fn) if isinstance(fn, nn.Module) else compiled
        self.traced = True
        return self._forward(*bound.args, **bound.kwargs)

    def _trace_without_tokens(
        self, bound: inspect.BoundArguments, dynamic: list[tuple[str, int]]
    ) -> Any:
        """A first call of no tokens: traced ahead of time on an example of two, then run. Run
        on the empty tensors, Dynamo would read the token count from a stride (the strides of
        an empty tensor are made up) and hand the compiled code a count of rows the tensors do
        not have. Where the function cannot be traced ahead of time, the call runs eagerly and
        the next call traces."""
        compiled = self._trace_ahead_of_time(bound, dynamic)
        if compiled is None:
            return self._run_eagerly(bound)
        return self._run_ahead_of_time(compiled, bound)

    def _run_eagerly(self, bound: inspect.BoundArguments) -> Any:
        """A first call of no tokens that cannot be traced ahead of time: run without a trace."""
        logger.warning("ir_piecewise: running %s's first call, of no tokens, eagerly", self._name())
        return self.fn(*bound.args, **bound.kwargs)

    def _name(self) -> str:
        fn = self.fn
        return str(getattr(fn, "__qualname__", type(fn).__qualname__))

    def _build_loaded(self, compiled: Any) -> bool:
        """Build a loaded trace's pieces from the compile cache; False if one is missing."""
        graph = traces.traced_graph(compiled)
        assert isinstance(graph, PiecewiseGraph)
        try:
            graph.build(self.backend)
        except NotCached as missing:
            logger.info(
                "ir_piecewise: the compile cache lacks %s of the saved trace; tracing again",
                missing,
            )
            return False
        return True

    def _trace_ahead_of_time(
        self, bound: inspect.BoundArguments, dynamic: list[tuple[str, int]]
    ) -> Any | None:
        """Trace the function (a module's forward) on an example of at least two tokens, without
        running it, into a compiled function (of a forward: one that takes the module first),
        or None (logged) where Dynamo cannot. A program the IR passes refuse raises their
        refusal."""
        fn = self.fn
        target = fn.forward if isinstance(fn, nn.Module) else fn
        example = self._example_of_two(bound, dynamic)
        for name, dim in dynamic:
            torch._dynamo.mark_dynamic(example.arguments[name], dim)
        # torch 2.11 attaches `aot_compile` to compiled functions only with this flag on
        with torch._dynamo.config.patch(enable_aot_compile=True):
            forward = torch.compile(
                target, backend=self.backend, fullgraph=True, dynamic=False, options=self._options
            )
        self.backend.expecting_trace = True
        try:
            with fx_config.patch(backed_size_oblivious=True):  # type: ignore[attr-defined]
                return forward.aot_compile((example.args, example.kwargs))  # type: ignore[attr-defined]
        except Exception as exc:
            failed = torch._dynamo.exc.BackendCompilerFailed
            inner = exc.inner_exception if isinstance(exc, failed) else exc
            if isinstance(inner, ValueError):
                raise  # the passes refuse the program (`refusals_unwrapped` unwraps it)
            logger.warning(
                "ir_piecewise: could not trace %s ahead of time (%s: %s)",
                self._name(),
                type(exc).__name__,
                exc,
            )
            return None
        finally:
            self.backend.expecting_trace = False

    def _example_of_two(
        self, bound: inspect.BoundArguments, dynamic: list[tuple[str, int]]
    ) -> inspect.BoundArguments:
        """`bound` with dynamic dims of fewer than 2 tokens grown to 2, so that the trace's
        size-oblivious guards hold for the example (tracing does not run the model)."""
        arguments = dict(bound.arguments)
        for name, dim in dynamic:
            value = arguments[name]
            if value.shape[dim] < 2:
                grown = laid_out_for_two(value, dim).zero_()
                grown.narrow(dim, 0, value.shape[dim]).copy_(value)
                arguments[name] = grown
        return inspect.BoundArguments(self.signature, arguments)

    def _mark_dynamic(self, bound: inspect.BoundArguments, dynamic: list[tuple[str, int]]) -> None:
        for name, dim in dynamic:
            value = bound.arguments[name]
            # a first call of 1 token must not specialize the token dim to 1:
            # a size-1 hint lets Inductor decide layouts as if the size were always 1 (a
            # reshape becomes a view, say); compile as if for 2 tokens, which fits every size
            hint = None if value.shape[dim] >= 2 else 2
            torch._dynamo.mark_dynamic(value, dim, hint_override=hint)

    def _trace_with_dynamo(
        self, bound: inspect.BoundArguments, dynamic: list[tuple[str, int]]
    ) -> Any:
        self._mark_dynamic(bound, dynamic)
        self._forward = self.compiled
        self.backend.expecting_trace = True
        try:
            with fx_config.patch(backed_size_oblivious=True):  # type: ignore[attr-defined]
                out = self.compiled(*bound.args, **bound.kwargs)
        finally:
            self.backend.expecting_trace = False
        self.traced = True
        return out

    def _full(self) -> bool:
        mode = self.config.cudagraph_mode
        return mode is CUDAGraphMode.FULL or (
            mode is CUDAGraphMode.FULL_AND_PIECEWISE and self.backend.full_graph_capturable
        )

    def _padded_size(self, size: int | None, bound: inspect.BoundArguments) -> int | None:
        if size is None or self.config.cudagraph_mode is CUDAGraphMode.NONE:
            return None
        on_cuda = any(
            isinstance(t, Tensor) and t.is_cuda
            for t in pytree.tree_leaves((bound.args, bound.kwargs))
        )
        return self.config.padded_size(size) if on_cuda else None

    def _pad_into_static(
        self,
        bound: inspect.BoundArguments,
        dynamic: list[tuple[str, int]],
        size: int,
        padded: int,
    ) -> None:
        """Copy the dynamic arguments into this size's persistent buffers (stable addresses,
        padding rows kept from earlier calls: zeros at first)."""
        buffers = self.static_inputs.setdefault(padded, {})
        for name in dict.fromkeys(name for name, _ in dynamic):
            value: Tensor = bound.arguments[name]
            dim = next(d for n, d in dynamic if n == name)
            buffer = buffers.get(name)
            if buffer is None:
                shape = list(value.shape)
                shape[dim] = padded
                buffer = torch.zeros(shape, dtype=value.dtype, device=value.device)
                buffers[name] = buffer
            buffer.narrow(dim, 0, size).copy_(value)
            if name in self.pad_values and padded > size:
                buffer.narrow(dim, size, padded - size).fill_(self.pad_values[name])
            bound.arguments[name] = buffer

    def _run_flat(self, *flat: Any) -> Any:
        args, kwargs = pytree.tree_unflatten(list(flat), self._treespec)
        return self._forward(*args, **kwargs)

    @contextlib.contextmanager
    def _guard_check(self) -> Iterator[None]:
        if not self.config.check_guards:
            yield
            return
        try:
            with torch.compiler.set_stance("fail_on_recompile"):
                yield
        except RuntimeError as exc:
            if "recompil" not in str(exc).lower():
                raise
            raise RecompileError(
                f"ir_piecewise: this call would need a recompile, so with guards dropped it "
                f"would have run code traced for other inputs: {exc}"
            ) from exc


def _check_dims(signature: inspect.Signature, dims: DynamicArgDims | None) -> DynamicArgDims | None:
    if dims is None:
        return None
    for name, spec in dims.items():
        if name not in signature.parameters:
            raise ValueError(
                f"dynamic_arg_dims: unknown argument {name!r}; expected one of "
                f"{list(signature.parameters)}"
            )
        for dim in (spec,) if isinstance(spec, int) else spec:
            if isinstance(dim, bool) or not isinstance(dim, int):
                raise ValueError(f"dynamic_arg_dims[{name!r}]: got {dim!r}; expected int dims")
    return dims


def compile(
    fn_or_module: Callable[..., Any],
    config: CompilationConfig | None = None,
    *,
    dynamic_arg_dims: DynamicArgDims | None = None,
    pad_values: Mapping[str, float] | None = None,
) -> PiecewiseCompiled:
    """Compile `fn_or_module` piecewise.

    Args:
        fn_or_module: a function or ``nn.Module`` whose forward is traced as one graph.
        config: what to split at, compile and capture (default `CompilationConfig()`).
        dynamic_arg_dims: argument name -> dim (or dims) of the token dimension; default: dim 0
            of every tensor argument. All must have the same size in a call.
        pad_values: argument name -> value of the padding rows added for CUDA graphs (e.g.
            ``{"positions": -1}`` for a model whose cache writes skip negative positions);
            arguments not named keep what earlier calls left in their padding rows.
    """
    return PiecewiseCompiled(
        fn_or_module, config or CompilationConfig(), dynamic_arg_dims, pad_values
    )
