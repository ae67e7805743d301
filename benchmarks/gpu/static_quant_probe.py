"""The elementwise fp8 quantization's prologue in four forms, beside Triton, at decode sizes.

`static_quant_probe.cu` holds the kernel as `ir_cuda` writes it (rows on the grid's y, the block
size read from `blockDim`, an exit before any load, the scale loaded after the row) and three
variants: the scale's load first; the block size a constant and the loads predicated instead of
an exit; contiguous rows as one flat run, as Triton's kernel. Each is checked bitwise against the
first and timed by CUDA-graph replay (`do_bench_cudagraph`, median; fastest of `--rounds`, each
round in a rotated order) beside Triton's kernel and the `ir_cuda` op where the package builds.

Usage (GPU machine): python benchmarks/gpu/static_quant_probe.py [--rounds 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import ctypes
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import probe_tools as tools
import torch

from ir_kernels_triton.pointwise_kernels import launch_static_quant

SOURCE = Path(__file__).with_name("static_quant_probe.cu")
FP8 = torch.float8_e4m3fn
VARIANTS = [("exit first (ir_cuda)", 0), ("scale first", 1), ("const block", 2), ("flat", 3)]
SHAPES = [(1, 2048), (1, 4096), (1, 8192), (16, 2048), (16, 4096), (16, 8192), (64, 2048)]


def run_case(
    lib: ctypes.CDLL, kernels: Any, tokens: int, hidden: int, rounds: int
) -> dict[str, Any]:
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) * 3
    scale = torch.tensor([0.05], device="cuda")
    outs = {name: torch.empty(tokens, hidden, device="cuda", dtype=FP8) for name, _ in VARIANTS}

    candidates: dict[str, Callable[[], None]] = {
        n: tools.probe_call(lib, v, x, outs[n], scale, tokens, hidden) for n, v in VARIANTS
    }
    tq = torch.empty(tokens, hidden, device="cuda", dtype=FP8)
    candidates["triton"] = lambda: launch_static_quant(x, scale, tq)
    if kernels is not None:
        outs["ir_cuda op"] = torch.empty(tokens, hidden, device="cuda", dtype=FP8)
        cq = outs["ir_cuda op"]
        candidates["ir_cuda op"] = lambda: kernels.static_quant_fp8_out(cq, x, scale)
    for run in candidates.values():
        run()
    torch.cuda.synchronize()
    kept = outs[VARIANTS[0][0]].view(torch.uint8)
    for name, q in outs.items():
        assert torch.equal(q.view(torch.uint8), kept), f"{name}: outputs differ"
    return tools.time_rotated(candidates, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    lib = tools.build_probe(SOURCE, Path(tempfile.mkdtemp()))
    kernels = tools.ir_cuda_kernels()
    torch.manual_seed(0)
    results = []
    for tokens, hidden in SHAPES:
        times = run_case(lib, kernels, tokens, hidden, args.rounds)
        results.append({"tokens": tokens, "hidden": hidden, "times_us": times})
        print(f"static_quant_fp8 {tokens}x{hidden}: {tools.fastest_line(times, 3)}", flush=True)
    tools.write_results(args.json, results)


if __name__ == "__main__":
    main()
