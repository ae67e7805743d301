"""Turn a kernel benchmark JSON (`ir_stack.bench.kernels`) into a markdown table and a plot.

    python -m ir_stack.bench.kernel_report RESULT.json [PART.json ...] [--ours triton|cuda]
        [--out MERGED.json]

Writes <stem>.md (a summary against the targets, the shapes lost largest gap first, a table
per op) and <stem>.png beside the JSON. A grid too long for one device call may run
in parts split by `--ops` (each op, its shapes and anchors within one part): given several
JSONs, the report merges them into `--out` first, and judges each op against the empty
kernel timed in its own part. `--ours` names the provider judged against
its targets; every other column (the other provider included) counts as an anchor. For each
shape the fastest of the repeated runs is reported; the spread is the largest relative
difference between runs of our provider or of the best anchor (the benchmark rotates the
order of the candidates between runs, so the spread includes what the order alone moves).
"""

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

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


def bandwidth_target(ours: str, op: str) -> float | None:
    """The fraction of copy bandwidth `ours` must reach on `op` at large sizes (None: no
    target, e.g. rotary, whose traffic includes a gathered cache)."""
    single, quant, _ = TARGETS[ours]
    if op == "rotary_embedding":
        return None
    return quant if op in QUANT_OPS else single


def merge(paths: Sequence[Path]) -> dict[str, Any]:
    """One result from the parts of a grid split by op: the records of every part, each tagged
    with its part's index, and ``meta["parts"]`` (each part's meta and ops). Raises ValueError
    where the parts come from different cards or software, or share an op."""
    parts = [json.loads(p.read_text()) for p in paths]
    first = parts[0]["meta"]
    seen: dict[str, Path] = {}
    records: list[dict[str, Any]] = []
    part_metas: list[dict[str, Any]] = []
    for index, (path, part) in enumerate(zip(paths, parts, strict=True)):
        meta = part["meta"]
        for field in ("card", "torch", "triton"):
            if meta[field] != first[field]:
                raise ValueError(
                    f"{path}: {field} is {meta[field]!r}, expected {first[field]!r} as in "
                    f"{paths[0]}: parts of one grid must come from one machine and software"
                )
        ops = sorted({r["op"] for r in part["records"]})
        meta = {**meta, "runs": meta.get("runs", runs_of(part["records"]))}
        for op in ops:
            if op in seen:
                raise ValueError(
                    f"{path}: op {op!r} is also in {seen[op]}: each op must be timed in one part"
                )
            seen[op] = path
        part_metas.append({**meta, "ops": ops, "source": path.name})
        records += [{**r, "part": index} for r in part["records"]]
    return {"meta": {**first, "parts": part_metas}, "records": records}


def run_metas(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The meta of each run behind a result: its parts' where it was merged, else its own."""
    return meta.get("parts") or [meta]


def launched_programmatically(meta: dict[str, Any], provider: str) -> bool:
    """Whether a run launched `provider`'s kernels as programmatic dependent launches
    (``--programmatic-launch``): ``programmatic_launch`` is per provider, or one flag in the
    runs of its first version."""
    flags = [m.get("programmatic_launch", False) for m in run_metas(meta)]
    return any(f.get(provider, False) if isinstance(f, dict) else f for f in flags)


def programmatic_text(meta: dict[str, Any], ours: str) -> str:
    """A sentence for the method where `ours` was launched programmatically, else nothing."""
    if not launched_programmatically(meta, ours):
        return ""
    return (
        f" `{ours}` was launched as programmatic dependent launches (`--programmatic-launch`): "
        "each replay overlaps the one before, which is itself; behind a plain kernel that gain "
        "turns into a cost (`programmatic-launch-H200.md`)."
    )


def part_meta(meta: dict[str, Any], op: str) -> dict[str, Any]:
    """The meta of the run that timed `op`: its part's where the result was merged."""
    return next((m for m in run_metas(meta) if op in m.get("ops", [op])), meta)


def runs_of(records: Sequence[dict[str, Any]]) -> int:
    """How many times the benchmark ran each shape (its records number the runs from 0)."""
    return 1 + max((int(r.get("run", 0)) for r in records), default=0)


def runs_text(meta: dict[str, Any]) -> str:
    """How many times each shape ran: one count, or one per part where the parts differ."""
    counts = [int(m.get("runs", 2)) for m in run_metas(meta)]
    if len(set(counts)) == 1:
        return f"{counts[0]} time(s)"
    by_part = ", ".join(str(c) for c in counts)
    return f"{min(counts)} to {max(counts)} times (by part: {by_part})"


def load(path: Path) -> tuple[dict[str, Any], dict[tuple[str, int, int], dict[str, list[Any]]]]:
    data = json.loads(path.read_text())
    data["meta"].setdefault("runs", runs_of(data["records"]))
    for index, part in enumerate(data["meta"].get("parts", [])):
        part.setdefault("runs", runs_of([r for r in data["records"] if r.get("part") == index]))
    grouped: dict[tuple[str, int, int], dict[str, list[Any]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in data["records"]:
        grouped[(r["op"], r["tokens"], r["hidden"])][r["provider"]].append(r)
    return data["meta"], grouped


def best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest of repeated runs."""
    return min(runs, key=lambda r: float(r["us_graph"]))


def spread(runs: list[dict[str, Any]]) -> float:
    """Largest relative difference between repeated runs."""
    times = [float(r["us_graph"]) for r in runs]
    return max(times) / min(times) - 1


def empty_kernel_kind(meta: dict[str, Any], ours: str) -> str:
    """Each provider is judged against an empty kernel of its own kind, where the run timed one."""
    timed_cuda = all(m.get("empty_cuda_kernel_us_graph") for m in run_metas(meta))
    return "cuda" if ours == "cuda" and timed_cuda else "triton"


def empty_kernels(meta: dict[str, Any], kind: str) -> str:
    """The empty kernel's replayed time, one value a part ("1.09 / 1.10")."""
    return " / ".join(f"{m[f'empty_{kind}_kernel_us_graph']:.2f}" for m in run_metas(meta))


def run_facts(meta: dict[str, Any]) -> str:
    """The copy bandwidth and empty Triton kernel of the run, or of each part (bold values)."""

    def facts(m: dict[str, Any]) -> str:
        return (
            f"**{m['copy_gbps']:.0f} GB/s** (1 GiB device-to-device copy, read + write); empty "
            f"Triton kernel replayed: **{m['empty_triton_kernel_us_graph']:.2f} µs**"
        )

    parts = meta.get("parts")
    if not parts:
        return facts(meta)
    return f"the grid ran in {len(parts)} parts, " + "; ".join(
        f"part {i + 1} ({', '.join(p['ops'])}, {p['date']}): {facts(p)}"
        for i, p in enumerate(parts)
    )


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


class Loss(NamedTuple):
    """A shape that `ours` loses by more than the run-to-run spread, and its verdict."""

    op: str
    tokens: int
    hidden: int
    verdict: Verdict


def judge(row: dict[str, list[Any]], ours: str) -> Verdict:
    """Judge one shape's runs (provider -> runs), which must hold `ours` and another column."""
    mine = best(row[ours])
    anchors = {p: best(r) for p, r in row.items() if p != ours}
    anchor, anchor_run = min(anchors.items(), key=lambda kv: kv[1]["us_graph"])
    return Verdict(
        mine=mine,
        anchor=anchor,
        anchor_run=anchor_run,
        ratio=mine["us_graph"] / anchor_run["us_graph"],
        spread=max(spread(row[ours]), spread(row[anchor])),
    )


def markdown(
    meta: dict[str, Any], grouped: dict[Any, dict[str, list[Any]]], ours: str = "triton"
) -> str:
    """The report: a summary of `ours` against its targets, the shapes it loses, then one
    table per op."""
    margin = TARGETS[ours][2]
    empty_kind = empty_kernel_kind(meta, ours)
    method = [
        f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}. bf16. Times are "
        "CUDA-graph replays (`do_bench_cudagraph`, median); `plain` is `do_bench`. GB/s counts "
        "the minimum traffic (inputs read once + outputs written); `frac` is that over the "
        f"device copy bandwidth measured in the same run: {run_facts(meta)}. Each shape ran "
        f"{runs_text(meta)}, each run starting at a different candidate; the "
        "fastest run is shown, `spread` is the larger run-to-run difference of our kernel and "
        "of the best anchor." + programmatic_text(meta, ours),
        "",
    ]
    lines: list[str] = []  # the ops' tables
    summary = {"shapes": 0, "targets_met": 0, "targets": 0, "decode_met": 0, "decode": 0}
    lost: list[Loss] = []
    ops = sorted({k[0] for k in grouped})
    for op in ops:
        decode_floor = part_meta(meta, op)[f"empty_{empty_kind}_kernel_us_graph"] + margin
        keys = sorted(k for k in grouped if k[0] == op)
        providers = sorted({p for k in keys for p in grouped[k]}, key=lambda p: (p != ours, p))
        lines += [
            f"## {op}",
            "",
            "| tokens | hidden | "
            + " | ".join(f"{p} µs (frac)" for p in providers)
            + " | ours plain µs | spread | best anchor | ours vs best |",
            "|---|---|" + "---|" * (len(providers) + 4),
        ]
        for key in keys:
            row = grouped[key]
            if ours not in row:
                continue
            judged = judge(row, ours)
            mine = judged.mine
            summary["shapes"] += 1
            _, tokens, hidden = key
            if judged.lost:
                lost.append(Loss(op, tokens, hidden, judged))
            cells = []
            for p in providers:
                r = best(row[p]) if p in row else None
                cells.append(
                    "-" if r is None else f"{r['us_graph']:.2f} ({r['fraction_of_copy']:.2f})"
                )
            target = bandwidth_target(ours, op)
            if tokens * hidden >= BIG and target is not None:
                summary["targets"] += 1
                summary["targets_met"] += mine["fraction_of_copy"] >= target
            if tokens <= 16:
                summary["decode"] += 1
                summary["decode_met"] += mine["us_graph"] <= decode_floor
            lines.append(
                f"| {tokens} | {hidden} | "
                + " | ".join(cells)
                + f" | {mine['us_plain']:.2f} | {judged.spread:.3f} | {judged.anchor} "
                f"| {judged.ratio:.3f} |"
            )
        lines.append("")
    verdict = [
        f"Summary for `{ours}`: at least as fast as the best other column (within the "
        f"run-to-run spread) at {summary['shapes'] - len(lost)} of {summary['shapes']} "
        f"shapes; bandwidth targets (tokens x hidden >= 64M: {TARGETS[ours][0]} of copy, "
        f"{TARGETS[ours][1]} for the quant ops) met at {summary['targets_met']} of "
        f"{summary['targets']}; decode sizes (tokens <= 16) within {margin:g} µs of the empty "
        f"kernel at {summary['decode_met']} of {summary['decode']} (empty {empty_kind} kernel: "
        f"{empty_kernels(meta, empty_kind)} µs).",
        "",
    ]
    title = [f"# Kernel benchmark — {meta['card']}", ""]
    return "\n".join(title + verdict + method + lost_table(ours, lost) + lines)


def lost_table(ours: str, lost: list[Loss]) -> list[str]:
    """The shapes `ours` loses by more than the run-to-run spread, largest gap first."""
    if not lost:
        return []
    lines = [
        f"Shapes `{ours}` loses by more than the run-to-run spread, largest gap first:",
        "",
        f"| op | tokens | hidden | {ours} µs | best other | its µs | {ours} vs best | spread |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for op, tokens, hidden, v in sorted(
        lost, key=lambda loss: (loss.verdict.ratio, loss.op, loss.tokens, loss.hidden), reverse=True
    ):
        lines.append(
            f"| {op} | {tokens} | {hidden} | {v.mine['us_graph']:.2f} | {v.anchor} "
            f"| {v.anchor_run['us_graph']:.2f} | {v.ratio:.3f} | {v.spread:.3f} |"
        )
    return [*lines, ""]


def plot(meta: dict[str, Any], grouped: dict[Any, dict[str, list[Any]]], out: Path) -> None:
    """GB/s against tokens per op, with the copy ceiling and the anchors (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = sorted({k[0] for k in grouped})
    fig, axes = plt.subplots(len(ops), 1, figsize=(9, 3.2 * len(ops)), squeeze=False)
    for ax, op in zip(axes[:, 0], ops, strict=True):
        keys = sorted(k for k in grouped if k[0] == op)
        widths = sorted({k[2] for k in keys})
        width = widths[len(widths) // 2]
        providers = sorted({p for k in keys for p in grouped[k]})
        for p in providers:
            pts = [
                (k[1], best(grouped[k][p])["gbps_graph"])
                for k in keys
                if k[2] == width and p in grouped[k]
            ]
            style = "-o" if p in OURS else "--."
            ax.plot([t for t, _ in pts], [g for _, g in pts], style, label=p)
        ax.axhline(
            part_meta(meta, op)["copy_gbps"],
            color="black",
            linewidth=0.8,
            linestyle=":",
            label="copy bandwidth",
        )
        ax.set_xscale("log", base=2)
        ax.set_title(f"{op} (hidden {width})")
        ax.set_xlabel("tokens")
        ax.set_ylabel("GB/s")
        ax.legend(fontsize=7)
    fig.suptitle(f"{meta['card']} — bf16, CUDA-graph replay", y=1.0)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def write_report(path: Path, ours: str = "triton") -> Path:
    """Write ``<stem>.md`` and ``<stem>.png`` beside the JSON at `path`; returns the .md path."""
    meta, grouped = load(path)
    path.with_suffix(".md").write_text(markdown(meta, grouped, ours))
    plot(meta, grouped, path.with_suffix(".png"))
    return path.with_suffix(".md")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ir_stack.bench.kernel_report RESULT.json [PART.json ...] [--ours PROVIDER]
    [--out MERGED.json]``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("result", type=Path, nargs="+", help="a result, or the parts of one")
    parser.add_argument("--ours", default="triton", choices=sorted(TARGETS))
    parser.add_argument("--out", type=Path, help="where the parts' merged JSON goes")
    a = parser.parse_args(argv)
    path = a.result[0]
    if len(a.result) > 1:
        if a.out is None:
            parser.error(f"--out is required to merge {len(a.result)} results")
        try:
            merged = merge(a.result)
        except ValueError as err:
            parser.error(str(err))
        a.out.write_text(json.dumps(merged, indent=1))
        path = a.out
    write_report(path, a.ours)
    print(path.with_suffix(".md").read_text().split("\n")[2])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
