"""Probe: the gated launches of this tree against an earlier tree's, in one process, beside
Inductor's kernel (`benchmarks/results/triton-tuning-H200.log`, round 2: the streamed gates'
launches on cards of high bandwidth per SM, and what asking that bandwidth at every launch
cost the decode sizes). Each launch is checked bitwise against the old one, on its own output
buffer, and timed by CUDA-graph replay, fastest of four rounds (µs). `flat` is this tree's
launch with the old rule's configuration passed in (`launch_gated(flat=)`), which skips the
rule's queries.

Put the earlier tree's package where Python finds it as `ir_kernels_triton_old`, with an
empty `__init__.py`, e.g. from the repository root: `mkdir -p .scratch/old && git archive
REV packages/ir-kernels-triton/src/ir_kernels_triton | tar -x -C .scratch/old`, move that
directory to `.scratch/old/ir_kernels_triton_old` and empty its `__init__.py`; then
`PYTHONPATH=$PYTHONPATH:benchmarks/kernels:.scratch/old python3
benchmarks/kernels/gated_against_old.py [--cases gelu_and_mul:16384x5632,...] [--close]`
(packages on `PYTHONPATH`: `source benchmarks/gpu/env.sh`). `--close`: the two trees compute
differently (round 3: gelu's normal distribution function), so the outputs are compared
within the op's tolerances against the reference, not bitwise, and `flat` is left out.
"""

import argparse
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from ir_kernels_triton_old import pointwise_kernels as old  # type: ignore[import-not-found]
from norm_split_h100 import fastest_of_rounds

from ir_kernels_triton import pointwise_kernels as new
from ir_spec import ops
from ir_spec.testing import assert_impl_matches_native
from ir_stack.bench.kernels import anchors

CASES = [
    ("gelu_and_mul", new.ACT_GELU, 1, 5632),
    ("gelu_and_mul", new.ACT_GELU, 1, 14336),
    ("gelu_and_mul", new.ACT_GELU, 16, 28672),
    ("silu_and_mul", new.ACT_SILU, 1, 14336),
    ("silu_and_mul", new.ACT_SILU, 16, 5632),
    ("silu_and_mul", new.ACT_SILU, 16, 14336),
    ("gelu_and_mul", new.ACT_GELU, 16384, 28672),
    ("silu_and_mul", new.ACT_SILU, 16384, 28672),
]


ACTS = {"silu_and_mul": new.ACT_SILU, "gelu_and_mul": new.ACT_GELU}


def parse_cases(text: str) -> list[tuple[str, int, int, int]]:
    """``NAME:TOKENSxWIDTH,...`` as `CASES` rows."""
    cases = []
    for item in text.split(","):
        name, shape = item.split(":")
        tokens, width = map(int, shape.split("x"))
        cases.append((name, ACTS[name], tokens, width))
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--cases", help="NAME:TOKENSxWIDTH,... (default: CASES)")
    parser.add_argument("--close", action="store_true", help="outputs within tolerance, no flat")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    for name, act, tokens, d in parse_cases(args.cases) if args.cases else CASES:
        op = getattr(ops, name)
        x = torch.randn(tokens, 2 * d, device="cuda", dtype=torch.bfloat16)
        outs = [torch.empty(tokens, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        inductor = anchors(op, (x,))["inductor"]
        inductor()
        runs: dict[str, Callable[[], Any]] = {
            "new": partial(new.launch_gated, x, outs[0], act),
            "old": partial(old.launch_gated, x, outs[1], act),
        }
        if not args.close:
            old_config = old.flat_config(tokens * d, False, act)
            runs["flat"] = partial(new.launch_gated, x, outs[2], act, flat=old_config)
        runs["inductor"] = inductor
        for key in ("new", "old", "flat"):
            if key in runs:
                runs[key]()
        if args.close:
            assert_impl_matches_native(op, "triton", (x,))
        else:
            assert torch.equal(outs[0], outs[1]), name
            assert torch.equal(outs[2], outs[1]), name
        best = fastest_of_rounds(runs, args.rounds)
        cells = " ".join(f"{k}={t:.2f}" for k, t in best.items())
        print(f"   {name} {tokens}x{d}: {cells}", flush=True)


if __name__ == "__main__":
    main()
