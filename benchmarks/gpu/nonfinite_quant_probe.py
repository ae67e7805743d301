"""Probe: what each provider's fp8 quantizations (and rms_norm) give for a row holding one NaN
or one inf, beside the native function: the count of NaN in each output.

The native functions carry a NaN into a row's peak (a NaN scale, the whole row NaN). Until
round 80 the kernels' peak reductions left it out (a finite scale, the NaN element kept:
`benchmarks/results/nonfinite-quant-H200.txt`, round 79); since, their maxima keep NaN and the
counts agree (the same file, round 80). The tests check the same with
`ir_spec.testing.assert_nonfinite_like_native`. Not a timing; run from this directory with the
packages on `PYTHONPATH` (`source env.sh`) and the cuda kernels built.
"""

from typing import Any

import torch

import ir_kernels_cuda.impls  # noqa: F401  (registers provider cuda)
import ir_kernels_triton  # noqa: F401  (registers provider triton)
from ir_spec import ops

HIDDEN = 4096


def nan_counts(name: str, args: tuple[Any, ...], provider: str) -> str:
    """`provider`'s outputs of op `name` on `args`, as NaN counts: ``4096nan,1nan``."""
    out = getattr(ops, name).impls[provider].fn(*args)
    outputs = out if isinstance(out, tuple) else (out,)
    return ",".join(f"{int(t.float().isnan().sum())}nan" for t in outputs)


def main() -> None:
    torch.manual_seed(0)
    for special in (float("nan"), float("inf")):
        x = torch.randn(3, HIDDEN, dtype=torch.bfloat16, device="cuda")
        x[1, 5] = special
        w = torch.randn(HIDDEN, dtype=torch.bfloat16, device="cuda")
        scale = torch.tensor([0.1], device="cuda")
        cases: list[tuple[str, tuple[Any, ...]]] = [
            ("dynamic_quant_fp8", (x, None)),
            ("group_quant_fp8", (x, 128, False)),
            ("static_quant_fp8", (x, scale)),
            ("rms_norm_dynamic_quant_fp8", (x, w, 1e-6, None)),
            ("rms_norm", (x, w, 1e-6)),
        ]
        for name, args in cases:
            counts = [f"{p}: {nan_counts(name, args, p)}" for p in ("native", "triton", "cuda")]
            print(special, name, " | ".join(counts))


if __name__ == "__main__":
    main()
