"""The elementwise fp8 quantization's prologue in four forms, beside Triton, at decode sizes.

`static_quant_probe.cu` holds the kernel as `ir_cuda` writes it (rows on the grid's y, the block
size read from `blockDim`, an exit before any load, the scale loaded after the row) and three
variants: the scale's load first; the block size a constant and the loads predicated instead of
an exit; contiguous rows as one flat run, as Triton's kernel. Each is checked bitwise against the
first and timed by CUDA-graph replay (`do_bench_cudagraph`, median; fastest of `--rounds`, each
round in a rotated order) beside Triton's kernel and the `ir_cuda` op where the package builds.

Usage (GPU machine): python benchmarks/gpu/static_quant_probe.py [--rounds 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from triton.testing import do_bench_cudagraph

from ir_kernels_triton.pointwise_kernels import launch_static_quant

SOURCE = Path(__file__).with_name("static_quant_probe.cu")
FP8 = torch.float8_e4m3fn
VARIANTS = [("exit first (ir_cuda)", 0), ("scale first", 1), ("const block", 2), ("flat", 3)]
SHAPES = [(1, 2048), (1, 4096), (1, 8192), (16, 2048), (16, 4096), (16, 8192), (64, 2048)]


def build(out_dir: Path) -> ctypes.CDLL:
    library = out_dir / "static_quant_probe.so"
    command = ["nvcc", "-O3", "-arch=sm_90a", "-shared", "-Xcompiler", "-fPIC"]
    subprocess.run([*command, str(SOURCE), "-o", str(library)], check=True)
    lib = ctypes.CDLL(str(library))
    lib.probe_launch.restype = ctypes.c_int
    lib.probe_launch.argtypes = (
        [ctypes.c_int] + [ctypes.c_void_p] * 3 + [ctypes.c_int] * 2 + [ctypes.c_void_p]
    )
    return lib


def ir_cuda_kernels() -> Any:
    """`torch.ops.ir_cuda` where the package builds here, else None."""
    try:
        from ir_kernels_cuda.impls import KERNELS, SUPPORTED

        return KERNELS if SUPPORTED else None
    except Exception as error:  # the probe runs without the package's column
        print(f"ir_cuda unavailable: {error}")
        return None


def run_case(lib: ctypes.CDLL, kernels: Any, tokens: int, hidden: int, rounds: int) -> dict:
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) * 3
    scale = torch.tensor([0.05], device="cuda")
    outs = {name: torch.empty(tokens, hidden, device="cuda", dtype=FP8) for name, _ in VARIANTS}

    def probe(variant: int, q: torch.Tensor) -> Callable[[], None]:
        def run() -> None:
            # the current stream, read at each call: a graph capture runs on its own
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            rc = lib.probe_launch(
                variant, x.data_ptr(), q.data_ptr(), scale.data_ptr(), tokens, hidden, stream
            )
            assert rc == 0, f"probe variant {variant}: launch error {rc}"

        return run

    candidates: dict[str, Callable[[], None]] = {n: probe(v, outs[n]) for n, v in VARIANTS}
    tq = torch.empty(tokens, hidden, device="cuda", dtype=FP8)
    candidates["triton"] = lambda: launch_static_quant(x, scale, tq)
    if kernels is not None:
        outs["ir_cuda op"] = torch.empty(tokens, hidden, device="cuda", dtype=FP8)
        cq = outs["ir_cuda op"]
        candidates["ir_cuda op"] = lambda: kernels.static_quant_fp8_out(cq, x, scale)
    for run in candidates.values():
        run()
    torch.cuda.synchronize()
    kept = outs[VARIANTS[0][0]].view(torch.uint8)
    for name, q in outs.items():
        assert torch.equal(q.view(torch.uint8), kept), f"{name}: outputs differ"
    names = list(candidates)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            times[n].append(float(do_bench_cudagraph(candidates[n], rep=20)) * 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    lib = build(Path(tempfile.mkdtemp()))
    kernels = ir_cuda_kernels()
    torch.manual_seed(0)
    results = []
    for tokens, hidden in SHAPES:
        times = run_case(lib, kernels, tokens, hidden, args.rounds)
        results.append({"tokens": tokens, "hidden": hidden, "times_us": times})
        best = {n: min(v) for n, v in times.items()}
        line = "  ".join(f"{n}={best[n]:.3f}" for n in sorted(best, key=best.__getitem__))
        print(f"static_quant_fp8 {tokens}x{hidden}: {line}", flush=True)
    if args.json:
        device = torch.cuda.get_device_name()
        args.json.write_text(json.dumps({"device": device, "results": results}, indent=1))


if __name__ == "__main__":
    main()
