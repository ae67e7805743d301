"""What a cross-program exchange through global memory would buy Triton's decode-size norms.

Provider `triton` gives a decode-size row to one program, or to `SPLIT` programs that each read
the whole row for its sum (`ir_kernels_triton.norm_rules.split_for`): the sum then runs in the
same order at every batch size, which keeps the rows batch-invariant. Four shapes stay over the
issue's 1 µs line that way (the fused adds at 16 x 8192, the dynamic-fp8 norm at 1 and 16 x 8192).
This probe gives each of `S` programs a slice of the row and exchanges the slices' partial sums
(and, for the dynamic scale, their peaks |x * w|) through global memory: each program stores its
partials, arrives on a per-row counter (an atomic add with release semantics), spins until the
row's `S` programs have arrived (acquire), then reads the row's partials and finishes its slice.

The counters only grow (each launch adds `S` a row), so a launch waits for the next multiple of
`S`; that holds while launches on the counters do not overlap (one stream, no programmatic
launch). The partials are combined in a fixed order but not in the one-program order, so such a
kernel is not batch-invariant against the larger batches' kernels: this is a measurement, not a
kernel of the provider. The spin is bounded (`MAX_SPINS`); a probe launch that ran out of spins
leaves wrong outputs, which the check against the native op reports.

Each shape times the probe at `--splits` and `--warps`, provider `triton`'s op and an empty
Triton kernel, by CUDA-graph replay (`do_bench_cudagraph`, median) in `--rounds` rotated rounds;
the fastest round is printed.

Usage (GPU machine, ``source benchmarks/gpu/env.sh``, ``benchmarks/gpu`` on ``PYTHONPATH``):
  python benchmarks/gpu/triton_exchange_probe.py [--shapes fused_add_rms_norm:16x8192,...]
    [--splits 2,4,8] [--warps 4,8] [--rounds 5] [--json OUT]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from probe_tools import (
    bf16_inputs,
    fastest_line,
    launch_empty_kernel,
    time_rotated,
    write_results,
)

from ir_kernels_triton.fp8 import exact_rounding, quantize, round_to_dtype
from ir_spec import IrOp
from ir_spec.testing import assert_close

#: Spins a program waits at most for the row's other programs (a hang guard, far above need).
MAX_SPINS = 1 << 20

DEFAULT_SHAPES = (
    "fused_add_rms_norm:16x8192,rms_norm_dynamic_quant_fp8:1x8192,"
    "rms_norm_dynamic_quant_fp8:16x8192,fused_add_rms_norm:1x8192"
)


@triton.jit
def exchange_norm_kernel(
    x_ptr,
    r_ptr,
    w_ptr,
    out_ptr,
    res_ptr,
    scale_out_ptr,
    partials_ptr,
    counters_ptr,
    eps,
    HIDDEN: tl.constexpr,
    S: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    DYNAMIC: tl.constexpr,
    MAX_SPINS: tl.constexpr,
    EXACT_FP8: tl.constexpr,
):
    row = tl.program_id(0)
    part = tl.program_id(1)
    CHUNK: tl.constexpr = HIDDEN // S
    offs = part * CHUNK + tl.arange(0, CHUNK)
    at = row * HIDDEN + offs
    x = tl.load(x_ptr + at).to(tl.float32)
    w = tl.load(w_ptr + offs).to(tl.float32)
    if HAS_RESIDUAL:
        s = (x + tl.load(r_ptr + at).to(tl.float32)).to(x_ptr.dtype.element_ty)
        tl.store(res_ptr + at, s)
        x = s.to(tl.float32)
    slots = partials_ptr + (row * S + part) * 2
    tl.store(slots, tl.sum(x * x, axis=0))
    if DYNAMIC:
        tl.store(slots + 1, tl.max(tl.abs(x * w), axis=0))
    # every thread's partials stored before the arrival releases them
    tl.debug_barrier()
    arrived = tl.atomic_add(counters_ptr + row, 1, sem="acq_rel", scope="gpu")
    target = arrived - arrived % S + S
    seen = arrived + 1
    spins = 0
    while (seen < target) & (spins < MAX_SPINS):
        seen = tl.atomic_add(counters_ptr + row, 0, sem="acquire", scope="gpu")
        spins += 1
    tl.debug_barrier()
    row_slots = partials_ptr + row * S * 2 + tl.arange(0, S) * 2
    total = tl.sum(tl.load(row_slots, volatile=True), axis=0)
    inv_rms = tl.rsqrt(total / HIDDEN + eps)
    if DYNAMIC:
        peak = tl.max(tl.load(row_slots + 1, volatile=True), axis=0)
        act_dtype = x_ptr.dtype.element_ty
        y = round_to_dtype(x * w * inv_rms, act_dtype, EXACT_FP8)
        amax = (peak * inv_rms).to(act_dtype).to(tl.float32)
        scale = tl.maximum(amax / 448.0, 1.0 / (448.0 * 512.0))
        tl.store(scale_out_ptr + row, scale, mask=part == 0)
        q = quantize(y, 1.0 / scale, EXACT_FP8)
        tl.store(out_ptr + at, q.to(out_ptr.dtype.element_ty))
    else:
        tl.store(out_ptr + at, (x * inv_rms * w).to(out_ptr.dtype.element_ty))


class ExchangeProbe:
    """The probe kernel for one op's sample inputs, its outputs and exchange buffers allocated
    once (so that a CUDA graph replays the same launch)."""

    def __init__(
        self,
        name: str,
        args: tuple[Any, ...],
        splits: int,
        warps: int,
        max_spins: int = MAX_SPINS,
    ) -> None:
        self.dynamic = name == "rms_norm_dynamic_quant_fp8"
        self.residual = name == "fused_add_rms_norm"
        if self.residual:
            self.x, self.r, self.w, self.eps, _ = args
        else:
            self.x, self.w, self.eps, _ = args
            self.r = self.x
        rows, hidden = self.x.shape
        if hidden % splits:
            raise ValueError(f"splits={splits}: must divide the row width {hidden}")
        self.rows, self.hidden, self.splits, self.warps = rows, hidden, splits, warps
        self.max_spins = max_spins
        dev = self.x.device
        out_dtype = torch.float8_e4m3fn if self.dynamic else self.x.dtype
        self.out = torch.empty(rows, hidden, dtype=out_dtype, device=dev)
        self.res = torch.empty_like(self.x)
        self.scale = torch.empty(rows, 1, dtype=torch.float32, device=dev)
        self.partials = torch.empty(rows * splits * 2, dtype=torch.float32, device=dev)
        self.counters = torch.zeros(rows, dtype=torch.int32, device=dev)

    def __call__(self) -> Any:
        exchange_norm_kernel[(self.rows, self.splits)](
            self.x,
            self.r,
            self.w,
            self.out,
            self.res,
            self.scale,
            self.partials,
            self.counters,
            self.eps,
            HIDDEN=self.hidden,
            S=self.splits,
            HAS_RESIDUAL=self.residual,
            DYNAMIC=self.dynamic,
            MAX_SPINS=self.max_spins,
            EXACT_FP8=exact_rounding(),
            num_warps=self.warps,
        )
        if self.dynamic:
            return self.out, self.scale
        return (self.out, self.res) if self.residual else self.out


def check(op: IrOp, probe: ExchangeProbe, expected: Any) -> None:
    """The probe's outputs against the native op's, within the op's tolerance
    (`ir_spec.testing.assert_close`); a residual sum bitwise."""
    got = probe()
    torch.cuda.synchronize()
    assert_close(op, got, expected, msg=f"(exchange probe, S={probe.splits})")
    if probe.residual:
        torch.testing.assert_close(got[1], expected[1], rtol=0, atol=0)
    print(f"  {op.name} S={probe.splits} w={probe.warps}: outputs match the native op")


def probe_shape(
    name: str, tokens: int, width: int, splits: list[int], warps: list[int], rounds: int
) -> dict[str, Any]:
    op, args = bf16_inputs(name, tokens, width)
    expected = op.native(*args)
    candidates: dict[str, Callable[[], Any]] = {
        "triton": partial(op.impls["triton"].fn, *args),
        "empty": launch_empty_kernel,
    }
    for s in splits:
        for w in warps:
            probe = ExchangeProbe(name, args, s, w)
            check(op, probe, expected)
            candidates[f"s{s}w{w}"] = probe
    times = time_rotated(candidates, rounds)
    print(f"{name} {tokens}x{width}: {fastest_line(times)}", flush=True)
    return {"op": name, "tokens": tokens, "width": width, "times_us": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="OP:TOKENSxWIDTH,...")
    parser.add_argument("--splits", default="2,4,8")
    parser.add_argument("--warps", default="4,8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    a = parser.parse_args()
    import ir_kernels_triton  # noqa: F401  (registers provider triton)

    print("triton", triton.__version__, torch.cuda.get_device_name())
    splits = [int(s) for s in a.splits.split(",")]
    warps = [int(w) for w in a.warps.split(",")]
    results = []
    for item in a.shapes.split(","):
        name, shape = item.split(":")
        tokens, width = (int(v) for v in shape.split("x"))
        results.append(probe_shape(name, tokens, width, splits, warps, a.rounds))
    write_results(a.json, results)


if __name__ == "__main__":
    main()
