"""Probe: the cuda gated activations streamed from DRAM, by elements a thread and threads a
block, beside this tree's launch, provider triton and Inductor in one process.

The probe build is this tree's kernel source with
`benchmarks/results/cuda-gated-streamed-probe.diff` applied (`patch -p1 -d DIR`), built as
``torch.ops.ir_cuda_probe`` (`cuda_ab.build_all`): its
streamed 16-bit gates take the launch named by ``IR_CUDA_PROBE_STREAMED="PER,THREADS"`` (PER
elements a thread: 4, 8, 16 or 32). Every configuration's output is checked bitwise against
this tree's op; times are CUDA-graph replays (`do_bench_cudagraph`, median, µs), the fastest of
`--rounds` rotated rounds, with the fraction of the copy bandwidth measured in the same process.

Usage (GPU machine, packages on PYTHONPATH, run from benchmarks/gpu):
    python cuda_gated_streamed_probe.py --probe-csrc DIR [--ops silu_and_mul,gelu_and_mul]
        [--shapes 16384x28672,...] [--configs 4x256,8x128,...] [--rounds 2] [--json OUT]
        [--build-root ROOT]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from cuda_ab import build_all, build_other, cuda_impls
from probe_tools import fastest_line, time_rotated, write_results

from ir_spec import ops
from ir_stack.bench.kernels import anchors, copy_bandwidth

PROBE_ENV = "IR_CUDA_PROBE_STREAMED"
SHAPES = "16384x28672,16384x14336,16384x5632,4096x28672"
CONFIGS = "4x256,8x256,8x128,8x64,16x128,16x64,32x64,32x32"


def probe_launch(
    namespace: Any, name: str, x: torch.Tensor, out: torch.Tensor, config: str
) -> Callable[[], None]:
    """A launch of the probe build's op with `config` ("PERxTHREADS") in force while it runs
    (a CUDA-graph capture records the launch the variable selects)."""
    per, threads = config.split("x")

    def run() -> None:
        os.environ[PROBE_ENV] = f"{per},{threads}"
        try:
            if name == "silu_and_mul":
                namespace.silu_and_mul_out(out, x)
            else:
                namespace.gelu_and_mul_out(out, x, 0)
        finally:
            del os.environ[PROBE_ENV]

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--probe-csrc", type=Path, required=True)
    parser.add_argument("--ops", default="silu_and_mul,gelu_and_mul")
    parser.add_argument("--shapes", default=SHAPES, help="TOKENSxWIDTH,... (WIDTH: outputs a row)")
    parser.add_argument("--configs", default=CONFIGS, help="PERxTHREADS,...")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--build-root",
        type=Path,
        help="build (or load) the probe under ROOT/probe, e.g. one started earlier by "
        "`cuda_ab.py --build-only probe=DIR --build-root ROOT`",
    )
    args = parser.parse_args()
    if args.build_root:
        probe = build_other(args.probe_csrc, "ir_cuda_probe", args.build_root / "probe")
    else:
        probe = build_all({"probe": args.probe_csrc})["probe"]
    impls = cuda_impls()
    if not impls.SUPPORTED:
        raise SystemExit(f"provider cuda unavailable: {impls.REASON}")
    copy = copy_bandwidth()
    print(f"copy {copy:.0f} GB/s", flush=True)
    results: list[dict[str, Any]] = []
    for name in args.ops.split(","):
        op = getattr(ops, name)
        for shape in args.shapes.split(","):
            tokens, width = map(int, shape.split("x"))
            x = torch.randn(tokens, 2 * width, device="cuda", dtype=torch.bfloat16)
            expected = op.impls["cuda"].fn(x)
            out = torch.empty_like(expected)
            candidates: dict[str, Callable[[], Any]] = {
                "cuda": partial(op.impls["cuda"].fn, x),
                "triton": partial(op.impls["triton"].fn, x),
                "inductor": anchors(op, (x,))["inductor"],
            }
            for config in args.configs.split(","):
                run = probe_launch(probe, name, x, out, config)
                run()
                if not torch.equal(out, expected):
                    raise SystemExit(f"{name} {shape} {config}: output differs from the op's")
                candidates[config] = run
            times = time_rotated(candidates, args.rounds)
            traffic = 3 * tokens * width * x.element_size()
            fraction = {n: traffic / (min(t) * 1e-6) / 1e9 / copy for n, t in times.items()}
            print(f"{name} {shape}: {fastest_line(times)}", flush=True)
            cells = " ".join(f"{n}={f:.3f}" for n, f in fraction.items())
            print(f"   of copy: {cells}", flush=True)
            results.append({"op": name, "shape": shape, "times_us": times, "of_copy": fraction})
    write_results(args.json, [{"copy_gbps": copy}, *results])


if __name__ == "__main__":
    main()
