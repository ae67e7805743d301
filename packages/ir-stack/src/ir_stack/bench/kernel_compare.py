"""Compare two kernel benchmark grids (`ir_stack.bench.kernels` JSON, e.g. two runs on the same
kernels, or before and after a change).

The report covers three things. It gives how far each column's times moved (the median of new over
old across the shapes both grids hold). It lists which shapes `ours` lost in one grid and not in
the other, judged as `kernel_report` judges them. And it lists where another column's time moved
by more than a threshold. Inductor, for one, picks its launch configuration by timing candidates
as it compiles, so its kernel for a shape can differ between processes.

    python -m ir_stack.bench.kernel_compare OLD.json NEW.json [--ours cuda] [--moved 0.1]
"""

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ir_stack.bench.kernel_report import OURS, Verdict, best, judge, load

Shape = tuple[str, int, int]  # op, tokens, hidden
Grid = dict[Shape, dict[str, list[Any]]]  # shape -> provider -> runs


class Drift(NamedTuple):
    """How one column's times moved between the grids: new over old, over `shapes` shapes."""

    median: float
    low: float
    high: float
    shapes: int


class Move(NamedTuple):
    """One column at one shape whose fastest time moved by more than the threshold."""

    provider: str
    shape: Shape
    old_us: float
    new_us: float

    @property
    def factor(self) -> float:
        """The slower of the two times over the faster."""
        return max(self.old_us, self.new_us) / min(self.old_us, self.new_us)


def fastest(grid: Grid) -> dict[tuple[str, Shape], float]:
    """Each (provider, shape)'s fastest replayed time."""
    return {
        (provider, shape): float(best(runs)["us_graph"])
        for shape, row in grid.items()
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


def lost(grid: Grid, ours: str) -> dict[Shape, Verdict]:
    """The shapes `ours` loses by more than the run-to-run spread, with their verdicts."""
    verdicts = {
        shape: judge(row, ours) for shape, row in grid.items() if ours in row and len(row) > 1
    }
    return {shape: v for shape, v in verdicts.items() if v.lost}


def moves(old: Grid, new: Grid, ours: str, threshold: float) -> list[Move]:
    """Other columns' times that moved by more than `threshold` (a fraction), largest first."""
    before, after = fastest(old), fastest(new)
    both = [
        Move(provider, shape, before[(provider, shape)], after[(provider, shape)])
        for provider, shape in before.keys() & after.keys()
        if provider != ours
    ]
    moved = [m for m in both if m.factor > 1 + threshold]
    return sorted(moved, key=lambda m: (m.factor, m.provider, m.shape), reverse=True)


def shape_text(shape: Shape) -> str:
    op, tokens, hidden = shape
    return f"{op} {tokens} x {hidden}"


def verdict_text(verdict: Verdict | None) -> str:
    if verdict is None:
        return "won"
    return f"{verdict.ratio:.3f} behind {verdict.anchor} (spread {verdict.spread:.3f})"


def markdown(old_path: Path, new_path: Path, ours: str, threshold: float, most: int = 12) -> str:
    """The comparison as markdown."""
    old_meta, old = load(old_path)
    new_meta, new = load(new_path)
    lines = [
        f"# {new_path.name} ({new_meta['date']}) against {old_path.name} ({old_meta['date']})",
        "",
        "Median time new / old over the shapes both grids hold (lowest - highest):",
        "",
        "| column | median | lowest | highest | shapes |",
        "|---|---|---|---|---|",
    ]
    for provider, d in drift(old, new).items():
        lines.append(f"| {provider} | {d.median:.3f} | {d.low:.3f} | {d.high:.3f} | {d.shapes} |")
    lost_old, lost_new = lost(old, ours), lost(new, ours)
    common = old.keys() & new.keys()
    flipped = sorted(
        shape
        for shape in common
        if (shape in lost_old) != (shape in lost_new) and ours in new[shape]
    )
    lines += [
        "",
        f"`{ours}` lost {len(lost_old)} shapes in the old grid and {len(lost_new)} in the new; "
        f"{sum(s in lost_new for s in flipped)} went from won to lost and "
        f"{sum(s in lost_old for s in flipped)} from lost to won:",
        "",
    ]
    if flipped:
        lines += ["| shape | old | new |", "|---|---|---|"]
        for s in flipped:
            before, after = verdict_text(lost_old.get(s)), verdict_text(lost_new.get(s))
            lines.append(f"| {shape_text(s)} | {before} | {after} |")
    moved = moves(old, new, ours, threshold)
    lines += [
        "",
        f"Other columns whose time moved by more than {threshold:.0%}: {len(moved)}"
        + (f" (the {most} largest below)" if len(moved) > most else "")
        + ("." if not moved else ":"),
        "",
    ]
    if moved:
        lines += ["| column | shape | old µs | new µs |", "|---|---|---|---|"]
        lines += [
            f"| {m.provider} | {shape_text(m.shape)} | {m.old_us:.2f} | {m.new_us:.2f} |"
            for m in moved[:most]
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ir_stack.bench.kernel_compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("old", type=Path, help="the earlier grid's JSON")
    parser.add_argument("new", type=Path, help="the later grid's JSON")
    parser.add_argument("--ours", choices=OURS, default="triton")
    parser.add_argument(
        "--moved",
        type=float,
        default=0.1,
        help="list other columns' times that moved by more than this fraction (default 0.1)",
    )
    parser.add_argument("--out", type=Path, help="write the markdown here instead of stdout")
    args = parser.parse_args(argv)
    if args.moved < 0:
        parser.error(f"--moved {args.moved}: expected a fraction >= 0")
    for path in (args.old, args.new):
        if not path.is_file():
            parser.error(f"{path}: no such benchmark result")
    text = markdown(args.old, args.new, args.ours, args.moved)
    if args.out:
        args.out.write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
