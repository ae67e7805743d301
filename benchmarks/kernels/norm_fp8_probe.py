"""Probe: the fp8 norms (`--variants`, names of `norm_split_h100.VARIANTS`; by default the
dynamic one) against an earlier `norm_kernels.py` (`--old FILE`, e.g. the output of
``git show REV:packages/ir-kernels-triton/src/ir_kernels_triton/norm_kernels.py``), in one
process, on the same inputs: the number of output bytes that differ, whether every split of a
decode row gives bitwise the default's outputs, and the CUDA-graph replay time of each
(fastest of `--rounds` rounds, µs, fastest first; `sN`: N programs a row). Round 7 of
`benchmarks/results/triton-tuning-H200.log`. Run from the repository root with the packages on
`PYTHONPATH` (`source benchmarks/gpu/env.sh`) and `benchmarks/kernels` on it too.
"""

import argparse
import importlib
import itertools
import os
import sys
import tempfile
from functools import partial
from types import ModuleType

import torch
from norm_split_h100 import VARIANTS, fastest_of_rounds, make_case

from ir_stack.bench.kernels import empty_kernel_us

CASES = (
    "1x2048,16x2048,1x4096,4x4096,16x4096,128x2048,128x4096,512x4096,1024x2048,1024x4096,"
    "4096x2048,4096x4096,16384x2048,16384x4096,1x8192,16x8192,128x8192,1024x8192,4096x8192,"
    "16384x8192"
)


def load_module(path: str) -> ModuleType:
    """`norm_kernels.py` from another tree as a module of its own, importing its siblings from
    this tree (written under a temporary directory: Triton reads a kernel's source from its
    file)."""
    with open(path) as f:
        source = f.read().replace("from .", "from ir_kernels_triton.")
    folder = tempfile.mkdtemp(prefix="old-norm-kernels-")
    with open(os.path.join(folder, "old_norm_kernels.py"), "w") as f:
        f.write(source)
    sys.path.insert(0, folder)
    return importlib.import_module("old_norm_kernels")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--old", required=True, help="an earlier norm_kernels.py")
    parser.add_argument("--cases", default=CASES, help="ROWSxHIDDEN,...")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default="dynamic_fp8", help="NAME,... (VARIANTS)")
    args = parser.parse_args()
    old = load_module(args.old)
    print(f"empty triton kernel: {empty_kernel_us():.2f} us", flush=True)
    for name, case in itertools.product(args.variants.split(","), args.cases.split(",")):
        rows, hidden = map(int, case.split("x"))
        residual, quant = VARIANTS[name]
        run_new, out_new = make_case(rows, hidden, residual, quant)
        run_old, out_old = make_case(rows, hidden, residual, quant, module=old)
        run_old()
        run_new()
        expected = out_new()
        differ = sum(int((a != b).sum()) for a, b in zip(out_old(), expected, strict=True))
        fns = {"old": run_old, "new": run_new}
        not_bitwise = []
        if rows <= 16 and hidden >= 4096:
            for split in (2, 4):
                run_new(split=split)
                if not all(map(torch.equal, out_new(), expected)):
                    not_bitwise.append(split)
                fns[f"s{split}"] = partial(run_new, split=split)
        best = sorted(fastest_of_rounds(fns, args.rounds).items(), key=lambda kv: kv[1])
        cells = " ".join(f"{k}={t:.3f}" for k, t in best)
        print(
            f"{name} {rows}x{hidden}: bytes_differing_from_old={differ} "
            f"splits_not_bitwise={not_bitwise} | {cells}",
            flush=True,
        )


if __name__ == "__main__":
    main()
