"""The fp8 quantizers without a norm in several layouts and parameter forms, beside Triton.

`quant_layout_probe.cu` holds one templated kernel on raw pointers (bf16 rows in, fp8 and a
float32 scale a row out) in several layouts: lanes a row, vectors a lane (adjacent or a team
apart), rows a thread, threads a block. Each variant is checked bitwise against the first (the
layout `ir_cuda` uses) and timed by CUDA-graph replay (`do_bench_cudagraph`, median; fastest of
`--rounds`, each round in a rotated order), beside Triton's kernel and, where the package
builds, the `ir_cuda` op itself. Prints one table; `--json` also writes the numbers.

Usage (GPU machine): python benchmarks/gpu/quant_layout_probe.py [--rounds 3] [--json OUT]
  [--streamed | --groups-only]
"""

from __future__ import annotations

import argparse
import ctypes
import tempfile
from pathlib import Path
from typing import Any

import probe_tools as tools
import torch

from ir_kernels_triton.dynamic_quant_kernels import launch_dynamic_quant, launch_group_quant

SOURCE = Path(__file__).with_name("quant_layout_probe.cu")
FP8 = torch.float8_e4m3fn

#: (name, variant id) per kind of row; the first of each is ir_cuda's layout.
GROUP_VARIANTS = [
    ("t8v2 g1 b128 (ir_cuda)", 0),
    ("t8v2 g2 b64 (triton)", 1),
    ("t8v2 g1 b64", 2),
    ("t8v2 g2 b128", 3),
    ("t4v4 g1 b128", 4),
    ("t8v2 g4 b64", 5),
    ("t8v2 g2 b32", 6),
    ("t8v2 plain-ld", 7),
    ("t8v2 rowargs", 8),
    ("t8v2 rowargs plain-ld", 9),
    ("t8v2 g1 b128 barrier", 43),
    ("t16v1 g1 b128 barrier", 40),
    ("t4v4 g1 b64 barrier", 44),
    ("t8v2 g2 b64 barrier (as triton)", 45),
]
#: Groups of 128 whose input is over the L2 (`--streamed`): the first is ir_cuda's layout there
#: (`streamed_short_rows`), then its layout below the L2 and other shares of a row a thread.
STREAMED_VARIANTS = [
    ("t4v4 g1 b128 (ir_cuda streamed)", 4),
    ("t8v2 g1 b128 (ir_cuda)", 0),
    ("t16v1 g1 b128 (triton 2048)", 30),
    ("t4v4 g1 b64", 31),
    ("t4v4 g1 b256", 32),
    ("t2v8 g1 b128", 33),
    ("t4v4 g2 b128", 34),
    ("t16v1 g2 b64", 35),
    ("t8v2 g2 b128", 3),
    ("t4v4 apart g1 b128", 36),
    ("t8v2 apart g1 b128", 37),
    ("t4v4 apart g1 b256", 38),
    ("t16v1 g1 b128 scale-first", 39),
    ("t16v1 g1 b128 barrier", 40),
    ("t16v1 g1 b128 plain-ld scale-first barrier (as triton)", 41),
    ("t4v4 g1 b128 scale-first barrier", 42),
    ("t16v1 g2 b128 plain-ld scale-first barrier (H200 triton 2048)", 46),
    ("t16v1 g2 b256 plain-ld scale-first barrier (H200 triton 4096)", 47),
    ("t16v1 g2 b512 plain-ld scale-first barrier (H200 triton 8192)", 48),
    ("t16v1 g2 b256", 49),
    ("t16v1 g2 b512", 50),
    ("t8v2 g1 b256", 51),
    ("t8v2 g1 b512", 52),
    ("t8v2 g1 b512 barrier", 53),
]
STREAMED_SHAPES = [(4096, 8192), (16384, 2048), (16384, 4096), (16384, 8192)]
TOKEN_VARIANTS = {
    2048: [
        ("t128v2 apart (ir_cuda)", 10),
        ("t128v2 adj (triton)", 11),
        ("t64v4 adj", 12),
        ("t256v1", 13),
        ("t128v2 apart plain-ld", 14),
        ("t128v2 apart rowargs", 15),
        ("t128v2 apart rowargs plain-ld", 16),
    ],
    4096: [
        ("t256v2 apart (ir_cuda)", 20),
        ("t256v2 adj (triton)", 21),
        ("t128v4 adj", 22),
        ("t256v2 apart plain-ld", 24),
        ("t256v2 apart rowargs", 25),
        ("t256v2 apart rowargs plain-ld", 26),
    ],
}
GROUP_SHAPES = [
    (16, 4096),
    (128, 8192),
    (1024, 2048),
    (1024, 4096),
    (1024, 8192),
    (4096, 2048),
    (4096, 8192),
]
TOKEN_SHAPES = [
    (1, 2048),
    (16, 2048),
    (128, 2048),
    (1024, 2048),
    (4096, 2048),
    (1, 4096),
    (128, 4096),
    (1024, 4096),
]


def check_equal(outs: dict[str, tuple[torch.Tensor, torch.Tensor]], kept: str) -> None:
    """Every variant's fp8 bits and scales equal the kept layout's."""
    kept_q, kept_s = outs[kept]
    for name, (q, s) in outs.items():
        assert torch.equal(q.view(torch.uint8), kept_q.view(torch.uint8)), f"{name}: outputs"
        assert torch.equal(s.view(-1), kept_s.view(-1)), f"{name}: scales"


def run_case(
    lib: ctypes.CDLL,
    kernels: Any,
    op: str,
    shape: tuple[int, int],
    width: int,
    variants: list[tuple[str, int]],
    rounds: int,
) -> dict[str, list[float]]:
    """Times every variant of one op and shape, with Triton's kernel and the ir_cuda op."""
    tokens, hidden = shape
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16) * 3
    rows, nvec = tokens * hidden // width, width // 8
    outs = {
        name: (
            torch.empty(tokens, hidden, device="cuda", dtype=FP8),
            torch.empty(rows, device="cuda", dtype=torch.float32),
        )
        for name, _ in variants
    }

    candidates = {n: tools.probe_call(lib, v, x, *outs[n], rows, nvec) for n, v in variants}
    tq = torch.empty(tokens, hidden, device="cuda", dtype=FP8)
    ts = torch.empty(tokens, hidden // width, device="cuda", dtype=torch.float32)
    grouped = op == "group_quant_fp8"
    if grouped:
        candidates["triton"] = lambda: launch_group_quant(x, width, tq, ts)
    else:
        candidates["triton"] = lambda: launch_dynamic_quant(x, None, tq, ts.view(-1))
    if kernels is not None:
        outs["ir_cuda op"] = (
            torch.empty(tokens, hidden, device="cuda", dtype=FP8),
            torch.empty(tokens, hidden // width, device="cuda", dtype=torch.float32),
        )
        cq, cs = outs["ir_cuda op"]
        if grouped:
            candidates["ir_cuda op"] = lambda: kernels.group_quant_fp8_out(cq, cs, x, width)
        else:
            candidates["ir_cuda op"] = lambda: kernels.dynamic_quant_fp8_out(cq, cs, x, None)
    for run in candidates.values():
        run()
    torch.cuda.synchronize()
    check_equal(outs, variants[0][0])
    return tools.time_rotated(candidates, rounds, rep_ms=25)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--without-ir-cuda", action="store_true", help="skip the op's column")
    parser.add_argument(
        "--streamed", action="store_true", help="only group quant over the L2, in its own layouts"
    )
    parser.add_argument("--groups-only", action="store_true", help="group quant within the L2 only")
    parser.add_argument(
        "--variants", default="", help="only these variant ids (comma-separated; the first is kept)"
    )
    args = parser.parse_args()
    lib = tools.build_probe(SOURCE, Path(tempfile.mkdtemp()))
    kernels = None if args.without_ir_cuda else tools.ir_cuda_kernels()
    torch.manual_seed(0)
    if args.streamed:
        cases = [("group_quant_fp8", shape, 128, STREAMED_VARIANTS) for shape in STREAMED_SHAPES]
    else:
        cases = [("group_quant_fp8", shape, 128, GROUP_VARIANTS) for shape in GROUP_SHAPES]
        if not args.groups_only:
            cases += [("dynamic_quant_fp8", s, s[1], TOKEN_VARIANTS[s[1]]) for s in TOKEN_SHAPES]
    if args.variants:
        wanted = {int(v) for v in args.variants.split(",")}
        cases = [
            (op, shape, width, [v for i, v in enumerate(vs) if i == 0 or v[1] in wanted])
            for op, shape, width, vs in cases
        ]
    results = []
    for op, shape, width, variants in cases:
        times = run_case(lib, kernels, op, shape, width, variants, args.rounds)
        results.append({"op": op, "tokens": shape[0], "hidden": shape[1], "times_us": times})
        print(f"{op} {shape[0]}x{shape[1]}: {tools.fastest_line(times)}", flush=True)
    tools.write_results(args.json, results)


if __name__ == "__main__":
    main()
