"""Probe: the flat gated kernels over shapes that stream from memory, by block and warps,
beside Inductor's kernel in the same process (`benchmarks/results/triton-tuning-H200.log`,
round 2: in the H200 grid of `4414c47` Inductor's silu ran 3-5 % ahead of both providers, and
the gelu gates stayed under 0.9 of copy). Times are the fastest of `--rounds` rounds of
CUDA-graph replays, in µs, with the fraction of the copy bandwidth measured in the same
process; every configuration's output is checked bitwise against the default. `--row-configs`
adds the row-block kernel (`gated_kernel`, a program per row block; `row8192x16` at 5632-wide
rows is Liger's layout: a row a program over 16 warps), and Liger's own kernel is timed beside
where it is installed. Run from the
repository root with the packages on `PYTHONPATH` (`source benchmarks/gpu/env.sh`) and
`benchmarks/kernels` on it too.
"""

import argparse
from collections.abc import Callable
from functools import partial

import torch
from norm_split_h100 import fastest_of_rounds

from ir_kernels_triton import pointwise_kernels as pk
from ir_spec import ops
from ir_stack.bench.kernels import anchors, copy_bandwidth

ACTS = {"silu_and_mul": pk.ACT_SILU, "gelu_and_mul": pk.ACT_GELU}
SHAPES = ((4096, 14336), (16384, 28672))
CONFIGS = [(b, w) for b in (512, 1024, 2048, 4096) for w in (2, 4, 8, 16) if b >= 32 * w * 2]


def checked(
    label: str, launch: Callable[[], None], out: torch.Tensor, expected: torch.Tensor
) -> Callable[[], None]:
    """`launch`, once it has written `expected` bitwise into a zeroed `out`."""
    out.zero_()
    launch()
    assert torch.equal(out, expected), label
    return launch


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of timings (fastest kept)")
    parser.add_argument("--ops", default=",".join(ACTS))
    parser.add_argument(
        "--shapes", default=",".join(f"{t}x{d}" for t, d in SHAPES), help="TOKENSxWIDTH,..."
    )
    parser.add_argument(
        "--row-configs", default="", help="BLOCKxWARPS,... of the row-block kernel, also timed"
    )
    args = parser.parse_args()
    copy = copy_bandwidth()
    print(f"copy {copy:.0f} GB/s")
    for name in args.ops.split(","):
        act = ACTS[name]
        op = getattr(ops, name)
        for shape in args.shapes.split(","):
            tokens, d = map(int, shape.split("x"))
            x = torch.randn(tokens, 2 * d, device="cuda", dtype=torch.bfloat16)
            out = torch.empty(tokens, d, device="cuda", dtype=torch.bfloat16)
            traffic = 3 * x.numel() // 2 * x.element_size()
            runs = {k: v for k, v in anchors(op, (x,)).items() if k in ("inductor", "liger")}
            for anchor in runs.values():
                anchor()
            pk.launch_gated(x, out, act)
            expected = out.clone()
            runs["default"] = partial(pk.launch_gated, x, out, act)
            for config in CONFIGS:
                label = "{}x{}".format(*config)
                flat = partial(pk.launch_gated, x, out, act, flat=config)
                runs[label] = checked(label, flat, out, expected)
            for config in filter(None, args.row_configs.split(",")):
                block, warps = map(int, config.split("x"))
                row = partial(pk.launch_gated, x, out, act, block=block, num_warps=warps)
                runs[f"row{config}"] = checked(f"row{config}", row, out, expected)
            best = fastest_of_rounds(runs, args.rounds)
            ranked = sorted(best.items(), key=lambda kv: kv[1])
            cells = " ".join(
                f"{k}={t:.2f}/{traffic / (t * 1e-6) / 1e9 / copy:.3f}" for k, t in ranked
            )
            print(f"   {name} {tokens}x{d}: {cells}", flush=True)


if __name__ == "__main__":
    main()
