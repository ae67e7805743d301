"""What programmatic dependent launch saves the ``cuda`` and ``triton`` kernels, in one process.

Each shape's op is timed, for each provider, by CUDA-graph replay (`do_bench_cudagraph`,
median, µs; the fastest of `--rounds` rotated rounds) four ways:

- ``off`` / ``on``: the grid's method, the op replayed back to back, launched plainly or
  programmatically (`ir_kernels_cuda.launch`, `ir_kernels_triton.launch`). ``on`` overlaps each
  launch with the op before it, which is the op itself.
- ``after plain off`` / ``after plain on``: each op launched after a plain empty kernel, which
  never lets a dependent start early; the empty kernel's own time is subtracted. This is the op
  behind a kernel that knows nothing of programmatic launch (a GEMM of another library).

Beside them: the empty ``ir_cuda`` kernel launched plainly (the issues' decode floor) and
programmatically (``torch.ops.ir_cuda_programmatic``, the build `ir_kernels_cuda.launch` turns
on); the empty Triton kernel both ways. Outputs of the two settings are compared bitwise first.

Usage (GPU machine, the package built): python benchmarks/gpu/programmatic_launch.py
  [--ops a,b] [--tokens 1,16] [--hidden 2048,4096,8192] [--rounds 3] [--json OUT] [--md OUT]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from probe_tools import bf16_inputs, time_rotated

from ir_kernels_cuda import impls as cuda_impls
from ir_kernels_cuda.build import PROGRAMMATIC_NAMESPACE, build
from ir_kernels_cuda.testing import bits
from ir_spec import ops
from ir_stack.bench.kernels import GATED, INTERMEDIATE, empty_kernel_us

MODES = ("off", "on", "after plain off", "after plain on")
PROVIDERS = ("cuda", "triton")
#: The issues' decode targets: the cuda ops within 0.5 µs of an empty CUDA kernel's replayed
#: time, the Triton ops within 1 µs of an empty Triton kernel's.
MARGIN_US = {"cuda": 0.5, "triton": 1.0}


def with_setting(provider: str, enabled: bool, fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` with `provider`'s programmatic launch set to `enabled` (at capture time)."""
    from ir_kernels_cuda.launch import set_programmatic_launch as cuda_setting
    from ir_kernels_triton.launch import set_programmatic_launch as triton_setting

    setting = cuda_setting if provider == "cuda" else triton_setting

    def run() -> Any:
        previous = setting(enabled)
        try:
            return fn()
        finally:
            setting(previous)

    return run


def after(first: Callable[[], Any], then: Callable[[], Any]) -> Callable[[], Any]:
    """`first`, then `then`, as one call."""

    def run() -> Any:
        first()
        return then()

    return run


def outputs(result: Any) -> list[torch.Tensor]:
    """An op's results, float8 tensors as their bits (`torch.equal` does not take them)."""
    return [bits(t) for t in (result if isinstance(result, tuple | list) else (result,))]


def time_shape(name: str, tokens: int, hidden: int, rounds: int) -> dict[str, float]:
    width = INTERMEDIATE[hidden] if name in GATED else hidden
    op, args = bf16_inputs(name, tokens, width)
    hint = args[0]
    plain = lambda: torch.ops.ir_cuda.empty_kernel(hint)  # noqa: E731
    candidates: dict[str, Callable[[], Any]] = {"plain empty": plain}
    for provider in PROVIDERS:
        fn = op.impls[provider].fn
        off = with_setting(provider, False, functools.partial(fn, *args))
        on = with_setting(provider, True, functools.partial(fn, *args))
        for a, b in zip(outputs(off()), outputs(on()), strict=True):
            if not torch.equal(a, b):
                raise SystemExit(f"{provider} {name} {tokens}x{width}: outputs differ")
        candidates[f"{provider} off"] = off
        candidates[f"{provider} on"] = on
        candidates[f"{provider} after plain off"] = after(plain, off)
        candidates[f"{provider} after plain on"] = after(plain, on)
    best = {n: min(v) for n, v in time_rotated(candidates, rounds).items()}
    for key in best:
        if "after plain" in key:
            best[key] -= best["plain empty"]
    return best


def markdown(device: str, empty: dict[str, float], records: list[dict[str, Any]]) -> str:
    lines = [
        f"# Programmatic dependent launch of the cuda and triton kernels — {device}",
        "",
        "`python benchmarks/gpu/programmatic_launch.py` (module docstring: the method). bf16, "
        "µs of CUDA-graph replay, fastest of the rounds. `after plain` columns are the op "
        "launched after a plain empty ir_cuda kernel, that kernel's time subtracted. Empty "
        "kernels (µs): " + ", ".join(f"{name} {us:.2f}" for name, us in empty.items()) + ".",
        "",
    ]
    for provider in [p for p in PROVIDERS if f"{p} off" in records[0]["times_us"]]:
        margin = MARGIN_US[provider]
        floor = empty["plain" if provider == "cuda" else "triton"] + margin
        lines += [
            f"## {provider}",
            "",
            "| op | tokens x width | off | on | after plain off | after plain on |",
            "|---|---|---|---|---|---|",
        ]
        for r in records:
            t = r["times_us"]
            cells = " | ".join(f"{t[f'{provider} {m}']:.2f}" for m in MODES)
            lines.append(f"| {r['op']} | {r['tokens']} x {r['width']} | {cells} |")
        kind = "plain empty kernel" if provider == "cuda" else "empty Triton kernel"
        lines += ["", f"Within {margin} µs of the {kind} (≤ {floor:.2f} µs):", ""]
        for mode in MODES:
            times = [
                (r["times_us"][f"{provider} {mode}"], r["times_us"][f"{provider} off"])
                for r in records
            ]
            count = sum(t <= floor for t, _ in times)
            ratio = statistics.median(t / off for t, off in times)
            lines.append(f"- {mode}: {count} of {len(records)}; median time / off {ratio:.3f}")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", default=",".join(op.name for op in ops))
    parser.add_argument("--tokens", default="1,16")
    parser.add_argument("--hidden", default="2048,4096,8192")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--md", type=Path)
    a = parser.parse_args()
    if not cuda_impls.SUPPORTED:
        raise SystemExit(f"provider cuda unavailable: {cuda_impls.REASON}")
    import ir_kernels_triton  # noqa: F401  (registers provider triton)

    hint = torch.empty(1, device="cuda")
    build(programmatic=True)
    kernels: dict[str, Callable[[], Any]] = {
        "plain": lambda: torch.ops.ir_cuda.empty_kernel(hint),
        "programmatic": lambda: getattr(torch.ops, PROGRAMMATIC_NAMESPACE).empty_kernel(hint),
    }
    empty = {n: min(v) for n, v in time_rotated(kernels, 5).items()}
    empty["triton"] = min(empty_kernel_us() for _ in range(5))
    empty["triton programmatic"] = min(empty_kernel_us(True) for _ in range(5))
    print("empty kernels (µs):", json.dumps(empty))
    records = []
    for name in a.ops.split(","):
        for tokens in (int(t) for t in a.tokens.split(",")):
            for hidden in (int(h) for h in a.hidden.split(",")):
                width = INTERMEDIATE[hidden] if name in GATED else hidden
                best = time_shape(name, tokens, hidden, a.rounds)
                records.append({"op": name, "tokens": tokens, "width": width, "times_us": best})
                print(f"{name} {tokens}x{width}:", json.dumps(best), flush=True)
    device = torch.cuda.get_device_name()
    if a.json:
        a.json.write_text(
            json.dumps({"device": device, "empty_us": empty, "records": records}, indent=1)
        )
    if a.md:
        a.md.write_text(markdown(device, empty, records))


if __name__ == "__main__":
    main()
