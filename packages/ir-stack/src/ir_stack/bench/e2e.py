"""End-to-end benchmark of the reference model: decode-step and prefill latency in every mode,
and how long a compiled model takes to be ready, cold and warm.

Modes, in one process with the same weights:

- ``eager native``: IR ops with their native implementations;
- ``eager best kernels``: IR ops with the kernels selected for this machine;
- ``torch.compile``, ``torch.compile reduce-overhead``: stock ``torch.compile`` of the same model
  written in plain PyTorch (``LlamaModel(plain_torch=True)``);
- ``ir_stack piecewise``: ``ir_stack.compile`` split at attention, each piece replayed as a
  CUDA graph (``CUDAGraphMode.PIECEWISE``);
- ``ir_stack``: ``ir_stack.compile`` with ``FULL_AND_PIECEWISE``: decode steps (capturable
  attention) replay as one CUDA graph, prefill piecewise;
- ``full CUDA graph``: the eager best-kernel model captured whole per decode batch size, the
  ceiling (prefill attention reads its length on the host, so there is no prefill ceiling).

Decode steps attend over `context` cached positions (random keys and values); prefill is one
sequence of `prefill` tokens. Each time is the mean of `iters` back-to-back calls between CUDA
events after warm-up calls. Startup: seconds from ``ir_stack.compile`` to the first outputs of
every workload, in a fresh process with empty caches (cold: ir-piecewise's, Inductor's and
Triton's) and again in a fresh process reusing them (warm: the saved traces and pieces are
loaded, and Dynamo does not run).

    python -m ir_stack.bench.e2e --model 1b --out DIR    (or: ir-stack bench --only e2e)

Writes ``DIR/e2e-<model>-<device>.json``, ``.md`` and ``.png``.
"""

import argparse
import dataclasses
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import ir_dispatch
from ir_piecewise import CompilationConfig, CUDAGraphMode, counters
from ir_spec import ops

from ..compiler import compile as ir_stack_compile
from ..config import Config
from ..models import ONE_B, TINY, LlamaConfig, LlamaModel
from .e2e_report import markdown, write_report

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
KVCache = list[tuple[Tensor, Tensor]]
#: the CUDA graph mode of each ir_stack mode
IR_STACK_GRAPHS = {
    "ir_stack piecewise": CUDAGraphMode.PIECEWISE,
    "ir_stack": CUDAGraphMode.FULL_AND_PIECEWISE,
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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", choices=sorted(MODELS), default="1b")
    parser.add_argument("--fp8", action="store_true", help="fp8 static-quantized linears")
    parser.add_argument("--batches", default="1,8,32,128", help="decode batch sizes")
    parser.add_argument("--prefill", type=int, default=2048, help="prefill tokens (0: none)")
    parser.add_argument("--context", type=int, default=512, help="cached positions at decode")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--skip-startup", action="store_true")
    parser.add_argument(
        "--append",
        action="store_true",
        help="keep the rows (and startup) of an existing result of the same model and device "
        "for the modes not run now",
    )
    parser.add_argument(
        "--phase", choices=["all", "startup"], default="all", help=argparse.SUPPRESS
    )
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        parser.error(f"--modes: unknown {sorted(unknown)}; expected some of {list(MODES)}")
    for name in ("prefill", "context", "iters"):
        if getattr(args, name) < (0 if name == "prefill" else 1):
            parser.error(f"--{name}: got {getattr(args, name)}; expected a positive number")
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


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_ms(fn: Callable[[], Any], device: torch.device, iters: int, warmup: int = 3) -> float:
    """Mean milliseconds per call of `iters` back-to-back calls."""
    for _ in range(warmup):
        fn()
    sync(device)
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - start) * 1e3 / iters
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return float(begin.elapsed_time(end)) / iters


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
                        out, ms = step(), time_ms(step, setup.device, args.iters)
                else:
                    out = step()
                    if out is None:
                        continue
                    error = float((out.float() - reference[w.name]).abs().max())
                    ms = time_ms(step, setup.device, args.iters)
                row: dict[str, Any] = {
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


def startup(args: argparse.Namespace) -> dict[str, Any]:
    """Seconds from ``ir_stack.compile`` to the first output of every workload."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    setup = build_setup(args, device)
    model = build_model(setup)
    graphs = IR_STACK_GRAPHS["ir_stack"] if device.type == "cuda" else CUDAGraphMode.NONE
    sync(device)
    start = time.perf_counter()
    first_calls: dict[str, float] = {}
    with torch.no_grad():
        forward = ir_stack_compile(model, piecewise_config(graphs, args.cache))
        for w in setup.workloads:
            ids, positions = setup.inputs[w.name]
            called = time.perf_counter()
            forward(ids, positions, setup.cache_for(w))
            sync(device)
            first_calls[w.name] = time.perf_counter() - called
    return {
        "seconds": time.perf_counter() - start,
        "first_call_seconds": first_calls,
        "counters": counters.as_dict(),
    }


def run_startup(args: argparse.Namespace, cache_root: Path) -> dict[str, Any]:
    """Cold then warm startup, each in a fresh process sharing the cache directories."""
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(cache_root / "inductor"),
        "TRITON_CACHE_DIR": str(cache_root / "triton"),
    }
    command = [
        sys.executable, "-m", "ir_stack.bench.e2e", "--phase", "startup", "--out", str(args.out),
        "--cache", str(cache_root / "ir-piecewise"), "--model", args.model,
        "--batches", args.batches, "--prefill", str(args.prefill), "--context", str(args.context),
        *(["--fp8"] if args.fp8 else []),
    ]  # fmt: skip
    result: dict[str, Any] = {}
    for phase in ("cold", "warm"):
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{phase} startup failed:\n{done.stderr[-4000:]}")
        result[phase] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"startup {phase}: {result[phase]['seconds']:.1f} s", flush=True)
    return result


def merge_previous(result: dict[str, Any], path: Path) -> None:
    """Fill `result`'s rows and startup from an earlier result at `path` (same model, device
    and sizes); the caller replaces the rows of the modes it runs again."""
    if not path.exists():
        return
    previous = json.loads(path.read_text())
    same = ("model", "device", "config", "context")
    if any(previous.get(k) != result[k] for k in same):
        raise ValueError(
            f"--append: {path} holds a run of another model, device or size; expected the same "
            f"{', '.join(same)}"
        )
    result["rows"] = [r for r in previous["rows"] if r["mode"] in MODES]
    result["startup"] = previous.get("startup")


def device_slug(device: torch.device) -> str:
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name().replace("NVIDIA ", "")
    return name.split()[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; writes JSON, markdown and a plot under ``--out``."""
    args = parse_args(argv)
    if args.phase == "startup":
        print(json.dumps(startup(args)))
        return 0
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"e2e-{args.model}{'-fp8' if args.fp8 else ''}-{device_slug(device)}"
    result: dict[str, Any] = {
        "model": args.model + (" fp8" if args.fp8 else ""),
        "config": dataclasses.asdict(model_config(args)),
        "device": (
            torch.cuda.get_device_name()
            if device.type == "cuda"
            else f"CPU ({platform.machine()}, {os.cpu_count()} cores)"
        ),
        "dtype": "bfloat16" if device.type == "cuda" else "float32",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "iters": args.iters,
        "context": args.context,
        "rows": [],
        "startup": None,
    }
    previous = dict(result)
    if args.append:
        merge_previous(previous, stem.with_suffix(".json"))

    def write(rows: list[dict[str, Any]]) -> None:  # after each mode: a killed run keeps some
        done = {m["mode"] for m in rows}
        kept = [r for r in previous["rows"] if r["mode"] not in done]
        result["rows"] = sorted(kept + rows, key=lambda r: MODES.index(r["mode"]))
        result["startup"] = result["startup"] or previous["startup"]
        stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
        stem.with_suffix(".md").write_text(markdown(result))

    with tempfile.TemporaryDirectory(prefix="ir-stack-e2e-") as tmp:
        if not args.skip_startup:
            result["startup"] = run_startup(args, Path(tmp) / "startup")
        # the timed ir_stack modes reuse what the startup runs compiled (same code)
        args.cache = Path(tmp) / "startup" / "ir-piecewise"
        write(run_modes(args, build_setup(args, device), write))
    print(write_report(result, stem).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
