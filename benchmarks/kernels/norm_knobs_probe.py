"""Probe: the norms' launch knobs that leave the results' bits alone (`evict_first`,
`max_registers`, `early_weight`), at the shapes where Inductor's kernel still led on the H200
(`benchmarks/results/triton-tuning-H200.log`, round 3), beside that kernel in one process.
Each knob setting is checked bitwise against the default, then timed by CUDA-graph replay;
the fastest of `--rounds` rounds is shown (µs), fastest first. Run from the repository root
with the packages on `PYTHONPATH` (`source benchmarks/gpu/env.sh`) and `benchmarks/kernels`
on it too.
"""

import argparse
import itertools
from functools import partial

import torch
from norm_split_h100 import VARIANTS, fastest_of_rounds, make_case

from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs
from ir_stack.bench.kernels import anchors, lift_recompile_limits

CASES = "rms_norm:16384x8192,rms_norm:4096x8192,fused_add:1024x8192"
OPS = {"rms_norm": ops.rms_norm, "fused_add": ops.fused_add_rms_norm}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cases", default=CASES, help="VARIANT:ROWSxHIDDEN,...")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    lift_recompile_limits()
    knobs = [
        {"evict_first": e, "max_registers": m, "early_weight": w}
        for e, m, w in itertools.product((False, True), (None, 32, 40, 48, 64), (False, True))
    ]
    for case in args.cases.split(","):
        name, shape = case.split(":")
        rows, hidden = map(int, shape.split("x"))
        run, outputs = make_case(rows, hidden, *VARIANTS[name])
        run()
        expected = outputs()
        runs = {"default": run}
        for k in knobs:
            run(**k)
            assert all(map(torch.equal, outputs(), expected)), k
            label = "e{}r{}w{}".format(*(int(v or 0) for v in k.values()))
            runs[label] = partial(run, **k)
        spec = SampleSpec(
            batch_shape=(rows,), hidden_size=hidden, dtype=torch.bfloat16, device="cuda"
        )
        args_ = sample_inputs(OPS[name], spec)
        runs["inductor"] = anchors(OPS[name], args_)["inductor"]
        runs["inductor"]()
        best = sorted(fastest_of_rounds(runs, args.rounds).items(), key=lambda kv: kv[1])
        cells = " ".join(f"{k}={t:.2f}" for k, t in best)
        print(f"   {name} {rows}x{hidden}: {cells}", flush=True)


if __name__ == "__main__":
    main()
