# ruff: noqa: B023  (each lambda is timed before the loop moves on)
"""H100 tuning round 3 (`benchmarks/results/triton-tuning-H100.log`, section 8).

``python benchmarks/kernels/sweep_round3_h100.py flat,quant_small,norm4096``:
- flat: block and warps of the flat elementwise kernels (gated activations, gated + fp8, fp8
  quantization) at the sizes where the grid had them a few tenths of a percent behind Inductor
  or Liger, beside those anchors;
- quant_small: the fp8 quantization's flat configurations between 128K and 4M outputs;
- norm4096: warps of the quantizing norms without a residual at 4096-wide rows, for every
  batch of the grid (warps set the reduction order, so they may follow the width only).

Every candidate runs once before any is timed; each is timed in forward and reversed order and
the faster replay kept (the grid's method, `ir_stack.bench.kernels`). Microseconds, fastest
first.
"""

import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from triton.testing import do_bench_cudagraph

from ir_kernels_triton import norm_kernels as nk
from ir_kernels_triton import norm_rules as nr
from ir_kernels_triton import pointwise_kernels as pk
from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs
from ir_stack.bench import kernels as bk

FP8 = torch.float8_e4m3fn
FLAT_CONFIGS = [(1024, 4), (1024, 8), (2048, 4), (2048, 8), (4096, 8), (512, 4)]


def us(fn: Callable[[], Any]) -> float:
    return float(do_bench_cudagraph(fn, rep=10)) * 1e3


def time_all(label: str, fns: dict[str, Callable[[], Any]]) -> None:
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    items = list(fns.items())
    best: dict[str, float] = {}
    for order in (items, items[::-1]):
        for name, fn in order:
            best[name] = min(best.get(name, float("inf")), us(fn))
    ranked = sorted(best.items(), key=lambda kv: kv[1])
    print(f"{label}: " + " ".join(f"{v:.2f}:{k}" for k, v in ranked), flush=True)


def spec(t: int, h: int) -> SampleSpec:
    return SampleSpec(batch_shape=(t,), hidden_size=h, dtype=torch.bfloat16, device="cuda", seed=t)


def part_flat() -> None:
    gated = {"silu_and_mul": pk.ACT_SILU, "gelu_and_mul": pk.ACT_GELU}
    for name in ("silu_and_mul", "gelu_and_mul", "silu_and_mul_static_quant_fp8"):
        op = getattr(ops, name)
        act = gated.get(name, pk.ACT_SILU)
        for t in (1024, 4096, 16384):
            for d in (5632, 14336, 28672):
                args = sample_inputs(op, spec(t, d))  # x holds 2 * d
                x = args[0]
                scale = args[1] if name.endswith("fp8") else None
                out = torch.empty(t, d, device="cuda", dtype=FP8 if scale is not None else x.dtype)
                fns = dict(bk.anchors(op, args))
                for cfg in FLAT_CONFIGS:
                    fns[f"b{cfg[0]}w{cfg[1]}"] = partial(
                        pk.launch_gated, x, out, act, scale, flat=cfg
                    )
                time_all(f"{name} t={t} d={d}", fns)
    time_static_quant((1024, 4096, 16384), FLAT_CONFIGS)


def time_static_quant(
    tokens: tuple[int, ...], configs: list[tuple[int, int]], with_default: bool = False
) -> None:
    """The fp8 quantization's flat kernel in each configuration, beside Inductor (and the
    default rule with `with_default`), at `tokens` x 2048 / 4096 / 8192."""
    op = ops.static_quant_fp8
    for t in tokens:
        for h in (2048, 4096, 8192):
            args = sample_inputs(op, spec(t, h))
            x, scale = args[0], args[1]
            q = torch.empty(t, h, device="cuda", dtype=FP8)
            fns = dict(bk.anchors(op, args))
            if with_default:
                fns["default"] = lambda: pk.launch_static_quant(x, scale, q)
            for cfg in configs:
                fns[f"b{cfg[0]}w{cfg[1]}"] = partial(pk.launch_static_quant, x, scale, q, flat=cfg)
            time_all(f"static_quant_fp8 t={t} h={h}", fns)


def part_quant_small() -> None:
    """The fp8 quantization's flat configurations from 128K outputs up (default: the rule)."""
    time_static_quant((64, 128, 512), [(512, 8), (1024, 4), (2048, 4), (2048, 8)], True)


def part_norm4096() -> None:
    h = 4096
    scale = torch.full((1,), 0.05, device="cuda")
    for name, quant in (("rms_static", nr.QUANT_STATIC), ("rms_dynamic", nr.QUANT_DYNAMIC)):
        op = ops.rms_norm_static_quant_fp8 if quant == 1 else ops.rms_norm_dynamic_quant_fp8
        for t in (1, 16, 128, 1024, 4096, 16384):
            args = sample_inputs(op, spec(t, h))
            x, w = args[0], args[1]
            out = torch.empty(t, h, device="cuda", dtype=FP8)
            s_out = torch.empty(t, 1, device="cuda")
            kw: dict[str, Any] = {"quant": quant}
            if quant == nr.QUANT_STATIC:
                kw["scale"] = scale
            else:
                kw["scale_out"] = s_out
            fns = dict(bk.anchors(op, args))
            for warps in (4, 8, 16):
                fns[f"w{warps}"] = partial(
                    nk.launch_norm, x, w, 1e-6, None, out, num_warps=warps, **kw
                )
            time_all(f"{name} t={t} h={h}", fns)


if __name__ == "__main__":
    bk.lift_recompile_limits()
    for part in sys.argv[1].split(","):
        parts = {"flat": part_flat, "quant_small": part_quant_small, "norm4096": part_norm4096}
        parts[part]()
