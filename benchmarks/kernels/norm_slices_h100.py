"""H100 probe (`benchmarks/results/triton-tuning-H100.log`, sections 13 and 14): the Triton
norms against an earlier tree's, and decode rows shared by programs that each normalize only
their slice. Section 13 compared against `9168c4e` (before a shorter quantizing tail: a
multiplication by the scale's reciprocal instead of a division, no clamp before the saturating
conversion, bf16 rounding two values an instruction); section 14 against `2a06969` (before the
static scale was loaded ahead of the row's reduction and dynamic-scale rows were split).

Part 1 times every variant at its default configuration against the kernels of an earlier
tree, in one process, and counts the output bytes that differ. Put that tree's package where
Python finds it as `ir_kernels_triton_old`, with an empty `__init__.py` so that it registers
nothing, e.g. from the repository root: `mkdir -p .scratch/old && git archive 2a06969
packages/ir-kernels-triton/src/ir_kernels_triton | tar -x -C .scratch/old`, move that
directory to `.scratch/old/ir_kernels_triton_old` and empty its `__init__.py`; then
`PYTHONPATH=$PYTHONPATH:.scratch/old python3 benchmarks/kernels/norm_slices_h100.py`.
Part 2 times 1, 2 and 4 programs a row at decode sizes and checks each bitwise against one.
`--variants a,b` limits parts 1 and 2 to those variants (`norm_split_h100.VARIANTS`). Part 3
(`--part 3`, alone) times the dynamic norms with more warps a row, and 8 programs
sharing the 8192-wide decode rows. Times are the fastest of three rounds of CUDA-graph
replays, in µs.
"""

import sys
from collections.abc import Sequence
from functools import partial

import torch
from ir_kernels_triton_old import norm_kernels as old  # type: ignore[import-not-found]
from norm_split_h100 import VARIANTS, fastest_of_rounds, make_case, split_sweep

from ir_kernels_triton import norm_kernels as new
from ir_kernels_triton import norm_rules
from ir_stack.bench.kernels import empty_kernel_us

MODULES = {"old": old, "new": new}


def against_old(names: Sequence[str]) -> None:
    for name in names:
        residual, quant = VARIANTS[name]
        for hidden in (2048, 4096, 8192):
            for rows in (1, 16, 128, 1024, 4096, 16384):
                if hidden != 8192 and rows in (128, 4096):
                    continue
                runs = {k: make_case(rows, hidden, residual, quant, m) for k, m in MODULES.items()}
                snapshots = []
                for run, outputs in runs.values():
                    run()
                    snapshots.append(outputs())
                differ = sum(int((a != b).sum()) for a, b in zip(*snapshots, strict=True))
                best = fastest_of_rounds({k: run for k, (run, _) in runs.items()})
                cells = " ".join(f"{k}={t:.2f}" for k, t in best.items())
                print(f"   {name} {rows}x{hidden}: {cells} bytes_differ={differ}", flush=True)


def wider() -> None:
    residual, quant = VARIANTS["dynamic_fp8"]
    for hidden, warps in ((4096, (4, 8)), (8192, (8, 16))):
        for rows in (1, 16, 1024, 16384):
            run, _ = make_case(rows, hidden, residual, quant)
            best = fastest_of_rounds({w: partial(run, num_warps=w) for w in warps})
            cells = " ".join(f"w{w}={t:.2f}" for w, t in best.items())
            print(f"   dynamic_fp8 {rows}x{hidden}: {cells}", flush=True)
    for name, (residual, quant) in VARIANTS.items():
        if quant == norm_rules.QUANT_DYNAMIC:
            continue
        for rows in (1, 16):
            run, outputs = make_case(rows, 8192, residual, quant)
            run(split=1)
            expected = outputs()
            run(split=8)
            bitwise = all(map(torch.equal, outputs(), expected))
            best = fastest_of_rounds({s: partial(run, split=s) for s in (4, 8)})
            cells = " ".join(f"s{s}={t:.2f}" for s, t in best.items())
            print(f"   {name} {rows}x8192: {cells} bitwise={bitwise}", flush=True)


def main() -> None:
    print(f"empty triton kernel: {empty_kernel_us():.2f} us")
    if "--part" in sys.argv and sys.argv[sys.argv.index("--part") + 1] == "3":
        wider()
        return
    names = list(VARIANTS)
    if "--variants" in sys.argv:
        names = sys.argv[sys.argv.index("--variants") + 1].split(",")
    against_old(names)
    split_sweep((1, 4, 8, 16, 32), names)


if __name__ == "__main__":
    main()
