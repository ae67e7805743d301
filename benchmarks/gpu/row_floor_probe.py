"""How far above an empty kernel the least possible row kernel lies at decode sizes, beside
the ops: rms_norm, fused_add_rms_norm and silu_and_mul.

`row_floor_probe.cu` holds minimal kernels on contiguous bf16 rows (the width a compile-time
constant for the norms, no strides, no checks): for rms_norm `copy` (the row read and written),
`scaled` (its sum of squares over the block, then x / rms) and `norm` (a minimal rms_norm, the
weight read beside the row); for fused_add_rms_norm `fused add` (the sum stored over the
residual, then normalized); for silu_and_mul `mul` (the row's halves multiplied: its bytes
without its activation). The norms' kernels take one block a row and 1, 2 or 4 16-byte vectors
a thread (the fastest kept). Each is checked against the catalog's reference (copies and sums
bitwise, the rest with the op's tolerance), then timed by CUDA-graph replay
(`do_bench_cudagraph`, median; fastest of `--rounds` rotated rounds) in one rotation with the
empty CUDA kernel (``torch.ops.ir_cuda.empty_kernel``), an empty Triton kernel and both
providers' op. Each line gives µs above the empty kernel of its own kind.

The issue's decode line for the cuda provider is 0.5 µs above the empty CUDA kernel: where a
minimal kernel lies above it, the line asks for less than the least a kernel of that form does.

Usage (GPU machine, from ``benchmarks/gpu`` on ``PYTHONPATH``):
  python benchmarks/gpu/row_floor_probe.py [--rounds 5] [--json OUT] [--md OUT]
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import probe_tools as tools
import torch

from ir_spec import ops
from ir_spec.testing import assert_close
from ir_stack.bench.kernels import import_providers

SOURCE = Path(__file__).with_name("row_floor_probe.cu")
EPS = 1e-6  # the probe's kernels are built with it
VECTORS = (1, 2, 4)
NORM_SHAPES = [(t, h) for t in (1, 16) for h in (2048, 4096, 8192)]
GATED_SHAPES = [(t, d) for t in (1, 16) for d in (5632, 14336, 28672)]
#: the op of each family, its decode shapes and its minimal kernels (name: mode of the .cu)
FAMILIES: dict[str, tuple[list[tuple[int, int]], dict[str, int]]] = {
    "rms_norm": (NORM_SHAPES, {"copy": 0, "scaled": 1, "norm": 2}),
    "fused_add_rms_norm": (NORM_SHAPES, {"fused add": 4}),
    "silu_and_mul": (GATED_SHAPES, {"mul": 3}),
}


def minimal_kernels(lib: Any, family: str, tokens: int, width: int) -> dict[str, Callable[[], Any]]:
    """The family's minimal kernels at one shape, each checked against the catalog's
    reference first: the copy bitwise, a residual sum bitwise, the rest with the op's
    tolerance."""
    _, modes = FAMILIES[family]
    x_width = 2 * width if family == "silu_and_mul" else width
    x = torch.randn(tokens, x_width, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(width, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16)
    runs: dict[str, Callable[[], Any]] = {}
    for mode, number in modes.items():
        for vectors in (1,) if mode == "mul" else VECTORS:
            if mode != "mul" and not 32 <= width // (8 * vectors) <= 1024:
                continue
            rows = 2 * tokens if mode == "fused add" else tokens
            out = torch.empty(rows, width, device="cuda", dtype=torch.bfloat16)
            out[:tokens] = residual  # the fused add's residual, summed into in place
            run = tools.probe_call(lib, 10 * number + vectors, x, out, weight, tokens, width)
            run()
            torch.cuda.synchronize()
            if mode == "copy":
                assert torch.equal(out, x), f"copy x{vectors}: output differs"
            elif mode == "scaled":
                assert_close(ops.rms_norm, out, ops.rms_norm.native(x, None, EPS))
            elif mode == "norm":
                assert_close(ops.rms_norm, out, ops.rms_norm.native(x, weight, EPS))
            elif mode == "fused add":
                y, total = ops.fused_add_rms_norm.native(x, residual, weight, EPS)
                assert torch.equal(out[:tokens], total), f"fused add x{vectors}: sum differs"
                assert_close(ops.fused_add_rms_norm, out[tokens:], y)
            else:
                product = x[:, :width].float() * x[:, width:]
                assert_close(ops.silu_and_mul, out, product.to(x.dtype))
            runs[f"{mode} x{vectors}"] = run
    return runs


def candidates_for(
    lib: Any, kernels: Any, family: str, tokens: int, width: int
) -> dict[str, Callable[[], Any]]:
    """The family's minimal kernels, the empty kernels and both providers' op at one shape."""
    runs = minimal_kernels(lib, family, tokens, width)
    op, args = tools.bf16_inputs(family, tokens, width)
    hint = args[0]
    runs["empty cuda"] = lambda: kernels.empty_kernel(hint)
    runs["empty triton"] = tools.launch_empty_kernel
    for provider in ("cuda", "triton"):
        runs[f"{provider} op"] = partial(op.impls[provider].fn, *args)
    return runs


def summary(family: str, times: dict[str, list[float]]) -> dict[str, float]:
    """µs above the empty kernel of each kind: each minimal kernel's fastest vector count,
    and the two providers' ops."""
    best = {name: min(values) for name, values in times.items()}
    over = {
        mode: min(best[n] for n in best if n.startswith(f"{mode} x")) - best["empty cuda"]
        for mode in FAMILIES[family][1]
    }
    over["cuda op"] = best["cuda op"] - best["empty cuda"]
    over["triton op"] = best["triton op"] - best["empty triton"]
    return over


def markdown(results: list[dict[str, Any]], device: str, rounds: int) -> str:
    """The tables of `results` (µs above the empty kernel of each kind), one a family."""
    lines = [
        f"# The least a decode-size row kernel costs — {device}",
        "",
        "µs above the empty kernel of each kind (CUDA for the minimal kernels and the cuda op,",
        f"Triton for the Triton op), fastest of {rounds} rotated rounds of CUDA-graph replays in",
        "one process, bf16. The minimal kernels are `row_floor_probe.cu`'s: `copy` reads and",
        "writes the row; `scaled` adds its sum of squares and x / rms; `norm` reads the weight",
        "too (a minimal rms_norm); `fused add` adds the residual, stores the sum and normalizes",
        "it; `mul` multiplies the two halves of a gated row (the bytes of silu_and_mul without",
        "its activation). The norm kernels take one block a row, the fastest of 1, 2 or 4",
        "vectors a thread; `mul` one vector a thread in blocks of 256. The cuda provider's",
        "decode line is 0.5 µs.",
    ]
    for family in FAMILIES:
        rows = [r for r in results if r["family"] == family]
        columns = list(rows[0]["over"])
        lines += [
            "",
            f"## {family}",
            "",
            "| tokens | width | " + " | ".join(columns) + " |",
            "|---|---|" + "---|" * len(columns),
        ]
        for r in rows:
            cells = " | ".join(f"{r['over'][c]:+.2f}" for c in columns)
            lines.append(f"| {r['tokens']} | {r['width']} | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--md", type=Path, help="the tables as markdown")
    args = parser.parse_args()
    import_providers()  # run from source, the packages have no entry points
    kernels = tools.ir_cuda_kernels()
    if kernels is None:
        raise SystemExit("row_floor_probe.py: needs the ir_cuda kernels (a GPU with nvcc)")
    lib = tools.build_probe(SOURCE, Path(tempfile.mkdtemp()))
    torch.manual_seed(0)
    results = []
    for family, (shapes, _) in FAMILIES.items():
        for tokens, width in shapes:
            runs = candidates_for(lib, kernels, family, tokens, width)
            times = tools.time_rotated(runs, args.rounds)
            over = summary(family, times)
            results.append(
                {
                    "family": family,
                    "tokens": tokens,
                    "width": width,
                    "times_us": times,
                    "over": over,
                }
            )
            line = "  ".join(f"{name} +{us:.2f}" for name, us in over.items())
            print(f"{family} {tokens}x{width}: {line}", flush=True)
            print(f"    {tools.fastest_line(times)}", flush=True)
    tools.write_results(args.json, results)
    if args.md is not None:
        args.md.write_text(markdown(results, torch.cuda.get_device_name(), args.rounds))


if __name__ == "__main__":
    main()
