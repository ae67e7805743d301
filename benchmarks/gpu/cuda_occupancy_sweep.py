"""The norms' row kernels held to N blocks an SM, against this tree's op and Triton.

Builds the probe source `--oc` (this tree's csrc with `benchmarks/results/cuda-occupancy-probe.diff`
applied) as ``torch.ops.ir_cuda_oc``. Its row-kernel launches read ``IR_PROBE_BLOCKS`` at every
launch: 0 a plain launch, -1 the carveout preference alone, 2-6 that many blocks an SM held by
dynamic shared memory the kernel never touches. Each shape times this tree's op (`new`), the probe
at every `--caps` value (`cN`) and Triton's kernel, by CUDA-graph replay (`do_bench_cudagraph`,
median) in `--rounds` rounds of rotated order; the fastest round is printed. The probe's outputs
are compared bitwise with the op's first. `--once OP:TxW,...` instead launches the probe once per
shape at the environment's ``IR_PROBE_BLOCKS``, for Nsight Compute.

Usage (GPU machine, ``source benchmarks/gpu/env.sh``, ``benchmarks/gpu`` on ``PYTHONPATH``):
  python benchmarks/gpu/cuda_occupancy_sweep.py --oc DIR --ops a,b --shapes 4096x4096,...
    [--caps 2,3,4,5,6] [--rounds 5] [--json OUT]
  IR_PROBE_BLOCKS=4 ncu ... python benchmarks/gpu/cuda_occupancy_sweep.py --oc DIR --once OP:TxW
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import cuda_ab
import torch
from probe_tools import bf16_inputs, checked_times, fastest_line


def tokens_width(shape: str) -> tuple[int, int]:
    """``TOKENSxWIDTH`` as two ints."""
    tokens, width = (int(v) for v in shape.split("x"))
    return tokens, width


def capped(
    probe: Any, fn: Callable[..., Any], args: tuple[Any, ...], cap: str
) -> Callable[[], Any]:
    """`fn(*args)` on the probe build with ``IR_PROBE_BLOCKS=cap`` (read at launch, so a CUDA
    graph captures the launch at that setting)."""

    def run() -> Any:
        os.environ["IR_PROBE_BLOCKS"] = cap
        with cuda_ab.kernels(probe):
            return fn(*args)

    return run


def sweep(probe: Any, a: argparse.Namespace) -> None:
    records = []
    for name in a.ops.split(","):
        for shape in a.shapes.split(","):
            tokens, width = tokens_width(shape)
            op, args = bf16_inputs(name, tokens, width)
            new_fn, triton_fn = op.impls["cuda"].fn, op.impls["triton"].fn
            candidates: dict[str, Callable[[], Any]] = {"new": partial(new_fn, *args)}
            for cap in a.caps.split(","):
                candidates[f"c{cap}"] = capped(probe, new_fn, args, cap)
            candidates["triton"] = partial(triton_fn, *args)
            capped_names = [c for c in candidates if c.startswith("c")]
            times = checked_times(
                f"{name} {shape}", candidates, capped_names, a.rounds, close=False
            )
            records.append({"op": name, "tokens": tokens, "width": width, "times_us": times})
            print(f"{name} {shape}: {fastest_line(times)}", flush=True)
    if a.json:
        device = torch.cuda.get_device_name()
        a.json.write_text(json.dumps({"device": device, "records": records}, indent=1))


def once(probe: Any, items: str) -> None:
    for item in items.split(","):
        name, shape = item.split(":")
        op, args = bf16_inputs(name, *tokens_width(shape))
        with cuda_ab.kernels(probe):
            op.impls["cuda"].fn(*args)
    torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--oc", type=Path, required=True, help="the probe's csrc folder")
    parser.add_argument("--ops", default="rms_norm_dynamic_quant_fp8")
    parser.add_argument("--shapes", default="4096x8192,16384x4096")
    parser.add_argument("--caps", default="2,3,4,5,6", help="IR_PROBE_BLOCKS values to time")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--once", help="OP:TxW,...: launch each once (for ncu), no timing")
    parser.add_argument(
        "--build-dir", type=Path, default=Path("/tmp/ir-cuda-oc"), help="the probe's build"
    )
    a = parser.parse_args()
    probe = cuda_ab.build_other(a.oc, "ir_cuda_oc", a.build_dir)
    if not cuda_ab.cuda_impls().SUPPORTED:
        raise SystemExit(f"provider cuda unavailable: {cuda_ab.cuda_impls().REASON}")
    if a.once:
        once(probe, a.once)
    else:
        sweep(probe, a)


if __name__ == "__main__":
    main()
