"""Probe: Triton's fused add + rms_norm through the provider's functional call, through the same
launch into preallocated outputs, and in place, beside Inductor's kernel and Liger's, in one
process (bf16, fastest of rotated rounds of CUDA-graph replays, µs). The shapes are those
around 64 MB of traffic, where the H200 grids found the fused add at 1024 x 8192 behind
Inductor by 1.4-1.8 % (`benchmarks/results/triton-tuning-H200.log`).

    python benchmarks/gpu/fused_add_paths_probe.py [--rounds 5]

Run from the repository root with the packages on ``PYTHONPATH`` (`env.sh`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
from norm_split_h100 import fastest_of_rounds, make_case

import ir_kernels_triton  # noqa: F401  (registers the provider when run from source)
from ir_kernels_triton import norm_rules
from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs
from ir_stack.bench.kernels import anchors

SHAPES = ((1024, 8192), (4096, 2048), (1024, 4096))


def candidates(rows: int, hidden: int) -> dict[str, Callable[[], Any]]:
    """The ways to run the fused add at `rows` x `hidden`, by name."""
    op = ops.fused_add_rms_norm
    spec = SampleSpec(batch_shape=(rows,), hidden_size=hidden, dtype=torch.bfloat16, device="cuda")
    args = sample_inputs(op, spec)
    x, residual, weight, epsilon, _ = args
    functional, inplace = op.impls["triton"].fn, op.impls["triton_inplace"].fn
    launch, _ = make_case(rows, hidden, True, norm_rules.QUANT_NONE)
    x_inplace, residual_inplace = x.clone(), residual.clone()
    return {
        "provider": lambda: functional(*args),
        "launch_preallocated": lambda: launch(),
        "provider_inplace": lambda: inplace(x_inplace, residual_inplace, weight, epsilon, None),
        **anchors(op, args),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rotated rounds (fastest shown)")
    rounds = parser.parse_args().rounds
    for rows, hidden in SHAPES:
        times = fastest_of_rounds(candidates(rows, hidden), rounds=rounds)
        ranked = sorted(times.items(), key=lambda item: item[1])
        print(f"fused_add {rows}x{hidden}: " + " ".join(f"{k}={v:.2f}" for k, v in ranked))


if __name__ == "__main__":
    main()
