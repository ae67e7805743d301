"""How far above an empty kernel the least possible row kernel lies at decode sizes, beside the
rms_norm ops.

`row_floor_probe.cu` holds three minimal kernels on contiguous bf16 rows (one block a row, the
width a compile-time constant, 1, 2 or 4 16-byte vectors a thread, no checks): `copy` (the row
read and written), `scaled` (its sum of squares over the block, then x / rms: a norm without a
weight) and `norm` (a minimal rms_norm, the weight read beside the row). Each is checked
against the catalog's reference (copy bitwise, the others with rms_norm's bf16 tolerance), then
timed by CUDA-graph replay (`do_bench_cudagraph`, median; fastest of `--rounds` rotated rounds)
in one rotation with the empty CUDA kernel (``torch.ops.ir_cuda.empty_kernel``), an empty
Triton kernel and both providers' rms_norm. Each line gives µs above the empty kernel of its
own kind; the fastest vector count of each mode is kept.

The issue's decode line for the cuda provider is 0.5 µs above the empty CUDA kernel: where even
`scaled` lies above it, no one-block-a-row kernel that reduces its row meets it.

Usage (GPU machine, from ``benchmarks/gpu`` on ``PYTHONPATH``):
  python benchmarks/gpu/row_floor_probe.py [--rounds 5] [--json OUT] [--md OUT]
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import probe_tools as tools
import torch

from ir_spec import ops
from ir_spec.testing import assert_close
from ir_stack.bench.kernels import import_providers

SOURCE = Path(__file__).with_name("row_floor_probe.cu")
SHAPES = [(1, 2048), (1, 4096), (1, 8192), (16, 2048), (16, 4096), (16, 8192)]
MODES = {"copy": 0, "scaled": 1, "norm": 2}
VECTORS = (1, 2, 4)
EPS = 1e-6  # the probe's kernels are built with it


def candidates_for(
    lib: Any, kernels: Any, tokens: int, hidden: int
) -> dict[str, Callable[[], Any]]:
    """Every kernel of the comparison for one shape, each output checked once first."""
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(hidden, device="cuda", dtype=torch.bfloat16)
    references = {
        "copy": x,
        "scaled": ops.rms_norm.native(x, None, EPS, None),
        "norm": ops.rms_norm.native(x, weight, EPS, None),
    }
    runs: dict[str, Callable[[], Any]] = {}
    for mode, number in MODES.items():
        for vectors in VECTORS:
            threads = hidden // (8 * vectors)
            if not 32 <= threads <= 1024:
                continue
            out = torch.empty_like(x)
            run = tools.probe_call(lib, 10 * number + vectors, x, out, weight, tokens, hidden)
            run()
            torch.cuda.synchronize()
            if mode == "copy":
                assert torch.equal(out, x), f"copy x{vectors}: output differs"
            else:
                assert_close(ops.rms_norm, out, references[mode])
            runs[f"{mode} x{vectors}"] = run
    hint = x
    runs["empty cuda"] = lambda: kernels.empty_kernel(hint)
    runs["empty triton"] = tools.launch_empty_kernel
    for provider in ("cuda", "triton"):
        fn = ops.rms_norm.impls[provider].fn
        assert_close(ops.rms_norm, fn(x, weight, EPS, None), references["norm"])
        runs[f"{provider} rms_norm"] = _bound(fn, (x, weight, EPS, None))
    return runs


def _bound(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], Any]:
    return lambda: fn(*args)


def summary(times: dict[str, list[float]]) -> dict[str, float]:
    """µs above the empty kernel of each kind: the minimal kernels' fastest vector count for
    each mode, and the two providers' ops."""
    best = {name: min(values) for name, values in times.items()}
    over = {
        mode: min(best[n] for n in best if n.startswith(f"{mode} x")) - best["empty cuda"]
        for mode in MODES
    }
    over["cuda rms_norm"] = best["cuda rms_norm"] - best["empty cuda"]
    over["triton rms_norm"] = best["triton rms_norm"] - best["empty triton"]
    return over


def markdown(results: list[dict[str, Any]], device: str, rounds: int) -> str:
    """The table of `results` (µs above the empty kernel of each kind)."""
    columns = [*MODES, "cuda rms_norm", "triton rms_norm"]
    lines = [
        f"# The least a decode-size row kernel costs — {device}",
        "",
        "µs above the empty kernel of each kind (CUDA for the minimal kernels and the cuda op,",
        f"Triton for the Triton op), fastest of {rounds} rotated rounds of CUDA-graph replays in",
        "one process; bf16 rms_norm rows. `copy`, `scaled` and `norm` are",
        "`row_floor_probe.cu`'s minimal kernels (one block a row, the fastest of 1, 2 or 4",
        "vectors a thread): the row read and written; its sum of squares, then x / rms; a",
        "minimal rms_norm with its weight. The cuda provider's decode line is 0.5 µs.",
        "",
        "| tokens | hidden | " + " | ".join(columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for r in results:
        cells = " | ".join(f"{r['over'][c]:+.2f}" for c in columns)
        lines.append(f"| {r['tokens']} | {r['hidden']} | {cells} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--md", type=Path, help="the table as markdown")
    args = parser.parse_args()
    import_providers()  # run from source, the packages have no entry points
    kernels = tools.ir_cuda_kernels()
    if kernels is None:
        raise SystemExit("row_floor_probe.py: needs the ir_cuda kernels (a GPU with nvcc)")
    lib = tools.build_probe(SOURCE, Path(tempfile.mkdtemp()))
    torch.manual_seed(0)
    results = []
    for tokens, hidden in SHAPES:
        times = tools.time_rotated(candidates_for(lib, kernels, tokens, hidden), args.rounds)
        over = summary(times)
        results.append({"tokens": tokens, "hidden": hidden, "times_us": times, "over": over})
        line = "  ".join(f"{name} +{us:.2f}" for name, us in over.items())
        print(f"rms_norm {tokens}x{hidden}: {line}", flush=True)
        print(f"    {tools.fastest_line(times)}", flush=True)
    tools.write_results(args.json, results)
    if args.md is not None:
        args.md.write_text(markdown(results, torch.cuda.get_device_name(), args.rounds))


if __name__ == "__main__":
    main()
