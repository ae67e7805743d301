"""The markdown and plot of a ``kernels`` result, and the merge of a grid run in parts.

Each of our providers in the grid (``triton``, ``cuda``) is judged against its own targets,
counting every other column (the other provider included) as an anchor: at least as fast as
the best other column within the run-to-run spread, the bandwidth target at large sizes, and
at decode sizes within a margin of an empty kernel of its own kind. For each shape the fastest
of the repeated runs counts; the spread is the largest relative difference between runs of
the provider or of the best anchor (the suite rotates the order of the candidates between
runs, so the spread includes what the order alone moves).

A grid too long for one device call may run in parts split by ``--ops`` (each op, its shapes
and anchors within one part): `merge` makes one result of them, and each op is then judged
against the empty kernel timed in its own part.

    python -m ir_stack.bench.kernel_report PART.json [PART.json ...] --out MERGED.json

With one result and no ``--out``, it writes that result's markdown and plot again.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from . import results
from .results import Result

OURS = ("triton", "cuda")
#: Ops held to the lower ("quant") bandwidth target: a reduction feeds the quantization, or
#: they write two outputs of different widths.
QUANT_OPS = {
    "dynamic_quant_fp8",
    "group_quant_fp8",
    "rms_norm_static_quant_fp8",
    "fused_add_rms_norm_static_quant_fp8",
    "rms_norm_dynamic_quant_fp8",
    "silu_and_mul_static_quant_fp8",
}
#: Per provider: (single-pass fraction of copy bandwidth, quant fraction, decode margin in µs
#: over the empty kernel), from the provider's issue.
TARGETS = {"triton": (0.92, 0.88, 1.0), "cuda": (0.93, 0.90, 0.5)}
BIG = 64 * 2**20  # tokens x hidden from which the bandwidth targets apply

Shape = tuple[str, int, int]  # op, tokens, hidden
Grid = dict[Shape, dict[str, list[dict[str, Any]]]]  # shape -> provider -> runs


def grid(result: Result) -> Grid:
    """The rows by shape and provider (each provider's repeated runs together)."""
    found: Grid = defaultdict(lambda: defaultdict(list))
    for row in result.rows:
        found[(row["op"], row["tokens"], row["hidden"])][row["provider"]].append(row)
    return found


def bandwidth_target(ours: str, op: str) -> float | None:
    """The fraction of copy bandwidth `ours` must reach on `op` at large sizes (None: no
    target, e.g. rotary, whose traffic includes a gathered cache)."""
    single, quant, _ = TARGETS[ours]
    if op == "rotary_embedding":
        return None
    return quant if op in QUANT_OPS else single


def merge(parts: Sequence[Result]) -> Result:
    """One result from the parts of a grid split by op: the rows of every part, each tagged
    with its part's index, and ``facts["parts"]`` (each part's facts, date and ops). Raises
    ValueError where the parts come from different devices or software, or share an op."""
    first = parts[0]
    seen: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    facts: list[dict[str, Any]] = []
    for index, part in enumerate(parts):
        if part.suite != "kernels":
            raise ValueError(f"part {index + 1}: a {part.suite} result, expected a kernels one")
        for field in ("device", "software"):
            if getattr(part, field) != getattr(first, field):
                raise ValueError(
                    f"part {index + 1}: its {field} differs from part 1's: parts of one grid "
                    "must come from one machine and software"
                )
        part_ops = sorted({r["op"] for r in part.rows})
        for op in part_ops:
            if op in seen:
                raise ValueError(
                    f"part {index + 1}: op {op!r} is also in part {seen[op] + 1}: each op "
                    "must be timed in one part"
                )
            seen[op] = index
        facts.append({**part.facts, "ops": part_ops, "date": part.date, "runs": runs_of(part.rows)})
        rows += [{**r, "part": index} for r in part.rows]
    return dataclasses.replace(
        first, rows=rows, facts={"parts": facts}, params={**first.params, "ops": sorted(seen)}
    )


def part_facts(result: Result) -> list[dict[str, Any]]:
    """The facts of each run behind a result: its parts' where it was merged, else its own."""
    parts: list[dict[str, Any]] = result.facts.get("parts") or [
        {**result.facts, "date": result.date, "runs": runs_of(result.rows)}
    ]
    return parts


def facts_of(result: Result, op: str) -> dict[str, Any]:
    """The facts of the run that timed `op`: its part's where the result was merged."""
    return next((f for f in part_facts(result) if op in f.get("ops", [op])), result.facts)


def runs_of(rows: Sequence[dict[str, Any]]) -> int:
    """How many times the suite ran each shape (its rows number the runs from 0)."""
    return 1 + max((int(r.get("run", 0)) for r in rows), default=0)


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest of repeated runs."""
    return min(runs, key=lambda r: float(r["us_graph"]))


def spread(runs: list[dict[str, Any]]) -> float:
    """Largest relative difference between repeated runs."""
    times = [float(r["us_graph"]) for r in runs]
    return max(times) / min(times) - 1


def empty_kernel_kind(result: Result, ours: str) -> str:
    """Each provider is judged against an empty kernel of its own kind, where the run timed one."""
    timed_cuda = all(f.get("empty_cuda_kernel_us_graph") for f in part_facts(result))
    return "cuda" if ours == "cuda" and timed_cuda else "triton"


class Verdict(NamedTuple):
    """`ours` at one shape against the fastest other column."""

    mine: dict[str, Any]  # our fastest run
    anchor: str  # the fastest other column
    anchor_run: dict[str, Any]  # its fastest run
    ratio: float  # our time over its time
    spread: float  # the larger run-to-run spread of the two

    @property
    def lost(self) -> bool:
        """Slower by more than the run-to-run spread."""
        return self.ratio > 1 + self.spread


def judge(row: dict[str, list[dict[str, Any]]], ours: str) -> Verdict:
    """Judge one shape's runs (provider -> runs), which must hold `ours` and another column."""
    mine = best(row[ours])
    others = {p: best(r) for p, r in row.items() if p != ours}
    anchor, anchor_run = min(others.items(), key=lambda kv: kv[1]["us_graph"])
    return Verdict(
        mine=mine,
        anchor=anchor,
        anchor_run=anchor_run,
        ratio=mine["us_graph"] / anchor_run["us_graph"],
        spread=max(spread(row[ours]), spread(row[anchor])),
    )


def lost(shapes: Grid, ours: str) -> dict[Shape, Verdict]:
    """The shapes `ours` loses by more than the run-to-run spread, with their verdicts."""
    verdicts = {s: judge(row, ours) for s, row in shapes.items() if ours in row and len(row) > 1}
    return {s: v for s, v in verdicts.items() if v.lost}


def summary(result: Result, shapes: Grid, ours: str) -> str:
    """A sentence: how `ours` fares against the other columns and its targets."""
    single, quant, margin = TARGETS[ours]
    kind = empty_kernel_kind(result, ours)
    judged = [s for s, row in shapes.items() if ours in row and len(row) > 1]
    targets = met = decode = decode_met = 0
    for op, tokens, hidden in judged:
        mine = best(shapes[(op, tokens, hidden)][ours])
        target = bandwidth_target(ours, op)
        if tokens * hidden >= BIG and target is not None:
            targets += 1
            met += mine["fraction_of_copy"] >= target
        if tokens <= 16:
            decode += 1
            floor = facts_of(result, op)[f"empty_{kind}_kernel_us_graph"] + margin
            decode_met += mine["us_graph"] <= floor
    empties = " / ".join(f"{f[f'empty_{kind}_kernel_us_graph']:.2f}" for f in part_facts(result))
    return (
        f"Summary for `{ours}`: at least as fast as the best other column (within the "
        f"run-to-run spread) at {len(judged) - len(lost(shapes, ours))} of {len(judged)} "
        f"shapes; bandwidth targets (tokens x hidden >= 64M: {single} of copy, {quant} for the "
        f"quant ops) met at {met} of {targets}; decode sizes (tokens <= 16) within {margin:g} "
        f"µs of the empty kernel at {decode_met} of {decode} (empty {kind} kernel: {empties} µs)."
    )


def method(result: Result) -> str:
    """How the grid was timed, with the copy bandwidth and empty kernel of each part."""

    def facts(f: dict[str, Any]) -> str:
        return (
            f"**{f['copy_gbps']:.0f} GB/s** (1 GiB device-to-device copy, read + write); empty "
            f"Triton kernel replayed: **{f['empty_triton_kernel_us_graph']:.2f} µs**"
        )

    parts = result.facts.get("parts")
    if parts:
        measured = f"the grid ran in {len(parts)} parts, " + "; ".join(
            f"part {i + 1} ({', '.join(p['ops'])}, {p['date']}): {facts(p)}"
            for i, p in enumerate(parts)
        )
    else:
        measured = facts(result.facts)
    counts = sorted({int(f["runs"]) for f in part_facts(result)})
    runs = f"{counts[0]} time(s)" if len(counts) == 1 else f"{counts[0]} to {counts[-1]} times"
    text = (
        "bf16. Times are CUDA-graph replays (`do_bench_cudagraph`, median; `do_bench` where a "
        "candidate cannot be captured); `plain` is `do_bench`. GB/s counts the minimum traffic "
        "(inputs read once + outputs written); `frac` is that over the device copy bandwidth "
        f"measured in the same run: {measured}. Each shape ran {runs}, each run starting at a "
        "different candidate; the fastest run is shown, `spread` is the larger run-to-run "
        "difference of the provider judged and of the best other column."
    )
    flags = [f.get("programmatic_launch") or {} for f in part_facts(result)]
    launched = sorted({p for flag in flags for p, on in flag.items() if on})
    if launched:
        text += (
            f" {', '.join(launched)} launched its kernels as programmatic dependent launches "
            "(`--programmatic-launch`): each replay overlaps the one before, which is itself."
        )
    return text


def lost_table(ours: str, verdicts: dict[Shape, Verdict]) -> list[str]:
    """The shapes `ours` loses by more than the run-to-run spread, largest gap first."""
    if not verdicts:
        return []
    order = sorted(verdicts.items(), key=lambda kv: (kv[1].ratio, kv[0]), reverse=True)
    return [
        f"Shapes `{ours}` loses by more than the run-to-run spread, largest gap first:",
        "",
        *results.table(
            [
                "op",
                "tokens",
                "hidden",
                f"{ours} µs",
                "best other",
                "its µs",
                f"{ours} vs best",
                "spread",
            ],
            (
                (
                    op,
                    t,
                    h,
                    f"{v.mine['us_graph']:.2f}",
                    v.anchor,
                    f"{v.anchor_run['us_graph']:.2f}",
                    f"{v.ratio:.3f}",
                    f"{v.spread:.3f}",
                )
                for (op, t, h), v in order
            ),
        ),
    ]


def op_table(shapes: Grid, op: str, ours: list[str]) -> list[str]:
    """One op's shapes: every column's best time and fraction of copy, and each of our
    providers against the best other column."""
    keys = sorted(k for k in shapes if k[0] == op)
    providers = sorted({p for k in keys for p in shapes[k]}, key=lambda p: (p not in ours, p))
    rows = []
    for key in keys:
        row = shapes[key]
        cells: list[Any] = [key[1], key[2]]
        for p in providers:
            r = best(row[p]) if p in row else None
            cells.append("-" if r is None else f"{r['us_graph']:.2f} ({r['fraction_of_copy']:.2f})")
        for mine in ours:
            if mine in row and len(row) > 1:
                v = judge(row, mine)
                cells.append(f"{v.ratio:.3f} ({v.anchor}, spread {v.spread:.3f})")
            else:
                cells.append("-")
        rows.append(cells)
    headers = ["tokens", "hidden", *(f"{p} µs (frac)" for p in providers)]
    headers += [f"{mine} vs best other" for mine in ours]
    return [f"## {op}", "", *results.table(headers, rows)]


def markdown(result: Result) -> str:
    """The report: a summary of each of our providers against its targets, how the grid was
    timed, the shapes each loses, then one table per op."""
    shapes = grid(result)
    ours = [p for p in OURS if any(p in row for row in shapes.values())]
    lines = results.header(result)
    lines += [summary(result, shapes, mine) + "\n" for mine in ours]
    lines += [method(result), ""]
    for mine in ours:
        lines += lost_table(mine, lost(shapes, mine))
    for op in sorted({k[0] for k in shapes}):
        lines += op_table(shapes, op, ours)
    return "\n".join(lines).rstrip("\n") + "\n"


def plot(result: Result, out: Path) -> None:
    """GB/s against tokens per op at its middle width, with the copy ceiling (PNG)."""
    import matplotlib.pyplot as plt

    shapes = grid(result)
    op_names = sorted({k[0] for k in shapes})
    columns = 2 if len(op_names) > 1 else 1
    lines = -(-len(op_names) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(11, 2.6 * lines), squeeze=False)
    for ax, op in zip(axes.flat, op_names, strict=False):
        keys = sorted(k for k in shapes if k[0] == op)
        widths = sorted({k[2] for k in keys})
        width = widths[len(widths) // 2]
        for p in sorted({p for k in keys for p in shapes[k]}):
            points = [
                (k[1], best(shapes[k][p])["gbps_graph"])
                for k in keys
                if k[2] == width and p in shapes[k]
            ]
            style = "-o" if p in OURS else "--."
            ax.plot([t for t, _ in points], [g for _, g in points], style, label=p, markersize=3)
        ax.axhline(facts_of(result, op)["copy_gbps"], color="black", linewidth=0.8, linestyle=":")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{op} (hidden {width})", fontsize=8)
        ax.set_ylabel("GB/s", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(op_names) :]:
        ax.set_visible(False)
    fig.suptitle(
        f"{result.device.name}: bf16, CUDA-graph replay; dotted: copy bandwidth", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(out, dpi=60)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ir_stack.bench.kernel_report PART.json [PART.json ...] --out MERGED.json``:
    merge the parts of a grid and write the merged result's JSON, markdown and plot (one
    result without ``--out``: its markdown and plot again)."""
    parser = argparse.ArgumentParser(
        prog="python -m ir_stack.bench.kernel_report", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("parts", type=Path, nargs="+", help="the kernels results to merge")
    parser.add_argument("--out", type=Path, help="where the merged JSON goes")
    a = parser.parse_args(argv)
    if len(a.parts) > 1 and a.out is None:
        parser.error(f"--out is required to merge {len(a.parts)} results")
    try:
        parts = [results.load(path) for path in a.parts]
        merged = merge(parts) if len(parts) > 1 else parts[0]
    except ValueError as error:
        parser.error(str(error))
    out = a.out or a.parts[0]
    if a.out is not None:
        out.write_text(merged.to_json())
    print(results.render(merged, out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
