"""The gated activations at decode sizes in several launch shapes, beside Triton and Inductor.

`gated_decode_probe.cu` holds silu_and_mul and gelu_and_mul (bf16) as standalone kernels on raw
pointers: `ir_cuda`'s launch form (two elements a thread, the block size from `blockDim`, an exit
before the loads) and a sweep of 1, 2, 4 and 8 elements a thread in blocks of 64, 128 and 256
threads. Each is checked bitwise against the `ir_cuda` op (where the package builds) and timed
by CUDA-graph replay (`do_bench_cudagraph`, median; fastest of `--rounds`, each round in a
rotated order) beside the op, Triton's kernel and Inductor's kernel for the native function.
With `--inductor-code DIR`, Inductor's generated source for each shape is written there.

Usage (GPU machine): python benchmarks/gpu/gated_decode_probe.py [--rounds 5] [--json OUT]
    [--ops silu_and_mul,gelu_and_mul] [--shapes 16x5632,1x14336]
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import probe_tools as tools
import torch
from torch._inductor.utils import run_and_get_code

from ir_kernels_triton.pointwise_kernels import ACT_GELU, ACT_SILU, launch_gated
from ir_spec import ops
from ir_stack.bench.kernels import lift_recompile_limits

SOURCE = Path(__file__).with_name("gated_decode_probe.cu")
LAYOUTS = [
    ("ir_cuda form", 0),
    ("e1 t64", 1),
    ("e1 t128", 2),
    ("e1 t256", 3),
    ("e2 t64", 4),
    ("e2 t128", 5),
    ("e2 t256", 6),
    ("e4 t64", 7),
    ("e4 t128", 8),
    ("e4 t256", 9),
    ("e8 t64", 10),
    ("e8 t128", 11),
]
ACTIVATIONS = {"silu_and_mul": (0, ACT_SILU), "gelu_and_mul": (1, ACT_GELU)}
SHAPES = [(1, 5632), (1, 14336), (1, 28672), (16, 5632), (16, 14336), (16, 28672), (128, 5632)]


def run_case(
    lib: Any, kernels: Any, op: str, tokens: int, d: int, rounds: int, code_dir: Path | None
) -> dict[str, list[float]]:
    """Times every layout of `op` at `tokens` rows of gated width `d`, with the op, Triton's
    kernel and Inductor's kernel for the catalog's reference (the grid's anchor)."""
    probe_act, triton_act = ACTIVATIONS[op]
    native: Callable[..., Any] = getattr(ops, op).native
    x = torch.randn(tokens, 2 * d, device="cuda", dtype=torch.bfloat16) * 2
    outs = {name: torch.empty(tokens, d, device="cuda", dtype=x.dtype) for name, _ in LAYOUTS}
    candidates = {
        name: tools.probe_call(lib, 100 * probe_act + v, x, outs[name], x, tokens, d)
        for name, v in LAYOUTS
    }
    to = torch.empty(tokens, d, device="cuda", dtype=x.dtype)
    candidates["triton"] = lambda: launch_gated(x, to, triton_act)
    compiled = torch.compile(native, dynamic=False, fullgraph=True)
    _, code = run_and_get_code(compiled, x)
    if code_dir is not None:
        (code_dir / f"{op}-{tokens}x{d}.py").write_text("\n\n".join(code))
    candidates["inductor"] = lambda: compiled(x)
    if kernels is not None:
        outs["ir_cuda op"] = torch.empty(tokens, d, device="cuda", dtype=x.dtype)
        co = outs["ir_cuda op"]
        if op == "silu_and_mul":
            candidates["ir_cuda op"] = lambda: kernels.silu_and_mul_out(co, x)
        else:
            candidates["ir_cuda op"] = lambda: kernels.gelu_and_mul_out(co, x, 0)
    for run in candidates.values():
        run()
    torch.cuda.synchronize()
    kept = outs.get("ir_cuda op", outs[LAYOUTS[0][0]])
    for name, o in outs.items():
        assert torch.equal(o, kept), f"{op} {tokens}x{d} {name}: outputs differ"
    reference = native(x).float()
    err = (kept.float() - reference).abs().max().item()
    assert err <= 0.02 * reference.abs().max().item(), f"{op}: off the reference by {err}"
    return tools.time_rotated(candidates, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--inductor-code", type=Path, help="directory for Inductor's sources")
    parser.add_argument("--ops", default=",".join(ACTIVATIONS), help="comma-separated")
    parser.add_argument(
        "--shapes",
        default=",".join(f"{t}x{d}" for t, d in SHAPES),
        help="comma-separated TOKENSxWIDTH (the gated output's width)",
    )
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    if args.inductor_code is not None:
        args.inductor_code.mkdir(parents=True, exist_ok=True)
    lift_recompile_limits()
    lib = tools.build_probe(SOURCE, Path(tempfile.mkdtemp()))
    kernels = tools.ir_cuda_kernels()
    torch.manual_seed(0)
    results = []
    for op in args.ops.split(","):
        for tokens, d in shapes:
            times = run_case(lib, kernels, op, tokens, d, args.rounds, args.inductor_code)
            results.append({"op": op, "tokens": tokens, "hidden": d, "times_us": times})
            print(f"{op} {tokens}x{d}: {tools.fastest_line(times, 3)}", flush=True)
    tools.write_results(args.json, results)


if __name__ == "__main__":
    main()
