"""Triton's group quant over the L2 by groups per program and warps, beside Inductor's kernel.

At 16384 rows the grid found Triton's 2048-wide configuration (8 groups over 4 warps) 1.5 %
faster than its 8192-wide one (32 over 8) at the same bytes, and ir_cuda's layout probe found
more elements a thread faster once the rows stream from DRAM. This probe times each
configuration (`launch_group_quant(per_program=, num_warps=)`) at the grid's shapes over the L2,
checks each one's fp8 bits and scales against the default's (a group's result is exact whatever
the blocking), and prints the fastest of `--rounds` rounds of CUDA-graph replays (medians,
rotated order) in µs, with Inductor's kernel and the `ir_cuda` op where it builds.

Usage (GPU machine, from the repository root, `source benchmarks/gpu/env.sh`):
  python benchmarks/gpu/triton_group_streamed_probe.py [--rounds 5] [--json OUT]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import probe_tools as tools
import torch

from ir_kernels_triton.dynamic_quant_kernels import default_group_quant_config, launch_group_quant
from ir_spec import ops
from ir_stack.bench.kernels import anchors, lift_recompile_limits

SHAPES = [(4096, 8192), (16384, 2048), (16384, 4096), (16384, 8192)]
GROUP = 128
#: (groups per program, warps): 8 to 64 elements a thread.
CONFIGS = [
    (p, w) for p in (4, 8, 16, 32, 64) for w in (1, 2, 4, 8, 16) if 8 <= p * GROUP // (32 * w) <= 64
]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--without-ir-cuda", action="store_true", help="skip the op's column")
    args = parser.parse_args()
    lift_recompile_limits()
    kernels = None if args.without_ir_cuda else tools.ir_cuda_kernels()
    torch.manual_seed(0)
    results = []
    for tokens, hidden in SHAPES:
        x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) * 3
        groups = hidden // GROUP
        q = torch.empty(tokens, hidden, device="cuda", dtype=torch.float8_e4m3fn)
        s = torch.empty(tokens, groups, device="cuda", dtype=torch.float32)
        launch_group_quant(x, GROUP, q, s)
        expected = (q.view(torch.uint8).clone(), s.clone())
        default = default_group_quant_config(x, GROUP, q, s)
        candidates: dict[str, Callable[[], Any]] = {
            "default": partial(launch_group_quant, x, GROUP, q, s)
        }
        for p, w in [c for c in CONFIGS if c[0] <= groups]:
            q.zero_()
            launch_group_quant(x, GROUP, q, s, per_program=p, num_warps=w)
            assert torch.equal(q.view(torch.uint8), expected[0]), (p, w)
            assert torch.equal(s, expected[1]), (p, w)
            candidates[f"p{p}w{w}"] = partial(
                launch_group_quant, x, GROUP, q, s, per_program=p, num_warps=w
            )
        inductor = anchors(ops.group_quant_fp8, (x, GROUP, False))["inductor"]
        inductor()
        candidates["inductor"] = inductor
        if kernels is not None:
            cq, cs = torch.empty_like(q), torch.empty_like(s)
            candidates["ir_cuda op"] = partial(kernels.group_quant_fp8_out, cq, cs, x, GROUP)
        times = tools.time_rotated(candidates, args.rounds, rep_ms=25)
        results.append(
            {
                "op": "group_quant_fp8",
                "tokens": tokens,
                "hidden": hidden,
                "default": list(default),
                "times_us": times,
            }
        )
        line = tools.fastest_line(times)
        print(f"group_quant_fp8 {tokens}x{hidden} (default p{default[0]}w{default[1]}): {line}")
    tools.write_results(args.json, results)


if __name__ == "__main__":
    main()
