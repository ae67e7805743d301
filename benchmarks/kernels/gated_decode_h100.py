"""H100 probe (`benchmarks/results/triton-tuning-H100.log`, sections 15 and 17): the flat gated
kernels at the decode shapes where Inductor's kernel led in the grids of rounds 5 and 6, by
block and warps, beside Inductor's kernel in the same process. Times are the fastest of
`--rounds` rounds of CUDA-graph replays, in µs; every configuration's output is checked
bitwise against the default (elementwise: the configuration cannot change it). Run from the
repository root with the packages on `PYTHONPATH` (`source benchmarks/gpu/env.sh`).
"""

import argparse
from collections.abc import Callable
from functools import partial

import torch
from norm_split_h100 import fastest_of_rounds

from ir_kernels_triton import pointwise_kernels as pk
from ir_spec import ops
from ir_stack.bench.kernels import anchors, empty_kernel_us, lift_recompile_limits

CASES = [
    ("gelu_and_mul", pk.ACT_GELU, 1, 5632),
    ("gelu_and_mul", pk.ACT_GELU, 1, 14336),
    ("gelu_and_mul", pk.ACT_GELU, 1, 28672),
    ("gelu_and_mul", pk.ACT_GELU, 16, 14336),
    ("silu_and_mul", pk.ACT_SILU, 1, 14336),
    ("silu_and_mul", pk.ACT_SILU, 16, 5632),
    ("silu_and_mul", pk.ACT_SILU, 16, 14336),
]
CONFIGS = [(b, w) for b in (128, 256, 512, 1024) for w in (1, 2, 4, 8) if b // (32 * w) >= 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--no-sweep",
        action="store_true",
        help="time only the default configuration and Inductor's kernel",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of timings (fastest kept)")
    args = parser.parse_args()
    lift_recompile_limits()
    print(f"empty triton kernel: {empty_kernel_us():.2f} us")
    for name, act, tokens, d in CASES:
        x = torch.randn(tokens, 2 * d, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(tokens, d, device="cuda", dtype=torch.bfloat16)
        op = getattr(ops, name)
        inductor = anchors(op, (x,))["inductor"]
        inductor()
        pk.launch_gated(x, out, act)
        expected = out.clone()
        runs: dict[str, Callable[[], object]] = {
            "inductor": inductor,
            "default": partial(pk.launch_gated, x, out, act),
        }
        for block, warps in [] if args.no_sweep else CONFIGS:
            pk.launch_gated(x, out, act, flat=(block, warps))
            assert torch.equal(out, expected), (block, warps)
            runs[f"{block}x{warps}"] = partial(pk.launch_gated, x, out, act, flat=(block, warps))
        best = fastest_of_rounds(runs, args.rounds)
        default = pk.flat_config(tokens * d, False, act)
        ranked = sorted(best.items(), key=lambda kv: kv[1])[:6]
        cells = " ".join(f"{k}={t:.2f}" for k, t in ranked)
        print(
            f"   {name} {tokens}x{d}: default {default} {best['default']:.2f} "
            f"inductor {best['inductor']:.2f} | fastest {cells}",
            flush=True,
        )


if __name__ == "__main__":
    main()
