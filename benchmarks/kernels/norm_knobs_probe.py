"""Probe: the norms' launch knobs that leave the results' bits alone (`evict_first`,
`max_registers`, `early_weight`, `keep_masks`, `reload`), at the shapes where Inductor's kernel
still led on the H200 (`benchmarks/results/triton-tuning-H200.log`, rounds 3 and 4), beside
that kernel in one process. Each knob setting is checked bitwise against the default, then
timed by CUDA-graph replay; the fastest of `--rounds` rounds is shown (µs), fastest first.
`--warps N,...` adds launches over other warp counts (other bits: not compared), with and
without a cap of 64 registers and the row read again; `--show-inductor` prints the loads,
stores and launch configuration of Inductor's kernel. `--splits N,...` times instead programs a
row against early weight and masks. Labels: e evict first, r register cap, w early weight, m
masks kept, l row read again after its sum, s programs a row, each with its value. Run from the
repository root with the packages on `PYTHONPATH` (`source benchmarks/gpu/env.sh`) and
`benchmarks/kernels` on it too.
"""

import argparse
import itertools
from functools import partial
from typing import Any

import torch
from norm_split_h100 import VARIANTS, fastest_of_rounds, make_case

from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs
from ir_stack.bench.kernels import anchors, lift_recompile_limits

CASES = "rms_norm:16384x8192,rms_norm:4096x8192,fused_add:1024x8192"
LABELS = {
    "evict_first": "e",
    "max_registers": "r",
    "early_weight": "w",
    "keep_masks": "m",
    "split": "s",
    "reload": "l",
}
OPS = {
    "rms_norm": ops.rms_norm,
    "fused_add": ops.fused_add_rms_norm,
    "static_fp8": ops.rms_norm_static_quant_fp8,
    "fused_add_static_fp8": ops.fused_add_rms_norm_static_quant_fp8,
    "dynamic_fp8": ops.rms_norm_dynamic_quant_fp8,
}


def show_inductor(op: object, args: tuple[object, ...]) -> None:
    """Print the lines of Inductor's kernel for `op` that say how it reads, writes and launches."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    compiled = torch.compile(op.native, dynamic=False, fullgraph=True)  # type: ignore[attr-defined]
    _, sources = run_and_get_code(compiled, *args)
    keys = ("tl.load", "tl.store", "num_warps", "R0_BLOCK", "XBLOCK", "@triton", "def triton")
    for source in sources:
        for line in source.splitlines():
            if any(k in line for k in keys):
                print("      |", line.strip()[:220])
    for kernel in _inductor_launchers():
        print("      | launch:", kernel)


def _inductor_launchers() -> list[str]:
    """The configurations Inductor's autotuners settled on in this process."""
    import gc

    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    found = []
    for obj in gc.get_objects():
        try:
            tuner = isinstance(obj, CachingAutotuner)
        except ReferenceError:  # a dead weak proxy
            continue
        if tuner:
            for launcher in obj.launchers:
                config = launcher.config
                found.append(
                    f"{obj.fn.__name__}: {config.kwargs} warps={config.num_warps} "
                    f"regs={getattr(launcher, 'n_regs', '?')}"
                )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cases", default=CASES, help="VARIANT:ROWSxHIDDEN,...")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warps", default="", help="other warp counts, e.g. 8")
    parser.add_argument("--show-inductor", action="store_true")
    lift_recompile_limits()
    parser.add_argument("--splits", default="", help="decode: programs a row, e.g. 1,2,4,8")
    args = parser.parse_args()
    if args.splits:
        knobs: list[dict[str, Any]] = [
            {"early_weight": w, "keep_masks": k, "split": n}
            for w, k, n in itertools.product(
                (False, True), (False, True), map(int, args.splits.split(","))
            )
        ]
    else:
        knobs = [
            {"evict_first": e, "max_registers": m, "early_weight": w, "keep_masks": k, "reload": r}
            for e, m, w, k, r in itertools.product(
                (False, True), (None, 32), (False, True), (False, True), (False, True)
            )
        ]
    warps = [int(w) for w in args.warps.split(",") if w]
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
            label = "".join(f"{LABELS[key]}{int(v or 0)}" for key, v in k.items())
            runs[label] = partial(run, **k)
        for n, cap, again in itertools.product(warps, (None, 64), (False, True)):
            runs[f"warps{n}r{cap or 0}l{int(again)}"] = partial(
                run, num_warps=n, max_registers=cap, reload=again
            )
        spec = SampleSpec(
            batch_shape=(rows,), hidden_size=hidden, dtype=torch.bfloat16, device="cuda"
        )
        args_ = sample_inputs(OPS[name], spec)
        runs["inductor"] = anchors(OPS[name], args_)["inductor"]
        if args.show_inductor:
            show_inductor(OPS[name], args_)
        runs["inductor"]()
        best = sorted(fastest_of_rounds(runs, args.rounds).items(), key=lambda kv: kv[1])
        cells = " ".join(f"{k}={t:.2f}" for k, t in best)
        print(f"   {name} {rows}x{hidden}: {cells}", flush=True)


if __name__ == "__main__":
    main()
