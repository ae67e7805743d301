"""What ``ir-stack bench compare`` adds for two ``kernels`` results: how far each column's
times moved (the median of new over old across the shapes both grids hold), and which shapes
each of our providers won in one grid and lost in the other, judged as `kernel_report` judges
them. Inductor, for one, picks its launch configuration by timing candidates as it compiles,
so its kernel for a shape can differ between processes: a flip may come from the anchor.

    python -m ir_stack.bench.kernel_compare OLD.json NEW.json [--threshold PCT ...]

is ``ir-stack bench compare`` with the same arguments.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from typing import NamedTuple

from . import results
from .kernel_report import OURS, Grid, Shape, Verdict, best, grid, lost
from .results import Result


class Drift(NamedTuple):
    """How one column's times moved between the grids: new over old, over `shapes` shapes."""

    median: float
    low: float
    high: float
    shapes: int


def fastest(shapes: Grid) -> dict[tuple[str, Shape], float]:
    """Each (provider, shape)'s fastest replayed time."""
    return {
        (provider, shape): float(best(runs)["us_graph"])
        for shape, row in shapes.items()
        for provider, runs in row.items()
    }


def drift(old: Grid, new: Grid) -> dict[str, Drift]:
    """Per column, the median, lowest and highest ratio of new to old time at the shapes both
    grids hold."""
    before, after = fastest(old), fastest(new)
    ratios: dict[str, list[float]] = {}
    for key in before.keys() & after.keys():
        ratios.setdefault(key[0], []).append(after[key] / before[key])
    return {
        provider: Drift(statistics.median(r), min(r), max(r), len(r))
        for provider, r in sorted(ratios.items())
    }


def verdict_text(verdict: Verdict | None) -> str:
    if verdict is None:
        return "won"
    return f"{verdict.ratio:.3f} behind {verdict.anchor} (spread {verdict.spread:.3f})"


def details(old: Result, new: Result) -> list[str]:
    """Markdown lines: each column's drift, then each provider's won/lost flips."""
    before, after = grid(old), grid(new)
    lines = ["Median time new / old per column over the shapes both grids hold:", ""]
    lines += results.table(
        ["column", "median", "lowest", "highest", "shapes"],
        (
            (p, f"{d.median:.3f}", f"{d.low:.3f}", f"{d.high:.3f}", d.shapes)
            for p, d in drift(before, after).items()
        ),
    )
    for ours in OURS:
        lost_old, lost_new = lost(before, ours), lost(after, ours)
        flipped = sorted(
            shape
            for shape in before.keys() & after.keys()
            if ours in after[shape] and (shape in lost_old) != (shape in lost_new)
        )
        if not (lost_old or lost_new):
            continue
        lines += [
            f"`{ours}` lost {len(lost_old)} shapes in the old grid and {len(lost_new)} in the "
            f"new; {sum(s in lost_new for s in flipped)} went from won to lost and "
            f"{sum(s in lost_old for s in flipped)} from lost to won.",
            "",
        ]
        if flipped:
            lines += results.table(
                ["shape", "old", "new"],
                (
                    (
                        f"{op} {t} x {h}",
                        verdict_text(lost_old.get((op, t, h))),
                        verdict_text(lost_new.get((op, t, h))),
                    )
                    for op, t, h in flipped
                ),
            )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """``ir-stack bench compare`` with `argv` (the command line's arguments by default)."""
    from . import main as bench

    return bench(["compare", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
