"""Selection by measurement (``PassConfig.autotune``): time the candidates of one IR op on the
real shapes and keep the fastest.

For one IR op node of a graph compiled for a compile range, `autotune` takes the node's fake
arguments and materialises them (`concrete_arguments`) as fresh random tensors of the same
shape, dtype, device and strides. The token count (the first dimension of the op's first
activation), where symbolic, takes each of the range's timed counts (`timed_token_counts`):
both ends of a bounded range, since its code serves every count in it (a decode step of one
sequence and a batch of 256 run the same piece); the first count and `UNBOUNDED_FACTOR` times
it for an unbounded one; where the graph's range is unknown, the size the graph was traced
with (the symbol's hint), as for every other symbolic size.

The candidates are every implementation the selection rule could pick on these arguments
(`candidates`: supported, not disabled, accepted by ``supports_args``, in the effective
priority order of inductor mode) and ``native``, which is timed as Inductor compiles it: the
native function traced and compiled by Inductor on the same arguments, the code a graph runs
where lowering leaves the op for Inductor to fuse. An implementation that writes its
arguments (an in-place one, or a mutating op's) gets its own copies of them. On CUDA each is
timed as a compiled step runs it: `GRAPH_CALLS` calls captured back to back in one CUDA graph,
whose replays are timed (`GRAPH_REPLAYS`; no launch overhead, inputs warm in the L2). A call
that cannot be captured is timed with ``triton.testing.do_bench`` (CUDA events without
triton), which flushes the L2 and times each launch: at decode sizes that measures a
launch's latency more than its kernel, and its times of one kernel vary by more than the
kernels differ. Elsewhere a ``time.perf_counter`` loop times it (`CPU_SAMPLES` samples of at
least `CPU_SAMPLE_S` seconds each). The median counts. Nothing is timed while the current
stream is capturing a CUDA graph (a compilation inside a capture): the priority decides.

The choice must hold at every timed count: a candidate's slowdown is its largest ratio to the
best time of a count, a time within `TIE_RELATIVE` of that best or `TIE_ABSOLUTE_MS` above it
counting as none (`pick`). Ties go to the priority: the first candidate, in priority order,
whose slowdown ties with the least wins, so measuring changes a choice only for a real
difference at some count and never for one that loses at another. Decisions are kept in this
process per op, arguments (shapes, dtypes, strides, non-tensor values), device and candidate
set: a graph of thirty identical layers times each op once. Collectives (ops taking a process
group) are never timed: every rank would have to time them in step.
"""

import logging
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import ir_dispatch
from ir_spec import Impl, IrOp, process_groups

logger = logging.getLogger("ir_passes")

#: a time within this fraction of the best is a tie (kept by the priority's choice)
TIE_RELATIVE = 0.02
#: a time at most this many milliseconds (0.5 us) above the best is a tie: replayed, the
#: candidates of a decode-size op differ by less, and a step does not resolve differences that
#: small (its replays vary by more)
TIE_ABSOLUTE_MS = 5e-4
#: an unbounded compile range ``[first, inf)`` is timed at ``first`` and ``first *
#: UNBOUNDED_FACTOR`` tokens (257 and 2056 for the ``257-inf`` range the default fusion
#: thresholds leave: a short and a typical prompt)
UNBOUNDED_FACTOR = 8
#: the candidate name of the native function compiled by Inductor
NATIVE = "native"
#: CPU timing: samples taken, and the least wall time of one sample (calls are repeated in a
#: sample until it lasts that long)
CPU_SAMPLES = 15
CPU_SAMPLE_S = 1e-3
#: Inductor options of the native function's compilation: none of the IR passes' hooks, no
#: caches
_NESTED: dict[str, Any] = {
    "pre_grad_custom_pass": None,
    "post_grad_custom_pre_pass": None,
    "post_grad_custom_post_pass": None,
    "fx_graph_cache": False,
    "fx_graph_remote_cache": False,
}
_NESTED_AOT: dict[str, Any] = {
    name: False
    for name in ("enable_autograd_cache", "bundled_autograd_cache")
    if hasattr(torch._functorch.config, name)
}
#: CPU timing: calls before the samples (compilation, caches); CUDA timing: calls before the
#: capture
CPU_WARMUP = 3
#: CUDA timing: calls captured back to back in one graph, and replays of it timed
GRAPH_CALLS = 20
GRAPH_REPLAYS = 10


@dataclass(frozen=True)
class Timed:
    """The candidates' times on the arguments of one token count.

    Attributes:
        arguments: the timed arguments, as text (shape, dtype and strides of each tensor).
        timings_ms: candidate -> median milliseconds, in priority order (``native``: the
            native function compiled by Inductor).
    """

    arguments: str
    timings_ms: dict[str, float]

    def summary(self) -> str:
        """The arguments and each candidate's time, as text."""
        times = ", ".join(f"{name} {ms * 1e3:.1f}us" for name, ms in self.timings_ms.items())
        return f"{self.arguments}: {times}"


@dataclass(frozen=True)
class Decision:
    """One op's choice on one set of arguments, timed at one token count or more.

    Attributes:
        op: the op's name.
        timed: the candidates' times at each token count timed, fewest tokens first.
        priority_choice: what the selection rule picks on these arguments.
        choice: the candidate whose slowdown over the counts is least (the priority's choice
            on a tie: `pick`).
    """

    op: str
    timed: tuple[Timed, ...]
    priority_choice: str
    choice: str

    @property
    def arguments(self) -> str:
        """The arguments at the most tokens timed, as text."""
        return self.timed[-1].arguments

    @property
    def timings_ms(self) -> dict[str, float]:
        """Each candidate's median milliseconds at the most tokens timed."""
        return self.timed[-1].timings_ms

    @property
    def changed(self) -> bool:
        """Whether measuring chose otherwise than the priority."""
        return self.choice != self.priority_choice

    def as_dict(self) -> dict[str, Any]:
        """The decision as JSON-ready values (`from_dict` reads them back)."""
        return {
            "op": self.op,
            "timed": [
                {"arguments": t.arguments, "timings_ms": dict(t.timings_ms)} for t in self.timed
            ],
            "priority_choice": self.priority_choice,
            "choice": self.choice,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Decision":
        """The decision `as_dict` described; `ValueError` naming what is missing or wrong."""
        try:
            timed = tuple(
                Timed(
                    str(t["arguments"]),
                    {str(k): float(v) for k, v in t["timings_ms"].items()},
                )
                for t in data["timed"]
            )
            if not timed:
                raise ValueError("no timed token count")
            return cls(str(data["op"]), timed, str(data["priority_choice"]), str(data["choice"]))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(
                f"autotune decision: got {data!r}; expected op, timed (arguments and timings_ms "
                f"at each token count), priority_choice and choice ({type(exc).__name__}: {exc})"
            ) from None

    def summary(self) -> str:
        """One line: op, the arguments and each candidate's time at each count, the choice."""
        timed = "; ".join(t.summary() for t in self.timed)
        note = f" (priority: {self.priority_choice})" if self.changed else ""
        return f"{self.op} on {timed} -> {self.choice}{note}"


@dataclass
class Stats:
    """What autotuning did in this process; `reset` sets it back.

    Attributes:
        timed: candidates timed (each one measurement).
        decided: decisions made by timing.
        reused: decisions served from this process's cache of decisions.
    """

    timed: int = 0
    decided: int = 0
    reused: int = 0

    def reset(self) -> None:
        """Zero the counts (the cache of decisions stays: see `clear_cache`)."""
        self.timed = self.decided = self.reused = 0


stats = Stats()
_decisions: dict[tuple[Any, ...], Decision] = {}


def clear_cache() -> None:
    """Forget every decision made in this process."""
    _decisions.clear()


def tunable(op: IrOp) -> bool:
    """Whether `op` is timed: every op but the collectives (a process group's ops run in step
    on every rank, which independent timing loops would break)."""
    return process_groups.GROUP_ARGUMENT not in op.parameter_names


# ------------------------------------------------------------------ arguments
def timed_token_counts(token_range: tuple[int, int | None] | None) -> tuple[int | None, ...]:
    """The token counts a symbolic token count is timed at: both ends of a bounded range (one
    where it holds one count), the first count and `UNBOUNDED_FACTOR` times it for an
    unbounded range; None (the size the graph was traced with) where the range is unknown."""
    if token_range is None:
        return (None,)
    first, last = token_range
    if last is None:
        return (first, first * UNBOUNDED_FACTOR)
    return (first,) if last == first else (first, last)


def _token_symbol(op: IrOp, fakes: Sequence[Any]) -> sympy.Symbol | None:
    """The symbol of the token count: the first dimension of the op's first activation, where
    that is a symbol of its own."""
    for i in op.activation_indices:
        fake = fakes[i]
        if isinstance(fake, torch.Tensor) and fake.dim() > 0:
            size = fake.shape[0]
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                return size.node.expr
            return None
    return None


class _Sizes:
    """Concrete values of sizes and strides: the token symbol at `tokens` (None: its hint),
    any other symbol at its hint (the traced size), `UNBOUNDED_FACTOR` where there is none."""

    def __init__(self, token: sympy.Symbol | None, tokens: int | None) -> None:
        self.token = token
        self.tokens = tokens

    def __call__(self, value: Any) -> int:
        if not isinstance(value, torch.SymInt):
            return int(value)
        node = value.node
        expr = node.expr
        if not expr.free_symbols:
            return int(expr)
        env = node.shape_env
        # torch 2.13 renamed the table of hints (the old name warns)
        hints = getattr(env, "backed_var_to_val", None) or getattr(env, "var_to_val", {})
        values: dict[sympy.Symbol, int] = {}
        for symbol in expr.free_symbols:
            hint = hints.get(symbol)
            hint = None if hint is None else int(hint)
            if symbol == self.token and self.tokens is not None:
                values[symbol] = self.tokens
            else:
                values[symbol] = hint if hint is not None else UNBOUNDED_FACTOR
        return int(expr.xreplace(values))


def _random_tensor(fake: torch.Tensor, sizes: _Sizes, index_bound: int) -> torch.Tensor:
    shape = [sizes(s) for s in fake.shape]
    stride = [sizes(s) for s in fake.stride()]
    dtype, device = fake.dtype, fake.device
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True) if n > 0)
    extent = extent if all(n > 0 for n in shape) else 0
    if dtype.is_floating_point or dtype.is_complex:
        source = dtype if dtype.itemsize > 1 else torch.float32  # fp8: drawn in fp32
        flat = torch.randn(extent, dtype=source, device=device).to(dtype)
    elif dtype == torch.bool:
        flat = torch.rand(extent, device=device) < 0.5
    else:
        flat = torch.randint(0, max(1, index_bound), (extent,), dtype=dtype, device=device)
    return flat.as_strided(shape, stride)


def concrete_arguments(op: IrOp, fakes: Sequence[Any], tokens: int | None) -> list[Any]:
    """`fakes` (an op's arguments, fake tensors among them) as fresh random tensors of the same
    shapes, dtypes, devices and strides; other values unchanged.

    The token count (the first dimension of the op's first activation, where symbolic) takes
    `tokens` (one of `timed_token_counts`; None: the size the graph was traced with); any other
    symbolic size takes the size the graph was traced with. Floating tensors are standard
    normal. Integer tensors are indices in every catalog op (positions, cache slots): they are
    drawn in ``[0, n)``, with ``n`` the smallest leading dimension of the op's floating
    tensors, so they index every table in bounds."""
    sizes = _Sizes(_token_symbol(op, fakes), tokens)
    leading = [
        sizes(f.shape[0])
        for f in fakes
        if isinstance(f, torch.Tensor) and f.dim() > 0 and f.dtype.is_floating_point
    ]
    bound = min(leading, default=1)
    return [_random_tensor(f, sizes, bound) if isinstance(f, torch.Tensor) else f for f in fakes]


def describe(args: Sequence[Any]) -> str:
    """The arguments as text: each tensor's dtype, shape and (where not contiguous) strides."""
    parts = []
    for a in args:
        if isinstance(a, torch.Tensor):
            dtype = str(a.dtype).removeprefix("torch.")
            text = f"{dtype}{list(a.shape)}"
            if not a.is_contiguous():
                text += f"@{list(a.stride())}"
            parts.append(text)
        else:
            parts.append(repr(a))
    return "(" + ", ".join(parts) + ")"


def _signature(args: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(
        (a.dtype, tuple(a.shape), a.stride(), str(a.device))
        if isinstance(a, torch.Tensor)
        else repr(a)
        for a in args
    )


# ------------------------------------------------------------------ candidates
def candidates(op: IrOp, args: Sequence[Any]) -> list[Impl]:
    """The implementations the selection rule could pick on `args` (inductor mode), in the
    effective priority order, ``native`` among them: each provider is eligible where
    `ir_dispatch.select` picks it when it heads the list."""
    with ir_dispatch.mode(ir_dispatch.INDUCTOR):
        order = ir_dispatch.effective_priority(op)
        if NATIVE not in order:
            order.append(NATIVE)
        eligible: list[Impl] = []
        for provider in order:
            if provider not in op.impls:
                continue
            with ir_dispatch.priority({op.name: [provider]}):
                impl = ir_dispatch.select(op, *args)
            if impl.provider == provider:
                eligible.append(impl)
    return eligible


def _written(op: IrOp, impl: Impl | None) -> tuple[int, ...]:
    """Positions a call may write: a mutating op's `IrOp.mutates`, an in-place
    implementation's activations."""
    positions = [op.parameter_names.index(name) for name in op.mutates]
    if impl is not None and impl.inplace:
        positions.extend(op.activation_indices)
    return tuple(sorted(set(positions)))


def _own_copies(args: Sequence[Any], positions: tuple[int, ...]) -> list[Any]:
    own = list(args)
    for i in positions:
        if isinstance(own[i], torch.Tensor):
            own[i] = own[i].clone()
    return own


def inductor_native(op: IrOp, args: Sequence[Any]) -> Callable[[], Any]:
    """The native function traced on `args` and compiled by Inductor (every shape static), as
    a call on its own copies of the arguments it writes."""
    own = _own_copies(args, _written(op, None))
    positions = [i for i, a in enumerate(own) if isinstance(a, torch.Tensor)]

    def native(*tensors: torch.Tensor) -> Any:
        full = list(own)
        for i, t in zip(positions, tensors, strict=True):
            full[i] = t
        return op.native(*full)

    tensors = [own[i] for i in positions]
    graph = make_fx(native)(*tensors)
    # compiled inside the outer compilation: without the IR passes its options install (the
    # native function has no IR op left to lower, and its compilation is none of the
    # reports'), without a tracing context, and past the caches, whose bookkeeping (the
    # Triton kernel bundle) is the outer compilation's and admits one compilation at a time
    with (
        torch._inductor.config.patch(_NESTED),
        torch._functorch.config.patch(_NESTED_AOT),
        torch._guards.tracing(None),
    ):
        compiled = torch._inductor.compile(graph, tensors)
    return lambda: compiled(*tensors)


def _call(op: IrOp, impl: Impl, args: Sequence[Any]) -> Callable[[], Any]:
    own = _own_copies(args, _written(op, impl))
    fn = impl.fn
    return lambda: fn(*own)


# ------------------------------------------------------------------ timing
def _time_cpu(call: Callable[[], Any]) -> float:
    for _ in range(CPU_WARMUP):
        call()
    started = time.perf_counter()
    call()
    once = max(time.perf_counter() - started, 1e-9)
    repeats = max(1, int(CPU_SAMPLE_S / once))
    samples = []
    for _ in range(CPU_SAMPLES):
        started = time.perf_counter()
        for _ in range(repeats):
            call()
        samples.append((time.perf_counter() - started) / repeats)
    return statistics.median(samples) * 1e3


def _time_cuda_graph(call: Callable[[], Any]) -> float:
    """Median milliseconds of one call, over replays of a CUDA graph of `GRAPH_CALLS` calls."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up off the default stream, as capture requires
        for _ in range(CPU_WARMUP):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_CALLS):
            call()
    graph.replay()
    times: list[float] = []
    for _ in range(GRAPH_REPLAYS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / GRAPH_CALLS)
    return float(statistics.median(times))


def _time_cuda_launches(call: Callable[[], Any]) -> float:
    """Median milliseconds of one call launched on its own (``do_bench``, else CUDA events)."""
    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    if do_bench is not None:
        return float(do_bench(call, warmup=25, rep=100, return_mode="median"))
    for _ in range(CPU_WARMUP):
        call()
    torch.cuda.synchronize()
    times: list[float] = []
    for _ in range(50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(statistics.median(times))


def _time_cuda(call: Callable[[], Any]) -> float:
    try:
        return _time_cuda_graph(call)
    except RuntimeError as error:  # a call that cannot be captured (a host synchronization)
        torch.cuda.synchronize()
        logger.debug("ir_passes: autotune times launches, a CUDA graph failed: %s", error)
        return _time_cuda_launches(call)


def measure(call: Callable[[], Any], device: torch.device) -> float:
    """Median milliseconds of one call of `call` on `device`."""
    stats.timed += 1
    return _time_cuda(call) if device.type == "cuda" else _time_cpu(call)


def _capturing(args: Sequence[Any]) -> bool:
    """Whether the arguments live on a CUDA device whose current stream is capturing a graph,
    where nothing can be timed (a compilation inside a capture)."""
    if _device_of(args).type != "cuda" or not torch.cuda.is_available():
        return False
    if torch.cuda.is_current_stream_capturing():
        logger.info("ir_passes: autotune skipped: the current CUDA stream is capturing a graph")
        return True
    return False


def _device_of(args: Sequence[Any]) -> torch.device:
    return next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))


def slowdown(timings: Sequence[Mapping[str, float]], name: str) -> float:
    """Candidate `name`'s largest ratio to the best time of a token count, over the counts of
    `timings` (one mapping of candidate -> time a count); a time that ties with its count's best
    (`TIE_RELATIVE`, `TIE_ABSOLUTE_MS`) counts as 1."""
    worst = 1.0
    for times in timings:
        best = min(times.values())
        mine = times[name]
        if mine > max(best * (1 + TIE_RELATIVE), best + TIE_ABSOLUTE_MS):
            worst = max(worst, mine / best)
    return worst


def pick(timings: Sequence[Mapping[str, float]], order: Sequence[str]) -> str:
    """The first candidate of `order` whose `slowdown` over the counts of `timings` ties with
    the least (within `TIE_RELATIVE`): at one count, the first whose time ties with the best."""
    slowdowns = {name: slowdown(timings, name) for name in order}
    least = min(slowdowns.values())
    return next(name for name in order if slowdowns[name] <= least * (1 + TIE_RELATIVE))


# ------------------------------------------------------------------ the decision
def autotune(
    op: IrOp, fakes: Sequence[Any], token_range: tuple[int, int | None] | None
) -> Decision | None:
    """The candidate of `op` on `fakes` that is fastest at every token count of `token_range`
    (`timed_token_counts`, `pick`), or None where there is nothing to choose (one candidate, or
    a collective)."""
    if not tunable(op) or _capturing(fakes):
        return None
    with ir_dispatch.mode(ir_dispatch.INDUCTOR):
        priority_choice = ir_dispatch.select(op, *fakes).provider
    # a token count that is not a size of its own (static, or a product of symbols) is timed
    # as traced, once
    counts = timed_token_counts(token_range) if _token_symbol(op, fakes) is not None else (None,)
    args_at = [concrete_arguments(op, fakes, tokens) for tokens in counts]
    # the candidates of the most tokens, which every count must accept: the code is one
    accepted_at_fewer = [candidates(op, args) for args in args_at[:-1]]
    eligible = [
        impl
        for impl in candidates(op, args_at[-1])
        if all(impl in accepted for accepted in accepted_at_fewer)
    ]
    if len(eligible) < 2:
        return None
    device = _device_of(args_at[-1])
    key = (
        op.name,
        tuple(_signature(args) for args in args_at),
        str(device),
        tuple((impl.provider, id(impl.fn), impl.inplace) for impl in eligible),
    )
    known = _decisions.get(key)
    if known is not None:
        stats.reused += 1
        return known
    timed = []
    for args in args_at:
        timings: dict[str, float] = {}
        for impl in eligible:
            call = inductor_native(op, args) if impl.provider == NATIVE else _call(op, impl, args)
            timings[impl.provider] = measure(call, device)
        timed.append(Timed(describe(args), timings))
    order = [impl.provider for impl in eligible]
    choice = pick([t.timings_ms for t in timed], order)
    decision = Decision(op.name, tuple(timed), priority_choice, choice)
    _decisions[key] = decision
    stats.decided += 1
    logger.debug("ir_passes: autotune %s", decision.summary())
    return decision


def log_summary(decisions: Sequence[Decision]) -> None:
    """One INFO line for a compilation's decisions: how many, and which changed the choice."""
    if not decisions:
        return
    changed = [d for d in decisions if d.changed]
    logger.info(
        "ir_passes: autotuned %d op node(s), %d choice(s) changed%s",
        len(decisions),
        len(changed),
        "".join(f"; {d.op} {d.arguments}: {d.priority_choice} -> {d.choice}" for d in changed),
    )
