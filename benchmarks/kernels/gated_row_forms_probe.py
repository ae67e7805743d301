"""Probe: what puts Liger's silu kernel ahead at 5632-wide rows streamed from memory.

Round 5 of `benchmarks/results/triton-tuning-H200.log` timed `gated_kernel` in Liger's layout (a
row a program, the next power of two over 16 warps) 0.9-2.4 % behind Liger's own kernel, so the
layout alone is not the cause. Liger's kernel differs from ours in three more ways, each a
switch of `row_form_kernel` here: the width is a compile-time constant (`CONST_WIDTH`), the gate
is ``x * sigmoid(x)`` with Triton's division (`FAST` off: ours divides by one reciprocal
instruction), and the gate is rounded to the dtype and multiplied in it (`ROUND_TWICE`; ours
and the catalog's reference round once). Every form is timed beside Liger, Inductor and the
op's default launch; forms that round once and use our gate are checked bitwise against the
default, the others against Liger's output (Liger's arithmetic) or reported by their largest
difference. Times: fastest of `--rounds` rounds of CUDA-graph replays, µs, with the fraction of
the copy bandwidth measured in the same process.

Usage (GPU machine, packages on `PYTHONPATH`, `benchmarks/kernels` on it too):
  python benchmarks/kernels/gated_row_forms_probe.py [--rounds 3] [--shapes 4096x5632,...]
"""

import argparse
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import triton
import triton.language as tl
from norm_split_h100 import fastest_of_rounds

from ir_kernels_triton import pointwise_kernels as pk
from ir_kernels_triton.platform import interpreting
from ir_spec import ops
from ir_stack.bench.kernels import anchors, copy_bandwidth

SHAPES = "1024x5632,4096x5632,16384x5632,16x14336,4096x14336,4096x28672"


@triton.jit
def row_form_kernel(
    x_ptr,
    x_stride,
    out_ptr,
    out_stride,
    width_arg,
    D: tl.constexpr,
    BLOCK: tl.constexpr,
    CONST_WIDTH: tl.constexpr,
    FAST: tl.constexpr,
    ROUND_TWICE: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """One row a program: ``out = silu(x[:, :D]) * x[:, D:]`` in the form the switches pick."""
    row = tl.program_id(0).to(tl.int64)
    width = D if CONST_WIDTH else width_arg
    offs = tl.arange(0, BLOCK)
    mask = offs < width
    x_row = x_ptr + row * x_stride
    a = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_row + width + offs, mask=mask, other=0.0)
    g = pk._gate(a, 0, INTERPRETED) if FAST else a * tl.sigmoid(a)  # 0: silu
    y = g.to(b.dtype) * b if ROUND_TWICE else g * b.to(tl.float32)
    tl.store(out_ptr + row * out_stride + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


#: name: (CONST_WIDTH, FAST, ROUND_TWICE)
FORMS = {
    "liger-arith": (True, False, True),
    "liger-arith-fast": (True, True, True),
    "once-precise": (True, False, False),
    "once-fast": (True, True, False),
    "once-fast-rt": (False, True, False),
}


def launch_form(
    x: torch.Tensor, out: torch.Tensor, form: tuple[bool, bool, bool], block: int, warps: int
) -> None:
    d = x.shape[-1] // 2
    const_width, fast, round_twice = form
    row_form_kernel[(x.shape[0],)](
        x,
        x.stride(0),
        out,
        out.stride(0),
        d,
        D=d,
        BLOCK=block,
        CONST_WIDTH=const_width,
        FAST=fast,
        ROUND_TWICE=round_twice,
        INTERPRETED=interpreting(),
        num_warps=warps,
    )


def compared(launch: Callable[[], object], out: torch.Tensor, expected: torch.Tensor) -> str:
    """How `launch`'s output into a zeroed `out` compares with `expected`: "=" where bitwise
    equal, else the largest difference."""
    out.zero_()
    launch()
    if torch.equal(out, expected):
        return "="
    return f"~{(out.float() - expected.float()).abs().max().item():.2g}"


def form_runs(
    x: torch.Tensor, warps: list[int]
) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    """Liger, Inductor, the default launch and every form at every warp count, each with how
    its output compares (forms that round once against the default, twice against Liger)."""
    tokens, d = x.shape[0], x.shape[1] // 2
    out = torch.empty(tokens, d, device=x.device, dtype=x.dtype)
    runs: dict[str, Callable[[], Any]] = dict(anchors(ops.silu_and_mul, (x,)))
    for anchor in runs.values():
        anchor()
    pk.launch_gated(x, out, pk.ACT_SILU)
    expected = out.clone()
    liger_out = runs["liger"]().clone() if "liger" in runs else None
    runs["default"] = partial(pk.launch_gated, x, out, pk.ACT_SILU)
    notes = {"default": "="}
    block = triton.next_power_of_2(d)
    for name, form in FORMS.items():
        reference = liger_out if form[2] else expected
        if reference is None:
            continue
        for w in warps:
            label = f"{name}/{w}w"
            runs[label] = partial(launch_form, x, out, form, block, w)
            notes[label] = compared(runs[label], out, reference)
    return runs, notes


def placement_runs(x: torch.Tensor) -> dict[str, Callable[[], object]]:
    """The same kernels writing to other places: Liger's own kernel (a new output each call,
    from the graph's pool), its arithmetic in our form into a fixed output or a new one each
    call, and the default launch the same two ways plus fixed outputs at other offsets into
    a larger allocation. Identical kernels apart in time here measure placement, not code."""
    tokens, d = x.shape[0], x.shape[1] // 2
    liger_form = FORMS["liger-arith"]
    block = triton.next_power_of_2(d)
    fixed = torch.empty(tokens, d, device=x.device, dtype=x.dtype)
    pool = torch.empty(tokens * d + (8 << 20), device=x.device, dtype=x.dtype)

    def fresh() -> torch.Tensor:
        return torch.empty(tokens, d, device=x.device, dtype=x.dtype)

    runs: dict[str, Callable[[], object]] = {}
    liger = anchors(ops.silu_and_mul, (x,)).get("liger")
    if liger is not None:
        runs["liger"] = liger
        runs["liger-again"] = liger
    runs["liger-arith/16w fixed"] = partial(launch_form, x, fixed, liger_form, block, 16)
    runs["liger-arith/16w new"] = lambda: launch_form(x, fresh(), liger_form, block, 16)
    runs["default fixed"] = partial(pk.launch_gated, x, fixed, pk.ACT_SILU)
    runs["default new"] = lambda: pk.launch_gated(x, fresh(), pk.ACT_SILU)
    for offset_kib in (64, 1024, 2048, 5120):
        view = pool[offset_kib * 512 :][: tokens * d].view(tokens, d)
        runs[f"default +{offset_kib}K"] = partial(pk.launch_gated, x, view, pk.ACT_SILU)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of timings (fastest kept)")
    parser.add_argument("--shapes", default=SHAPES, help="TOKENSxWIDTH,...")
    parser.add_argument("--warps", default="8,16,32", help="warps of each row form")
    parser.add_argument(
        "--placement", action="store_true", help="time `placement_runs` instead of the forms"
    )
    args = parser.parse_args()
    copy = copy_bandwidth()
    if not args.placement:
        print(f"copy {copy:.0f} GB/s; [=]: bitwise the default's (round once) or Liger's (twice)")
    for shape in args.shapes.split(","):
        tokens, d = map(int, shape.split("x"))
        x = torch.randn(tokens, 2 * d, device="cuda", dtype=torch.bfloat16)
        traffic = 3 * x.numel() // 2 * x.element_size()
        notes: dict[str, str] = {}
        if args.placement:
            runs = placement_runs(x)
            for run in runs.values():
                run()
        else:
            runs, notes = form_runs(x, [int(w) for w in args.warps.split(",")])
        best = fastest_of_rounds(runs, args.rounds)
        # placement in the order of `placement_runs`, the forms fastest first
        listed = best.items() if args.placement else sorted(best.items(), key=lambda kv: kv[1])
        cells = " ".join(
            f"{k}{f'[{notes[k]}]' if k in notes else ''}="
            f"{t:.2f}/{traffic / (t * 1e-6) / 1e9 / copy:.3f}"
            for k, t in listed
        )
        label = "placement" if args.placement else "silu_and_mul"
        print(f"   {label} {tokens}x{d}: {cells}", flush=True)


if __name__ == "__main__":
    main()
