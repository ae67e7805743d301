"""Suite ``e2e``: the reference model end to end, decode steps and prefill, in every mode.

Modes, in one process with the same weights:

- ``eager native``: IR ops with their native implementations;
- ``eager best kernels``: IR ops with the kernels selected for this machine;
- ``torch.compile``, ``torch.compile reduce-overhead``: stock ``torch.compile`` of the same model
  written in plain PyTorch (``LlamaModel(plain_torch=True)``); for ``reduce-overhead`` the KV
  caches are marked static (``torch._dynamo.mark_static_address``), as a PyTorch user would,
  so Inductor's CUDA graphs are in use (the row records ``cudagraph_skips``);
- ``ir_stack piecewise``: ``ir_stack.compile`` split at attention, each piece replayed as a
  CUDA graph (``CUDAGraphMode.PIECEWISE``);
- ``ir_stack``: ``ir_stack.compile`` with ``FULL_AND_PIECEWISE``: decode steps (capturable
  attention) replay as one CUDA graph, prefill piecewise;
- ``full CUDA graph``: the eager best-kernel model captured whole per decode batch size, the
  ceiling (prefill attention reads its length on the host, so there is no prefill ceiling);
- ``ir_stack autotuned`` (only when ``--modes`` names it): ``ir_stack`` with
  ``PassConfig(autotune=True)``, each IR op's implementation chosen by measurement per compile
  range; its rows list the choices that differ from the priority's (``autotune_changed``).

Then the rotary fusions on the Qwen3-style reference model (per-head query and key norms:
`QWEN3_4B`'s sizes with `--fusion-layers` layers on a GPU, `QWEN3_TINY` on the CPU), each
``ir_stack`` with ``FULL_AND_PIECEWISE`` CUDA graphs:

- ``ir_stack, rotary fusions off``: neither fusion;
- ``ir_stack, qk_norm+rope fused``: ``enable_qk_norm_rope_fusion`` alone;
- ``ir_stack, rope+kvcache fused``: ``fuse_rope_kvcache`` alone (with the other on, the
  QK-norm fusion takes the rotary and the cache write stays apart);

each fusion at every token count (its threshold lifted, so the prefill shows it too), forced
on the CPU (where every op runs natively) and with ``--force-fusion``; the rows say how often
each fired (``fusions_fired``, in the pieces compiled: identical layers compile once). Decode
batches ``--fusion-batches`` (1 and 32 on a GPU) and a ``--fusion-prefill`` prompt (2048
tokens); ``--no-fusion-rows`` leaves them out.

Then converted transformers models (``--hf``, on a GPU Llama and Qwen3 at the shapes of Llama
3.2 1B and Qwen3 1.7B, random weights; `ir_stack.bench.hf_steps`), the same workloads over
transformers' static cache: ``hf eager`` (the original, the reference of these rows' errors),
stock ``torch.compile`` reduce-overhead of the original, ``ir_stack`` (the converted model
through the Dynamo backend, ``mode="reduce-overhead"``) and the full CUDA graph of the converted
eager model.

Decode steps attend over `context` cached positions (random keys and values); prefill is one
sequence of `prefill` tokens. Each time is the mean of `iters` back-to-back calls after warm-up
calls (`ir_stack.bench.timing.mean_ms`). On the CPU (float32, the tiny model by default) the
CUDA-graph modes are left out. How long a compiled model takes to be ready is the ``startup``
suite's question.

    ir-stack bench --only e2e [--model tiny|1b] [--quick]
    python -m ir_stack.bench.e2e --out DIR [--model 1b] [--batches 1,8] [--modes a,b]

Writes ``DIR/e2e-<device>.json``, ``.md`` and ``.png`` (`ir_stack.bench.e2e_report`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import ir_dispatch
from ir_passes import QK_NORM_ROPE_PATTERN, ROPE_KVCACHE_PATTERN, PassConfig
from ir_piecewise import CompilationConfig, CUDAGraphMode, counters
from ir_spec import ops

from ..compiler import compile as ir_stack_compile
from ..config import Config
from ..models import ONE_B, QWEN3_4B, QWEN3_TINY, TINY, LlamaConfig, LlamaModel
from . import common, results, timing

MODELS = {"tiny": TINY, "1b": ONE_B}
MODES = (
    "eager native",
    "eager best kernels",
    "torch.compile",
    "torch.compile reduce-overhead",
    "ir_stack piecewise",
    "ir_stack",
    "full CUDA graph",
)
#: ``ir_stack`` with selection by measurement: run only where ``--modes`` names it
AUTOTUNED = "ir_stack autotuned"
EXTRA_MODES = (AUTOTUNED,)
#: the Qwen3-style model's modes: the switches of the rotary fusions in each (the one on
#: without a token threshold)
FUSION_MODES: dict[str, dict[str, Any]] = {
    "ir_stack, rotary fusions off": {
        "fuse_rope_kvcache": False,
        "enable_qk_norm_rope_fusion": False,
    },
    "ir_stack, qk_norm+rope fused": {
        "enable_qk_norm_rope_fusion": True,
        "qk_norm_rope_max_tokens": None,
        "fuse_rope_kvcache": False,
    },
    "ir_stack, rope+kvcache fused": {
        "fuse_rope_kvcache": True,
        "rope_kvcache_max_tokens": None,
        "enable_qk_norm_rope_fusion": False,
    },
}
#: the converted transformers models' reference mode: the original model, eager
HF_EAGER = "hf eager"
#: every mode, in the order of the result's rows
ALL_MODES = (HF_EAGER, *MODES, *EXTRA_MODES, *FUSION_MODES)
#: the fusion rows' defaults on a GPU and on the CPU: model, decode batches, prefill tokens
FUSION_SIZES = {"cuda": (QWEN3_4B, "1,32", 2048), "cpu": (QWEN3_TINY, "1,2", 16)}
KEY = ["model", "mode", "workload"]
METRICS = [results.Metric("ms", "ms")]
KVCache = list[tuple[Tensor, Tensor]]
#: the CUDA graph mode of each ir_stack mode
IR_STACK_GRAPHS = {
    "ir_stack piecewise": CUDAGraphMode.PIECEWISE,
    "ir_stack": CUDAGraphMode.FULL_AND_PIECEWISE,
}
#: Sizes by model and --quick where not given: decode batches, prefill tokens, context, iters.
SIZES = {
    ("1b", False): ("1,8,32,128", 2048, 512, 20),
    ("1b", True): ("1,8", 256, 512, 5),
    ("tiny", False): ("1,8,32", 64, 64, 20),
    ("tiny", True): ("1,8", 32, 32, 5),
}


@dataclasses.dataclass(frozen=True)
class Workload:
    """One timed call shape: ``batch`` sequences of ``tokens`` tokens."""

    name: str
    batch: int
    tokens: int

    @property
    def is_decode(self) -> bool:
        return self.tokens == 1


@dataclasses.dataclass
class Setup:
    """What every mode shares: sizes, inputs and the KV caches."""

    config: LlamaConfig
    device: torch.device
    dtype: torch.dtype
    context: int
    workloads: list[Workload]
    inputs: dict[str, tuple[Tensor, Tensor]] = dataclasses.field(default_factory=dict)
    decode_cache: KVCache = dataclasses.field(default_factory=list)
    prefill_cache: KVCache = dataclasses.field(default_factory=list)

    def cache_for(self, workload: Workload) -> KVCache:
        return self.decode_cache if workload.is_decode else self.prefill_cache


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """The options naming the model and its sizes (shared with the ``startup`` suite)."""
    parser.add_argument(
        "--model", choices=sorted(MODELS), help="default: 1b on a GPU, tiny on the CPU"
    )
    parser.add_argument("--fp8", action="store_true", help="fp8 static-quantized linears")
    parser.add_argument("--batches", help="decode batch sizes (default: by model, see SIZES)")
    parser.add_argument("--prefill", type=int, help="prefill tokens (0: none)")
    parser.add_argument("--context", type=int, help="cached positions at decode")


def resolve_sizes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fill the model and sizes not given from `SIZES`, and check them."""
    args.model = args.model or ("1b" if torch.cuda.is_available() else "tiny")
    batches, prefill, context, iters = SIZES[(args.model, args.quick)]
    args.batches = args.batches or batches
    args.prefill = prefill if args.prefill is None else args.prefill
    args.context = context if args.context is None else args.context
    if getattr(args, "iters", 0) is None:
        args.iters = iters
    try:
        sizes = [int(b) for b in args.batches.split(",")]
    except ValueError:
        parser.error(f"--batches {args.batches!r}: expected batch sizes such as 1,8,32")
    if not sizes or min(sizes) < 1:
        parser.error(f"--batches {args.batches!r}: expected positive batch sizes")
    for name in ("prefill", "context", "iters"):
        value = getattr(args, name, 1)
        if value < (0 if name == "prefill" else 1):
            parser.error(f"--{name}: got {value}; expected a positive number")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.parser("e2e", (__doc__ or "").split("\n")[0])
    add_model_args(parser)
    parser.add_argument("--iters", type=int, help="timed calls a workload (default: by model)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument(
        "--append",
        action="store_true",
        help="keep the rows of an existing result of the same model, device and sizes for "
        "the modes not run now",
    )
    # start-up is the startup suite's; accepted for the command lines that left it out here
    parser.add_argument("--skip-startup", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--fusion-rows",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the rotary fusions on the Qwen3-style model (default: on)",
    )
    parser.add_argument(
        "--fusion-layers", type=int, default=8, help="its layers on a GPU (default %(default)s)"
    )
    parser.add_argument("--fusion-batches", help="its decode batches (default: 1,32; 1,2 on CPU)")
    parser.add_argument("--fusion-prefill", type=int, help="its prompt (default: 2048; 16 on CPU)")
    parser.add_argument(
        "--force-fusion",
        action="store_true",
        help="fuse where the fused op would run natively too (always on the CPU)",
    )
    add_hf_args(parser)
    args = parser.parse_args(argv)
    args.hf = parse_hf(parser, args.hf, args.hf_layers)
    unknown = set(args.modes.split(",")) - {*MODES, *EXTRA_MODES}
    if unknown:
        parser.error(
            f"--modes: unknown {sorted(unknown)}; expected some of {[*MODES, *EXTRA_MODES]}"
        )
    resolve_sizes(parser, args)
    kind = "cuda" if torch.cuda.is_available() else "cpu"
    _, batches, prefill = FUSION_SIZES[kind]
    args.fusion_batches = args.fusion_batches or batches
    args.fusion_prefill = prefill if args.fusion_prefill is None else args.fusion_prefill
    try:
        fusion_batches = [int(b) for b in args.fusion_batches.split(",")]
    except ValueError:
        parser.error(f"--fusion-batches {args.fusion_batches!r}: expected sizes such as 1,32")
    if not fusion_batches or min(fusion_batches) < 1 or args.fusion_prefill < 0:
        parser.error(
            f"--fusion-batches {args.fusion_batches!r} / --fusion-prefill "
            f"{args.fusion_prefill}: expected positive batches and a prompt of 0 or more tokens"
        )
    if args.fusion_layers < 1:
        parser.error(f"--fusion-layers {args.fusion_layers}: expected a positive number")
    return args


def add_hf_args(parser: argparse.ArgumentParser) -> None:
    """The options naming the converted transformers models (shared with ``profile``)."""
    parser.add_argument(
        "--hf",
        help="converted transformers models, some of llama,qwen3 ('' for none; default: both "
        "on a GPU where transformers is installed, none on the CPU)",
    )
    parser.add_argument("--hf-layers", type=int, help="their layers (default: each checkpoint's)")


def parse_hf(parser: argparse.ArgumentParser, text: str | None, layers: int | None) -> list[str]:
    """The transformers families of ``--hf`` (see its help); `parser` reports a bad one."""
    if text is None:
        try:
            import transformers  # noqa: F401
        except ImportError:
            return []
        text = "llama,qwen3" if torch.cuda.is_available() else ""
    families = [f for f in text.split(",") if f]
    from .hf_steps import SHAPES

    unknown = sorted(set(families) - set(SHAPES))
    if unknown:
        parser.error(f"--hf {text!r}: unknown {unknown}; expected some of {sorted(SHAPES)}")
    if families and not torch.cuda.is_available():
        parser.error(f"--hf {text!r}: the converted transformers models run on a GPU")
    if layers is not None and layers < 1:
        parser.error(f"--hf-layers {layers}: expected a positive number")
    return families


def hf_rows(
    args: argparse.Namespace,
    family: str,
    workloads: Sequence[Workload],
    mode_done: Callable[[list[dict[str, Any]]], None],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of `family`'s converted transformers model (`ir_stack.bench.hf_steps`), and
    its facts: the parts converted, and the modes that could not run with the reason."""
    from . import hf_steps
    from .hf_families import convert

    name = hf_steps.model_name(family, args.hf_layers)
    model = hf_steps.build_model(family, args.hf_layers)
    setup = hf_steps.prepare(name, model, lambda m: convert(family, m), workloads, args.context)
    rows, missing = hf_steps.run_modes(setup, hf_steps.MODES, args.iters, mode_done)
    facts = {"model": name, "converted": setup.conversion, "not_run": missing}
    return rows, facts


def model_config(args: argparse.Namespace) -> LlamaConfig:
    base = MODELS[args.model]
    config = dataclasses.replace(base, max_positions=max(args.prefill, args.context + 1))
    return config.with_fp8() if args.fp8 else config


def fusion_config(args: argparse.Namespace, device: torch.device) -> tuple[str, LlamaConfig]:
    """The fusion rows' model: its name in the rows, and its configuration."""
    base = FUSION_SIZES["cuda" if device.type == "cuda" else "cpu"][0]
    positions = max(args.fusion_prefill, args.context + 1)
    if device.type != "cuda":
        return "qwen3 tiny", dataclasses.replace(base, max_positions=positions)
    name = f"qwen3-4b, {args.fusion_layers} layers"
    return name, dataclasses.replace(base, num_layers=args.fusion_layers, max_positions=positions)


def workloads_of(batches: Sequence[int], prefill: int) -> list[Workload]:
    """A decode step of each batch size, then a prefill of `prefill` tokens (0: none)."""
    workloads = [Workload(f"decode b={b}", b, 1) for b in batches]
    return workloads + ([Workload(f"prefill {prefill}", 1, prefill)] if prefill else [])


def build_setup(
    args: argparse.Namespace,
    device: torch.device,
    config: LlamaConfig | None = None,
    batches_text: str | None = None,
    prefill: int | None = None,
) -> Setup:
    """The inputs and caches of every workload: of the main model (`model_config`), or of
    `config` with its own decode batches and prompt."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    batches = [int(b) for b in (batches_text or args.batches).split(",")]
    prefill = args.prefill if prefill is None else prefill
    workloads = workloads_of(batches, prefill)
    setup = Setup(config or model_config(args), device, dtype, args.context, workloads)
    generator = torch.Generator(device=device).manual_seed(7)
    c = setup.config
    for w in workloads:
        ids = torch.randint(
            0, c.vocab_size, (w.batch, w.tokens), device=device, generator=generator
        )
        if w.is_decode:
            positions = torch.full((w.batch, 1), args.context, device=device)
        else:
            positions = torch.arange(w.tokens, device=device).repeat(w.batch, 1)
        setup.inputs[w.name] = (ids, positions)
    shape = (max(batches), args.context + 1, c.num_kv_heads, c.head_dim)
    setup.decode_cache = [
        (
            torch.randn(shape, device=device, dtype=dtype, generator=generator),
            torch.randn(shape, device=device, dtype=dtype, generator=generator),
        )
        for _ in range(c.num_layers)
    ]
    if prefill:
        prefill_shape = (1, prefill, c.num_kv_heads, c.head_dim)
        setup.prefill_cache = [
            (
                torch.zeros(prefill_shape, device=device, dtype=dtype),
                torch.zeros(prefill_shape, device=device, dtype=dtype),
            )
            for _ in range(c.num_layers)
        ]
    return setup


def build_model(setup: Setup, *, plain_torch: bool = False) -> LlamaModel:
    model = LlamaModel(setup.config, plain_torch=plain_torch, device=setup.device)
    return model.to(setup.dtype).eval()


@contextmanager
def native_only() -> Iterator[None]:
    with ir_dispatch.priority({op.name: ["native"] for op in ops}):
        yield


def piecewise_config(mode: CUDAGraphMode, cache_dir: Path | None) -> Config:
    return Config(piecewise=CompilationConfig(cudagraph_mode=mode, cache_dir=cache_dir))


class FullGraphCeiling:
    """The eager model captured whole, one CUDA graph per decode workload."""

    def __init__(self, model: LlamaModel, setup: Setup) -> None:
        self.graphs: dict[str, tuple[torch.cuda.CUDAGraph, Tensor]] = {}
        for w in setup.workloads:
            if not w.is_decode:
                continue
            ids, positions = setup.inputs[w.name]
            cache = setup.cache_for(w)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    model(ids, positions, cache)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = model(ids, positions, cache)
            self.graphs[w.name] = (graph, out)

    def call(self, workload: Workload) -> Tensor | None:
        entry = self.graphs.get(workload.name)
        if entry is None:
            return None
        entry[0].replay()
        return entry[1]


def run_modes(
    args: argparse.Namespace,
    setup: Setup,
    mode_done: Callable[[list[dict[str, Any]]], None] = lambda rows: None,
    *,
    modes: Sequence[str] | None = None,
    model_name: str | None = None,
) -> list[dict[str, Any]]:
    """Time every mode (``--modes``, or `modes`) on every workload (errors are against eager
    native); `mode_done` gets the rows so far after each mode. Rows name the model
    `model_name` (default: ``--model``)."""
    on_cuda = setup.device.type == "cuda"
    asked = args.modes.split(",") if modes is None else list(modes)
    modes = [m for m in asked if on_cuda or "CUDA graph" not in m]
    name = model_name or args.model + (" fp8" if args.fp8 else "")
    model = build_model(setup)
    plain = (
        build_model(setup, plain_torch=True) if any("torch.compile" in m for m in modes) else None
    )
    rows: list[dict[str, Any]] = []
    reference: dict[str, Tensor] = {}
    with torch.no_grad():
        with native_only():
            for w in setup.workloads:
                ids, positions = setup.inputs[w.name]
                reference[w.name] = model(ids, positions, setup.cache_for(w)).float()
        for mode in modes:
            started = time.perf_counter()
            counters.reset()
            call = make_mode(mode, model, plain, setup, args)
            for w in setup.workloads:
                ids, positions = setup.inputs[w.name]
                cache = setup.cache_for(w)

                step = functools.partial(call, w, ids, positions, cache)

                if mode == "eager native":
                    with native_only():
                        out, ms = step(), timing.mean_ms(step, setup.device, args.iters)
                else:
                    out = step()
                    if out is None:
                        continue
                    error = float((out.float() - reference[w.name]).abs().max())
                    ms = timing.mean_ms(step, setup.device, args.iters)
                row = workload_row(name, mode, w, ms, 0.0 if mode == "eager native" else error)
                rows.append(row)
                print(f"{mode:>30} {w.name:>14} {ms:9.3f} ms  err {row['max_abs_error']:.3g}")
            if mode == "torch.compile reduce-overhead":
                stamp(rows, mode, "cudagraph_skips", cudagraph_skips())
            if mode == AUTOTUNED:
                stamp(rows, mode, "autotune_changed", autotune_changes())
            if mode in FUSION_MODES:
                stamp(rows, mode, "fusions_fired", rotary_fusions_fired())
            print(f"{mode}: {time.perf_counter() - started:.0f} s", flush=True)
            mode_done(rows)
    return rows


def workload_row(model: str, mode: str, w: Workload, ms: float, error: float) -> dict[str, Any]:
    """A result row: `mode`'s milliseconds a call of `w` and its logits' largest error."""
    return {
        "model": model,
        "mode": mode,
        "workload": w.name,
        "batch": w.batch,
        "tokens": w.tokens,
        "ms": ms,
        "max_abs_error": error,
    }


def stamp(rows: list[dict[str, Any]], mode: str, key: str, value: object) -> None:
    """Set `key` to `value` in each of `rows` that `mode` measured."""
    for row in rows:
        if row["mode"] == mode:
            row[key] = value


def cudagraph_skips() -> int:
    """How many compiled graphs Inductor ran without its CUDA graphs (mutated inputs such as
    the KV cache, ops tagged cudagraph_unsafe): its ``cudagraph_skips`` counter."""
    return int(torch._dynamo.utils.counters["inductor"]["cudagraph_skips"])


def rotary_fusions_fired() -> dict[str, int]:
    """How often each rotary fusion fired in the pieces ir-piecewise compiled since the
    counters were reset (identical layers compile once, so once for all of them)."""
    fired: dict[str, int] = {}
    for applied in counters.fusions_applied.values():
        for pattern in (QK_NORM_ROPE_PATTERN, ROPE_KVCACHE_PATTERN):
            if applied.get(pattern):
                fired[pattern] = fired.get(pattern, 0) + applied[pattern]
    return fired


def autotune_changes() -> list[str]:
    """The autotuned choices that differ from the priority's in the pieces compiled or loaded
    since the counters were reset, one line each: compile range, op, arguments, the
    priority's choice -> the measured one, and the times."""
    lines = set()
    for label, decisions in counters.autotune_decisions.items():
        for decision in decisions.values():
            if decision.changed:
                lines.add(f"{label}: {decision.summary()}")
    return sorted(lines)


def make_mode(
    mode: str,
    model: LlamaModel,
    plain: LlamaModel | None,
    setup: Setup,
    args: argparse.Namespace,
) -> Callable[[Workload, Tensor, Tensor, KVCache], Tensor | None]:
    """A function running one workload in `mode` (None where the mode does not apply)."""
    if mode in ("eager native", "eager best kernels"):
        return lambda w, ids, pos, cache: model(ids, pos, cache)
    if mode.startswith("torch.compile"):
        assert plain is not None
        torch._dynamo.reset()
        if "reduce-overhead" in mode:
            # the KV caches are inputs the step writes; marked static (their addresses never
            # change), Inductor keeps its CUDA graphs instead of skipping them for the mutation
            for cache in (setup.decode_cache, setup.prefill_cache):
                for k_cache, v_cache in cache:
                    torch._dynamo.mark_static_address(k_cache)
                    torch._dynamo.mark_static_address(v_cache)
        compiled: Callable[..., Tensor] = (
            torch.compile(plain, mode="reduce-overhead")
            if "reduce-overhead" in mode
            else torch.compile(plain)
        )

        def stock(w: Workload, ids: Tensor, pos: Tensor, cache: KVCache) -> Tensor:
            if "reduce-overhead" in mode:
                torch.compiler.cudagraph_mark_step_begin()
            return compiled(ids, pos, cache)

        return stock
    if mode == "full CUDA graph":
        ceiling = FullGraphCeiling(model, setup)
        return lambda w, ids, pos, cache: ceiling.call(w)
    on_cuda = setup.device.type == "cuda"
    if mode in FUSION_MODES:
        force = args.force_fusion or not on_cuda  # on the CPU every op runs natively
        passes = PassConfig(force_fusion=force, **FUSION_MODES[mode])
        graphs = CUDAGraphMode.FULL_AND_PIECEWISE if on_cuda else CUDAGraphMode.NONE
        config = dataclasses.replace(piecewise_config(graphs, args.cache), passes=passes)
        fused = ir_stack_compile(model, config)

        def fusing(w: Workload, ids: Tensor, pos: Tensor, cache: KVCache) -> Tensor:
            # Inductor's graph cache would skip the passes whose fusions the rows count
            with (
                torch._inductor.config.patch(fx_graph_cache=False),
                torch._functorch.config.patch(enable_autograd_cache=False),
            ):
                out: Tensor = fused(ids, pos, cache)
            return out

        return fusing
    if mode == AUTOTUNED:
        graphs = CUDAGraphMode.FULL_AND_PIECEWISE if on_cuda else CUDAGraphMode.NONE
        config = dataclasses.replace(
            piecewise_config(graphs, args.cache), passes=PassConfig(autotune=True)
        )
        tuned = ir_stack_compile(model, config)
        return lambda w, ids, pos, cache: tuned(ids, pos, cache)
    graphs = IR_STACK_GRAPHS[mode] if on_cuda else CUDAGraphMode.NONE
    forward = ir_stack_compile(model, piecewise_config(graphs, args.cache))
    return lambda w, ids, pos, cache: forward(ids, pos, cache)


#: the parameters a result must share with the run that ``--append`` adds to it: the main
#: model and its sizes (the fusion and transformers rows may come from runs of their own)
APPEND_KEYS = ("model", "batches", "prefill", "context", "iters")


def merge_previous(result: results.Result, path: Path) -> list[dict[str, Any]]:
    """The rows of an earlier result at `path` (same device, model and sizes) to keep beside
    the modes run now, whose parameters and facts `result` takes beside its own; ValueError
    where it holds another run."""
    if not path.exists():
        return []
    previous = results.load(path)
    mine = {key: result.params.get(key) for key in APPEND_KEYS}
    if {key: previous.params.get(key) for key in APPEND_KEYS} != mine or (
        previous.device != result.device
    ):
        raise ValueError(
            f"--append: {path} holds a run of another device, model or size ({previous.params}); "
            f"expected {mine}"
        )
    result.params = {**previous.params, **result.params}
    result.facts = {**previous.facts, **result.facts}
    return [r for r in previous.rows if r["mode"] in ALL_MODES]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; writes JSON, markdown and a plot under ``--out``."""
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        common.load_providers()
    where = results.current_device(device.type)
    model = args.model + (" fp8" if args.fp8 else "")
    fusion_name, qwen3 = fusion_config(args, device)
    result = results.new_result(
        "e2e",
        f"End to end: the {model} reference model, "
        f"{'bfloat16' if device.type == 'cuda' else 'float32'}",
        where,
        {"model": model, "batches": args.batches, "prefill": args.prefill}
        | {"context": args.context, "iters": args.iters}
        | (
            {"fusion_model": fusion_name, "fusion_batches": args.fusion_batches}
            | {"fusion_prefill": args.fusion_prefill, "force_fusion": args.force_fusion}
            if args.fusion_rows
            else {}
        )
        | ({"hf": args.hf, "hf_layers": args.hf_layers} if args.hf else {}),
        KEY,
        METRICS,
    )
    result.facts = {
        "config": dataclasses.asdict(model_config(args)),
        **({"fusion_config": dataclasses.asdict(qwen3)} if args.fusion_rows else {}),
        "dtype": "bfloat16" if device.type == "cuda" else "float32",
        "timed_with": "CUDA events" if device.type == "cuda" else "perf_counter",
    }
    path = args.out / f"{result.file_stem}.json"
    try:
        kept = merge_previous(result, path) if args.append else []
    except ValueError as error:
        print(error)
        return 2

    done_rows: list[dict[str, Any]] = []

    def write(rows: list[dict[str, Any]]) -> None:  # after each mode: a killed run keeps some
        rows = done_rows + rows
        done = {(r["model"], r["mode"]) for r in rows}
        merged = [r for r in kept if (r["model"], r["mode"]) not in done] + rows
        result.rows = sorted(merged, key=lambda r: ALL_MODES.index(r["mode"]))
        results.save(result, args.out, render_too=False)

    with tempfile.TemporaryDirectory(prefix="ir-stack-e2e-") as cache:
        args.cache = Path(cache)  # ir-piecewise's compile cache, fresh for this run
        main_setup = build_setup(args, device)
        done_rows += run_modes(args, main_setup, write)
        write([])
        if args.fusion_rows:
            setup = build_setup(args, device, qwen3, args.fusion_batches, args.fusion_prefill)
            modes = list(FUSION_MODES)
            done_rows += run_modes(args, setup, write, modes=modes, model_name=fusion_name)
            write([])
        del main_setup.decode_cache[:], main_setup.prefill_cache[:]
        for family in args.hf:
            rows, facts = hf_rows(args, family, main_setup.workloads, write)
            done_rows += rows
            result.facts.setdefault("hf", {})[family] = facts
            write([])
    print(results.render(result, path).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
