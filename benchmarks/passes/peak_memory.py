"""Peak GPU memory of 8 residual steps (``fused_add_rms_norm.maybe_inplace``) with the in-place
Triton kernel: eager ``maybe_inplace``, eager default overload, and compiled with ir-passes.

Usage (GPU): python benchmarks/passes/peak_memory.py --out DIR  -> DIR/passes-peak-memory.json
The peak is measured above the memory held before the call (inputs and weights included in
that baseline), after a warm-up call (compilation happens there).
"""

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import ir_dispatch
import ir_kernels_triton  # noqa: F401  (registers the provider)
import ir_passes
from ir_spec import ops

STEPS = 8


def steps_maybe_inplace(x: Tensor, r: Tensor, weights: list[Tensor]) -> tuple[Tensor, Tensor]:
    for w in weights:
        x, r = ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
    return x, r


def steps_default(x: Tensor, r: Tensor, weights: list[Tensor]) -> tuple[Tensor, Tensor]:
    for w in weights:
        x, r = ops.fused_add_rms_norm(x, r, w, 1e-6)
    return x, r


def peak(fn: Callable[..., Any], make_inputs: Callable[[], tuple[Any, ...]]) -> tuple[int, Any]:
    fn(*make_inputs())  # warm-up (compiles)
    torch.cuda.synchronize()
    inputs = make_inputs()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(*inputs)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base, out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--hidden", type=int, default=8192)
    a = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    weights = [
        torch.randn(a.hidden, device="cuda", generator=gen, dtype=torch.bfloat16)
        for _ in range(STEPS)
    ]
    x0 = torch.randn(a.tokens, a.hidden, device="cuda", generator=gen, dtype=torch.bfloat16)
    r0 = torch.randn(a.tokens, a.hidden, device="cuda", generator=gen, dtype=torch.bfloat16)

    def make_inputs() -> tuple[Any, ...]:
        return x0.clone(), r0.clone(), weights

    ir_dispatch.set_priority(fused_add_rms_norm=["triton_inplace"])
    compiled = ir_passes.compile(steps_maybe_inplace)
    results: dict[str, Any] = {}
    outs = {}
    for label, fn in (
        ("eager maybe_inplace (triton_inplace)", steps_maybe_inplace),
        ("eager default overload (triton_inplace: clones first)", steps_default),
        ("compiled ir_passes.compile, maybe_inplace", compiled),
    ):
        bytes_, outs[label] = peak(fn, make_inputs)
        results[label] = bytes_
        print(f"{label:58s} peak above inputs: {bytes_ / 2**20:9.1f} MiB", flush=True)
    report = ir_passes.last_report()
    ir_dispatch.set_priority(fused_add_rms_norm=["triton"])
    label = "eager default overload (triton, out of place)"
    results[label], outs[label] = peak(steps_default, make_inputs)
    print(f"{label:58s} peak above inputs: {results[label] / 2**20:9.1f} MiB")
    reference = steps_default(*make_inputs())
    max_err = {
        k: float(
            max((o.float() - e.float()).abs().max() for o, e in zip(v, reference, strict=True))
        )
        for k, v in outs.items()
    }
    one_buffer = x0.numel() * x0.element_size()
    summary = {
        "card": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "tokens": a.tokens,
        "hidden": a.hidden,
        "dtype": "bfloat16",
        "steps": STEPS,
        "one_activation_MiB": one_buffer / 2**20,
        "peak_above_inputs_MiB": {k: v / 2**20 for k, v in results.items()},
        "max_abs_error_vs_eager_default": max_err,
        "compiled_report": None
        if report is None
        else {
            "functionalized": report.functionalized,
            "donated_inputs": sorted(report.donated_inputs),
            "clones_inserted": report.clones_inserted,
            "clones_removed": report.clones_removed,
            "selected_impls": report.selected_impls,
        },
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "passes-peak-memory.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
