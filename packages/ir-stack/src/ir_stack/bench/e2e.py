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
  ceiling (prefill attention reads its length on the host, so there is no prefill ceiling).

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
from ir_piecewise import CompilationConfig, CUDAGraphMode
from ir_spec import ops

from ..compiler import compile as ir_stack_compile
from ..config import Config
from ..models import ONE_B, TINY, LlamaConfig, LlamaModel
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
    args = parser.parse_args(argv)
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        parser.error(f"--modes: unknown {sorted(unknown)}; expected some of {list(MODES)}")
    resolve_sizes(parser, args)
    return args


def model_config(args: argparse.Namespace) -> LlamaConfig:
    base = MODELS[args.model]
    config = dataclasses.replace(base, max_positions=max(args.prefill, args.context + 1))
    return config.with_fp8() if args.fp8 else config


def build_setup(args: argparse.Namespace, device: torch.device) -> Setup:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    batches = [int(b) for b in args.batches.split(",")]
    workloads = [Workload(f"decode b={b}", b, 1) for b in batches]
    if args.prefill:
        workloads.append(Workload(f"prefill {args.prefill}", 1, args.prefill))
    setup = Setup(model_config(args), device, dtype, args.context, workloads)
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
    if args.prefill:
        prefill_shape = (1, args.prefill, c.num_kv_heads, c.head_dim)
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
) -> list[dict[str, Any]]:
    """Time every mode on every workload (errors are against eager native); `mode_done` gets
    the rows so far after each mode."""
    on_cuda = setup.device.type == "cuda"
    modes = [m for m in args.modes.split(",") if on_cuda or "CUDA graph" not in m]
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
                row: dict[str, Any] = {
                    "model": args.model + (" fp8" if args.fp8 else ""),
                    "mode": mode,
                    "workload": w.name,
                    "batch": w.batch,
                    "tokens": w.tokens,
                    "ms": ms,
                    "max_abs_error": 0.0 if mode == "eager native" else error,
                }
                rows.append(row)
                print(f"{mode:>30} {w.name:>14} {ms:9.3f} ms  err {row['max_abs_error']:.3g}")
            if mode == "torch.compile reduce-overhead":
                # Inductor skips CUDA graphs for some graphs (mutated inputs such as the KV
                # cache, ops tagged cudagraph_unsafe) and counts it
                skips = int(torch._dynamo.utils.counters["inductor"]["cudagraph_skips"])
                for row in rows:
                    if row["mode"] == mode:
                        row["cudagraph_skips"] = skips
            print(f"{mode}: {time.perf_counter() - started:.0f} s", flush=True)
            mode_done(rows)
    return rows


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
    graphs = IR_STACK_GRAPHS[mode] if setup.device.type == "cuda" else CUDAGraphMode.NONE
    forward = ir_stack_compile(model, piecewise_config(graphs, args.cache))
    return lambda w, ids, pos, cache: forward(ids, pos, cache)


def merge_previous(result: results.Result, path: Path) -> list[dict[str, Any]]:
    """The rows of an earlier result at `path` (same model, device and sizes) to keep beside
    the modes run now; ValueError where it holds another run."""
    if not path.exists():
        return []
    previous = results.load(path)
    if previous.params != result.params or previous.device != result.device:
        raise ValueError(
            f"--append: {path} holds a run of another device, model or size ({previous.params}); "
            f"expected {result.params}"
        )
    return [r for r in previous.rows if r["mode"] in MODES]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; writes JSON, markdown and a plot under ``--out``."""
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        common.load_providers()
    where = results.current_device(device.type)
    model = args.model + (" fp8" if args.fp8 else "")
    result = results.new_result(
        "e2e",
        f"End to end: the {model} reference model, "
        f"{'bfloat16' if device.type == 'cuda' else 'float32'}",
        where,
        {"model": model, "batches": args.batches, "prefill": args.prefill}
        | {"context": args.context, "iters": args.iters},
        KEY,
        METRICS,
    )
    result.facts = {
        "config": dataclasses.asdict(model_config(args)),
        "dtype": "bfloat16" if device.type == "cuda" else "float32",
        "timed_with": "CUDA events" if device.type == "cuda" else "perf_counter",
    }
    path = args.out / f"{result.file_stem}.json"
    try:
        kept = merge_previous(result, path) if args.append else []
    except ValueError as error:
        print(error)
        return 2

    def write(rows: list[dict[str, Any]]) -> None:  # after each mode: a killed run keeps some
        done = {r["mode"] for r in rows}
        merged = [r for r in kept if r["mode"] not in done] + rows
        result.rows = sorted(merged, key=lambda r: MODES.index(r["mode"]))
        results.save(result, args.out, render_too=False)

    with tempfile.TemporaryDirectory(prefix="ir-stack-e2e-") as cache:
        args.cache = Path(cache)  # ir-piecewise's compile cache, fresh for this run
        write(run_modes(args, build_setup(args, device), write))
    print(results.render(result, path).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
