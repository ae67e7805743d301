"""Decode-size rows of dynamic fp8 quantization on a thread-block cluster, beside one program a row.

Triton's per-token quantizer ran one program a row, and at 16 x 8192 on an H200 it sat past the
issue's 1 µs line (round 72's grid: 1.73 µs against the empty kernel's 0.67) while the cuda
provider, which spreads such rows over a cluster of four blocks, ran 1.53. A row's peak is a
maximum, exact in any order, so a row spread over `S` blocks that exchange their peaks
(`ir_kernels_triton.cluster_norm.cluster_quant_kernel`, the norms' mbarrier exchange) gives the
one-program kernel's bits whatever its slices.

Every candidate goes through `dynamic_quant_kernels.launch_dynamic_quant`: `provider` (its rule),
`one-wW` (one program a row of W warps), `cS-wW` (clusters of S blocks of W warps), beside the
empty Triton kernel. Each output (the fp8 rows and the scales) is checked bitwise against one
program a row at the default warps before timing. Times: CUDA-graph replays (`replayed_us`,
median) in `--rounds` rotated rounds; the median round is printed.

Usage (GPU machine, packages and `benchmarks/gpu` on PYTHONPATH):
  python benchmarks/gpu/triton_quant_cluster_probe.py [--tokens 1,4,16] [--hidden 2048,4096,8192]
      [--clusters 2,4,8] [--warps 1,2,4] [--rounds 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from probe_tools import launch_empty_kernel, median_line, time_rotated, write_results

from ir_kernels_triton import dynamic_quant_kernels as dq

ONE_PROGRAM_WARPS = (4, 8, 16, 32)


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def candidates(
    tokens: int, width: int, clusters: list[int], warps: list[int]
) -> dict[str, Callable[[], None]]:
    """The provider's launch, one program a row over `ONE_PROGRAM_WARPS`, and every cluster
    of `clusters` blocks of `warps` warps that leaves a block at least one 16-byte vector a
    thread; each checked bitwise against one program a row at the default warps."""
    x = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16) * 3
    x[:, width // 3] = 40.0  # one peak a row, in one block's slice
    q = torch.empty(tokens, width, device="cuda", dtype=torch.float8_e4m3fn)
    scale = torch.empty(tokens, 1, device="cuda", dtype=torch.float32)
    run = functools.partial(dq.launch_dynamic_quant, x, None, q, scale)

    def result(fn: Callable[[], None]) -> tuple[torch.Tensor, torch.Tensor]:
        q.fill_(0)
        scale.fill_(0)
        fn()
        torch.cuda.synchronize()
        return q.view(torch.uint8).clone(), scale.clone()

    reference = result(functools.partial(run, cluster=1))
    found: dict[str, Callable[[], None]] = {"empty": launch_empty_kernel, "provider": run}
    for w in ONE_PROGRAM_WARPS:
        found[f"one-w{w}"] = functools.partial(run, cluster=1, num_warps=w)
    for s in clusters:
        for w in warps:
            if width // s >= 32 * w * 8:
                found[f"c{s}-w{w}"] = functools.partial(run, cluster=s, num_warps=w)
    for name, fn in found.items():
        if name == "empty":
            continue
        got = result(fn)
        if not (torch.equal(got[0], reference[0]) and torch.equal(got[1], reference[1])):
            raise SystemExit(f"{name} at {tokens}x{width}: outputs differ from one program a row")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tokens", default="1,4,16")
    parser.add_argument("--hidden", default="2048,4096,8192")
    parser.add_argument("--clusters", default="2,4,8")
    parser.add_argument("--warps", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    results: list[dict[str, Any]] = []
    for width in ints(opts.hidden):
        for tokens in ints(opts.tokens):
            fns = candidates(tokens, width, ints(opts.clusters), ints(opts.warps))
            times = time_rotated(fns, opts.rounds)
            line = median_line(times)
            print(f"dynamic_quant_fp8 {tokens}x{width}: {line}", flush=True)
            results.append(
                {"op": "dynamic_quant_fp8", "tokens": tokens, "hidden": width, "us": times}
            )
    write_results(opts.json, results)


if __name__ == "__main__":
    main()
