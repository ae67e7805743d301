"""Launch configurations of Triton's flat gated kernel at decode sizes, beside the provider's.

`ir_kernels_triton.pointwise_kernels.flat_config` picks (block, warps) from H100 sweeps; the
quantizing silu at 16 x 28672 runs just past the grid's decode line on an H200. Here every
(block, warps) of the flat kernel is timed at each shape (`launch_gated`'s `flat` argument, so
the outputs are the provider's bit for bit: each element is computed alone), with the empty
Triton kernel, by CUDA-graph replay (`replayed_us`, median) in `--rounds` rotated rounds; the
median round is shown.

Usage (GPU machine, packages and `benchmarks/gpu` on PYTHONPATH):
  python benchmarks/gpu/triton_gated_decode_sweep.py [--rounds 5] [--json OUT]
      [--shapes silu_and_mul_static_quant_fp8:16x28672,...]
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from probe_tools import launch_empty_kernel, median_line, time_rotated, write_results

from ir_kernels_triton import pointwise_kernels as pk

DEFAULT_SHAPES = (
    "silu_and_mul_static_quant_fp8:16x28672",
    "silu_and_mul_static_quant_fp8:16x14336",
    "silu_and_mul_static_quant_fp8:16x5632",
    "silu_and_mul:16x28672",
    "gelu_and_mul:16x28672",
)
BLOCKS = (256, 512, 1024, 2048)
WARPS = (1, 2, 4, 8)
ACTS = {
    "silu_and_mul": pk.ACT_SILU,
    "gelu_and_mul": pk.ACT_GELU,
    "silu_and_mul_static_quant_fp8": pk.ACT_SILU,
}


def candidates(op: str, tokens: int, d: int) -> dict[str, Callable[[], None]]:
    """The provider's launch, every (block, warps), and the empty kernel, on fresh inputs."""
    if op not in ACTS:
        raise SystemExit(f"--shapes: {op!r} is not one of {sorted(ACTS)}")
    quant = op.endswith("quant_fp8")
    x = torch.randn(tokens, 2 * d, device="cuda", dtype=torch.bfloat16)
    scale = torch.tensor([0.05], device="cuda") if quant else None
    dtype = torch.float8_e4m3fn if quant else torch.bfloat16
    out = torch.empty(tokens, d, device="cuda", dtype=dtype)
    run = functools.partial(pk.launch_gated, x, out, ACTS[op], scale)
    found: dict[str, Callable[[], None]] = {"empty": launch_empty_kernel, "provider": run}
    for block in BLOCKS:
        for warps in WARPS:
            if block >= 32 * warps:  # at least one element a thread
                found[f"{block}x{warps}"] = functools.partial(run, flat=(block, warps))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    results: list[dict[str, Any]] = []
    for text in opts.shapes.split(","):
        op, dims = text.split(":")
        tokens, d = (int(v) for v in dims.split("x"))
        fns = candidates(op, tokens, d)
        chosen = pk.flat_config(tokens * d, False, ACTS[op], op.endswith("quant_fp8"), None)
        times = time_rotated(fns, opts.rounds)
        line = median_line(times)
        print(f"{op} {tokens}x{d} (provider: {chosen[0]}x{chosen[1]}): {line}", flush=True)
        results.append(
            {"op": op, "tokens": tokens, "hidden": d, "provider_config": chosen, "us": times}
        )
    write_results(opts.json, results)


if __name__ == "__main__":
    main()
