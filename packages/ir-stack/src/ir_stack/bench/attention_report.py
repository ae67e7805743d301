"""The ``attention`` suite's report: a table a head size (batch x context: each column's time
and fraction of the copy bandwidth, split-K over SDPA), a summary of where the split-K kernel
meets its target, and a plot of the fractions against the context."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import results
from .attention import COLUMNS, TARGET_FRACTION
from .results import Result

#: (batch, context) -> column -> row
Cells = dict[tuple[int, int], dict[str, dict[str, Any]]]


def head_sizes(result: Result) -> list[int]:
    """The head sizes measured, in order."""
    return sorted({int(r["head_size"]) for r in result.rows})


def cells_of(result: Result, head_size: int) -> Cells:
    """Each (batch, context)'s rows of `head_size`, a column each (the fastest where repeated)."""
    cells: Cells = {}
    for row in result.rows:
        if row["head_size"] != head_size or row["column"] not in COLUMNS:
            continue
        at = cells.setdefault((int(row["batch"]), int(row["context"])), {})
        if row["column"] not in at or row["us"] < at[row["column"]]["us"]:
            at[row["column"]] = row
    return dict(sorted(cells.items()))


def cell(row: dict[str, Any] | None) -> str:
    """µs and, where measured, the fraction of the copy bandwidth."""
    if row is None:
        return "-"
    fraction = row.get("fraction_of_copy")
    return f"{row['us']:.2f}" + ("" if fraction is None else f" ({fraction:.2f})")


def summary(cells: Cells, target: float) -> str:
    """Where the split-K kernel meets `target` and where it beats SDPA."""
    split = [(key, c["split-K"]) for key, c in cells.items() if "split-K" in c]
    met = [key for key, row in split if (row.get("fraction_of_copy") or 0.0) >= target]
    faster = [
        key for key, row in split if "SDPA" in cells[key] and row["us"] < cells[key]["SDPA"]["us"]
    ]
    where = ", ".join(f"b={b} x {c}" for b, c in met) or "none"
    return (
        f"split-K reaches {target} of the copy bandwidth at {len(met)} of {len(split)} shapes "
        f"({where}) and is faster than SDPA at {len(faster)} of {len(split)}."
    )


def table(cells: Cells) -> list[str]:
    rows = []
    for (batch, context), at in cells.items():
        split, sdpa = at.get("split-K"), at.get("SDPA")
        any_row = next(iter(at.values()))
        rows.append(
            [
                batch,
                context,
                f"{any_row['bytes'] / 1e6:.1f}",
                cell(split),
                cell(at.get("split-K, batch-invariant")),
                cell(sdpa),
                "-" if split is None or sdpa is None else f"{split['us'] / sdpa['us']:.3f}",
            ]
        )
    return results.table(
        [
            "batch",
            "context",
            "MB moved",
            "split-K µs (frac)",
            "batch-invariant µs (frac)",
            "SDPA µs (frac)",
            "split-K / SDPA",
        ],
        rows,
        align="rrrrrrr",
    )


def method(result: Result) -> str:
    copies = sorted({float(r["copy_gbps"]) for r in result.rows if r.get("copy_gbps")})
    measured = " / ".join(f"**{c:.0f} GB/s**" for c in copies) or "not measured here"
    return (
        "One query token a sequence over its cached keys and values, every sequence at the "
        f"context's length, {result.facts.get('heads', '?')} query / "
        f"{result.facts.get('kv_heads', '?')} key-value heads. Times (median) are CUDA-graph "
        "replays (`do_bench_cudagraph`; host times on the CPU path). In parentheses the "
        "fraction of the device-to-device copy bandwidth measured in the same run "
        f"({measured}) over the minimum traffic: keys, values and query read once, the output "
        "written once."
    )


def markdown(result: Result) -> str:
    """The result as markdown: how it was measured, then a table a head size."""
    target = float(result.facts.get("target_fraction", TARGET_FRACTION))
    lines = results.header(result, method(result))
    for head_size in head_sizes(result):
        cells = cells_of(result, head_size)
        lines += [f"## Heads of {head_size}", "", summary(cells, target), ""]
        lines += table(cells)
    lines += [f"{note}\n" for note in result.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


def plot(result: Result, out: Path) -> None:
    """The split-K kernel's and SDPA's fraction of the copy bandwidth against the context, a
    line a batch, a panel a head size (PNG)."""
    import matplotlib.pyplot as plt

    sizes = head_sizes(result)
    fig, axes = plt.subplots(1, max(1, len(sizes)), figsize=(5 * max(1, len(sizes)), 3.2))
    axes = [axes] if len(sizes) <= 1 else list(axes)
    for ax, head_size in zip(axes, sizes, strict=False):
        cells = cells_of(result, head_size)
        for column, style in (("split-K", "-o"), ("SDPA", "--.")):
            for batch in sorted({b for b, _ in cells}):
                points = [
                    (c, at[column].get("fraction_of_copy") or 0.0)
                    for (b, c), at in cells.items()
                    if b == batch and column in at
                ]
                ax.plot(*zip(*points, strict=True), style, label=f"{column} b={batch}")
        ax.axhline(float(result.facts.get("target_fraction", TARGET_FRACTION)), color="grey")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context", fontsize=7)
        ax.set_ylabel("fraction of copy bandwidth", fontsize=7)
        ax.set_title(f"heads of {head_size}", fontsize=8)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=5, ncol=2)
    fig.suptitle(result.device.name, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=70)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """``ir-stack bench render`` with `argv` (the command line's arguments by default)."""
    from . import main as bench

    return bench(["render", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
