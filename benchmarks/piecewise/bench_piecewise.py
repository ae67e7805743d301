"""Decode-step latency of the toy model (16 layers) on a GPU: eager, piecewise, piecewise with
CUDA graphs and one full CUDA graph; cold and warm (cache) compile time.

    python benchmarks/piecewise/bench_piecewise.py --out DIR

Writes ``DIR/piecewise-<gpu>.json`` and ``.md``. The warm start runs in a second process with the
same cache directory.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "packages" / "ir-piecewise" / "tests"))

from toy_model import SPLITTING_OPS, ToyModel  # noqa: E402

import ir_dispatch  # noqa: E402,F401
import ir_kernels_triton  # noqa: E402,F401  (the Triton providers, as installed packages would load)
import ir_piecewise  # noqa: E402
from ir_piecewise import CompilationConfig, CUDAGraphMode, counters  # noqa: E402


def build(args: argparse.Namespace) -> ToyModel:
    return ToyModel(args.hidden, args.layers).to("cuda", torch.bfloat16).eval()


def config(args: argparse.Namespace, mode: CUDAGraphMode) -> CompilationConfig:
    return CompilationConfig(
        splitting_ops=SPLITTING_OPS,
        cudagraph_mode=mode,
        cudagraph_capture_sizes=tuple(args.sizes),
        cache_dir=args.cache,
    )


def inputs(args: argparse.Namespace, n: int) -> torch.Tensor:
    return torch.randn(n, args.hidden, device="cuda", dtype=torch.bfloat16)


def first_call_seconds(args: argparse.Namespace) -> dict[str, Any]:
    """Seconds from `compile` to the first output (trace + compile or cache load)."""
    model = build(args)
    x = inputs(args, max(args.sizes))
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        ir_piecewise.compile(model, config(args, CUDAGraphMode.NONE))(x)
    torch.cuda.synchronize()
    return {"seconds": time.perf_counter() - start, "counters": counters.as_dict()}


def latency_us(fn: Any, x: torch.Tensor, iters: int) -> float:
    for _ in range(3):
        fn(x)
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(iters):
        fn(x)
    end.record()
    torch.cuda.synchronize()
    return float(begin.elapsed_time(end)) * 1e3 / iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--phase", choices=["all", "warm"], default="all")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.cache = args.cache or args.out / "compile-cache"
    if args.phase == "warm":
        print(json.dumps(first_call_seconds(args)))
        return

    cold = first_call_seconds(args)
    done = subprocess.run(
        [sys.executable, __file__, "--phase", "warm", "--out", str(args.out),
         "--cache", str(args.cache), "--layers", str(args.layers), "--hidden", str(args.hidden),
         "--sizes", *map(str, args.sizes)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    warm = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"cold {cold['seconds']:.1f} s, warm {warm['seconds']:.1f} s", flush=True)

    model = build(args)
    modes: dict[str, Any] = {"eager": model}
    for name, mode in (
        ("piecewise", CUDAGraphMode.NONE),
        ("piecewise + CUDA graphs", CUDAGraphMode.PIECEWISE),
        ("full CUDA graph", CUDAGraphMode.FULL),
    ):
        compiled = ir_piecewise.compile(model, config(args, mode))
        with torch.no_grad():
            compiled(inputs(args, max(args.sizes)))
        modes[name] = compiled
    rows: list[dict[str, Any]] = []
    with torch.no_grad():
        for n in args.sizes:
            x = inputs(args, n)
            expected = model(x).float()
            for name, fn in modes.items():
                error = (fn(x).float() - expected).abs().max().item()
                us = latency_us(fn, x, args.iters)
                rows.append({"mode": name, "tokens": n, "us": us, "max_abs_err": error})
                print(f"{name:>24} n={n:<4} {us:9.1f} us  err {error:.3g}", flush=True)

    gpu = torch.cuda.get_device_name().replace("NVIDIA ", "").split()[0]
    result = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "layers": args.layers,
        "hidden": args.hidden,
        "cold_compile_s": cold["seconds"],
        "warm_start_s": warm["seconds"],
        "cold_counters": cold["counters"],
        "warm_counters": warm["counters"],
        "rows": rows,
    }
    (args.out / f"piecewise-{gpu}.json").write_text(json.dumps(result, indent=2))
    lines = [
        f"# Piecewise compilation — toy model, {args.layers} layers, hidden {args.hidden}, bf16",
        "",
        f"{result['gpu']}, torch {torch.__version__}. Decode-step latency (µs per forward, "
        f"{args.iters} back-to-back calls timed with CUDA events).",
        "",
        "| tokens | " + " | ".join(modes) + " |",
        "|---:|" + "---:|" * len(modes),
    ]
    for n in args.sizes:
        cells = [f"{r['us']:.1f}" for r in rows if r["tokens"] == n]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Cold compile (trace + compile every piece, first output): {cold['seconds']:.1f} s "
        f"({cold['counters']['num_backend_compilations']} compilations).",
        f"Warm start (new process, same cache directory): {warm['seconds']:.1f} s "
        f"({warm['counters']['num_backend_compilations']} compilations, "
        f"{warm['counters']['num_cache_hits']} cache hits); "
        f"{cold['seconds'] / warm['seconds']:.1f}x faster.",
    ]
    (args.out / f"piecewise-{gpu}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
