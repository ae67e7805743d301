"""Suite ``tp-kernels``: the fused all-reduce + residual add + RMSNorm over N ranks (default
2) against the unfused NCCL all-reduce followed by the selected ``fused_add_rms_norm`` kernel,
across message sizes.

Each rank times, per token count (1 .. 8192 by powers of two on GPUs, hidden 4096, bfloat16):

- ``fused``: ``all_reduce_fused_add_rms_norm``'s ``triton`` implementation (one kernel over
  torch symmetric memory; the row says which path it took: one-shot, two-shot, or the
  fallback above its buffer);
- ``all_reduce + norm``: ``ops.all_reduce`` (NCCL) then ``ops.fused_add_rms_norm`` with the
  selected kernel;

and checks each against the native composition. Calls are timed back to back between CUDA
events; the result holds rank 0's times. On the CPU (gloo, the kernels in Triton's
interpreter) only tiny sizes make sense: the suite then checks that the two agree, and the
fused path is the fallback.

It starts its ranks itself (``ir-stack bench --only tp-kernels``: NCCL with one GPU a rank,
gloo on the CPU), or is one of the processes of ``torchrun --nproc-per-node N -m
ir_stack.bench.tp_kernels --tp N --out DIR``. Writes ``DIR/tp-kernels-<device>.json``,
``.md`` and ``.png``.
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from ir_spec import ops, process_groups

from . import common, results, timing
from .results import Result

KEY = ["impl", "tokens"]
METRICS = [results.Metric("ms", "ms")]
GPU_TOKENS = tuple(2**i for i in range(14))  # 1 .. 8192
CPU_TOKENS = (1, 4)
FUSED, UNFUSED = "fused", "all_reduce + norm"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.parser("tp_kernels", (__doc__ or "").split("\n")[0])
    parser.add_argument("--tp", type=int, default=2, help="ranks (default: %(default)s)")
    parser.add_argument("--hidden", type=int, help="row width (default: 4096; 64 on the CPU)")
    parser.add_argument(
        "--tokens", help="comma-separated token counts (default: 1 .. 8192; 1,4 on the CPU)"
    )
    parser.add_argument("--iters", type=int, help="timed calls a size (default: 100; 2 on CPU)")
    args = parser.parse_args(argv)
    if args.tp < 1:
        parser.error(f"--tp {args.tp}: expected a positive number of ranks")
    if args.hidden is not None and args.hidden < 1:
        parser.error(f"--hidden {args.hidden}: expected a positive row width")
    if args.tokens is not None:
        try:
            args.tokens = tuple(int(t) for t in args.tokens.split(","))
        except ValueError:
            parser.error(f"--tokens {args.tokens!r}: expected comma-separated integers")
        if any(t < 1 for t in args.tokens):
            parser.error(f"--tokens {args.tokens!r}: expected positive token counts")
    return args


def impls(group_name: str) -> dict[str, Callable[[Tensor, Tensor, Tensor], Any]]:
    """The two ways to reduce, add and normalize a row block, by row name."""
    fused = ops.all_reduce_fused_add_rms_norm.impls["triton"].fn

    def unfused(x: Tensor, residual: Tensor, weight: Tensor) -> Any:
        return ops.fused_add_rms_norm(ops.all_reduce(x, group_name), residual, weight, 1e-6)

    return {
        FUSED: lambda x, r, w: fused(x, r, w, 1e-6, group_name),
        UNFUSED: unfused,
    }


def run_rank(rank: int, world: int, args: argparse.Namespace) -> None:
    """One rank: time both implementations at each size; rank 0 writes the result."""
    from ir_kernels_triton.collective.allreduce_norm import path_for

    gpu = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
    common.load_providers()
    dtype = torch.bfloat16 if gpu else torch.float32
    hidden = args.hidden or (4096 if gpu else 64)
    sizes = args.tokens or (GPU_TOKENS if gpu else CPU_TOKENS)
    iters = args.iters or (100 if gpu else 2)
    group = process_groups.default_group_name()
    gen = torch.Generator().manual_seed(1000 + rank)
    shared = torch.Generator().manual_seed(7)
    rows: list[dict[str, Any]] = []
    weight = (1 + 0.1 * torch.randn(hidden, generator=shared)).to(dtype).to(device)
    with torch.no_grad():
        for tokens in sizes:
            x = torch.randn(tokens, hidden, generator=gen).to(dtype).to(device)
            residual = torch.randn(tokens, hidden, generator=shared).to(dtype).to(device)
            want = ops.all_reduce_fused_add_rms_norm.native(x, residual, weight, 1e-6, group)
            for name, fn in impls(group).items():
                call = functools.partial(fn, x, residual, weight)
                got = call()
                error = max(
                    float((g.float() - w.float()).abs().max())
                    for g, w in zip(got, want, strict=True)
                )
                ms = timing.mean_ms(call, device, iters)
                path = path_for(x, group).kind if name == FUSED else "nccl" if gpu else "gloo"
                row = {"impl": name, "tokens": tokens, "hidden": hidden, "path": path}
                row |= {"bytes": x.numel() * x.element_size(), "ms": ms, "max_abs_error": error}
                rows.append(row)
                if rank == 0:
                    print(
                        f"{name:>18} {tokens:6d} x {hidden} {path:>9} {ms:9.4f} ms  err {error:.3g}"
                    )
    if rank == 0:
        write_result(args, device, world, dtype, hidden, rows)


def write_result(
    args: argparse.Namespace,
    device: torch.device,
    world: int,
    dtype: torch.dtype,
    hidden: int,
    rows: list[dict[str, Any]],
) -> None:
    result = results.new_result(
        "tp-kernels",
        f"All-reduce + residual add + RMSNorm over {world} ranks, hidden {hidden}, "
        f"{str(dtype).removeprefix('torch.')}",
        results.current_device(device.type),
        {"tp": world, "hidden": hidden, "iters": args.iters},
        KEY,
        METRICS,
    )
    result.facts = {
        "backend": dist.get_backend(),
        "timed_with": "CUDA events" if device.type == "cuda" else "perf_counter",
        "errors_against": "the native composition (functional all-reduce, native norm)",
    }
    result.rows = rows
    result.notes = [f"{world} ranks ({dist.get_backend()}); the times are rank 0's."]
    path = results.save(result, args.out)
    print(results.render(result, path).read_text())


def markdown(result: Result) -> str:
    """Per token count: each implementation's time and path, and the fused one's speed-up."""
    method = (
        "ms a call, back to back (CUDA events on a GPU); the fused row's path is the one its "
        "message size takes; speed-up: the unfused time over the fused time."
    )
    lines = results.header(result, method)
    by = {(r["impl"], r["tokens"]): r for r in result.rows}
    sizes = sorted({r["tokens"] for r in result.rows})
    table_rows = []
    for tokens in sizes:
        fused, unfused = by.get((FUSED, tokens)), by.get((UNFUSED, tokens))
        speedup = unfused["ms"] / fused["ms"] if fused and unfused and fused["ms"] else None
        table_rows.append(
            (
                tokens,
                fused["path"] if fused else "-",
                results.number(fused["ms"]) if fused else "-",
                results.number(unfused["ms"]) if unfused else "-",
                f"{speedup:.2f}x" if speedup else "-",
                results.number(max(r["max_abs_error"] for r in (fused, unfused) if r)),
            )
        )
    lines += results.table(
        ["tokens", "fused path", "fused ms", "all_reduce + norm ms", "speed-up", "max abs error"],
        table_rows,
        align="rlrrrr",
    )
    lines += [f"{note}\n" for note in result.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


def plot(result: Result, out: Path) -> None:
    """ms against token count, one line an implementation (PNG)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name in (FUSED, UNFUSED):
        points = sorted((r["tokens"], r["ms"]) for r in result.rows if r["impl"] == name)
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens")
    ax.set_ylabel("ms a call")
    ax.legend()
    ax.set_title(f"{result.title} ({result.device.name})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite (see the module's docstring)."""
    args = parse_args(argv)
    if not torch.cuda.is_available():  # the ranks import the kernels into the interpreter
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return common.run_ranks("tp-kernels", run_rank, args)


if __name__ == "__main__":
    raise SystemExit(main())
