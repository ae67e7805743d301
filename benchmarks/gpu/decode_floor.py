"""How close a decode-size shape can get to an empty kernel: an elementwise kernel moving the
same bytes.

For every shape of a kernel-grid JSON (`python -m ir_stack.bench.kernels`) with at most 16
tokens, this times, by CUDA-graph replay on the same GPU, torch's elementwise negation of a
bf16 tensor of half the op's minimum traffic into another (a kernel, not a memcpy node, that
reads and writes as many bytes as the op must), and writes a table of that time above the empty
kernel's beside the grid's `cuda` and `triton` times above theirs. It is not a lower bound in
the strict sense (another kernel could move the bytes faster), but it is about the simplest
kernel that moves them: where it alone lies more than the issue's margin above an empty kernel,
the margin asks the op to move its bytes faster than an elementwise copy does.

Usage (GPU machine, after the grid, same process tree): `python3 benchmarks/gpu/decode_floor.py
OUT/kernels-<card>.json OUT/decode-floor.md`.
"""

import json
import sys
from pathlib import Path

import torch

from ir_stack.bench.kernels import empty_kernel_us, replayed_us

DECODE_TOKENS = 16


def copy_us(nbytes: int) -> float:
    """Median CUDA-graph replay time of an elementwise kernel reading and writing `nbytes` bytes
    each way (bf16 negation), fastest of three rounds."""
    src = torch.randn(max(1, nbytes // 2), dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    return min(replayed_us(lambda: torch.neg(src, out=dst), 20) for _ in range(3))


def main(grid_json: str, out_md: str) -> None:
    grid = json.loads(Path(grid_json).read_text())
    meta = grid["meta"]
    empty = {
        "triton": meta["empty_triton_kernel_us_graph"],
        "cuda": meta.get("empty_cuda_kernel_us_graph"),
    }
    best: dict[tuple[str, int, int], dict[str, float]] = {}
    traffic: dict[tuple[str, int, int], int] = {}
    for r in grid["records"]:
        if r["tokens"] > DECODE_TOKENS or r["provider"] not in empty:
            continue
        key = (r["op"], r["tokens"], r["hidden"])
        traffic[key] = r["bytes"]
        cell = best.setdefault(key, {})
        cell[r["provider"]] = min(cell.get(r["provider"], float("inf")), r["us_graph"])
    empty_now = empty_kernel_us()
    copy_us(1 << 20)  # warm-up, so that no size pays for the first launch of the process
    copies = {n: copy_us(max(1, n // 2)) for n in sorted(set(traffic.values()))}
    lines = [
        f"# Decode sizes against a copy of the same bytes — {meta['card']}",
        "",
        f"Grid `{Path(grid_json).name}` ({meta['date']}); empty kernels in the grid: triton "
        f"{empty['triton']:.2f} µs, cuda {empty['cuda'] or float('nan'):.2f}; empty triton "
        f"kernel in this process {empty_now:.2f} µs. `copy` is an elementwise bf16 negation "
        "reading and writing as many bytes as the op must (half its minimum traffic each way), "
        "replayed; "
        "every `+` column is µs above the empty kernel of its own timing.",
        "",
        "| op | tokens | hidden | KiB | copy µs | copy + | cuda + | triton + |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(best):
        op, tokens, hidden = key
        c = copies[traffic[key]]
        cells = [
            f"{best[key][p] - empty[p]:.2f}" if p in best[key] and empty[p] else "-"
            for p in ("cuda", "triton")
        ]
        lines.append(
            f"| {op} | {tokens} | {hidden} | {traffic[key] / 1024:.0f} | {c:.2f} | "
            f"{c - empty_now:.2f} | {cells[0]} | {cells[1]} |"
        )
    Path(out_md).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
