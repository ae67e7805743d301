"""Turn an end-to-end benchmark JSON (`ir_stack.bench.e2e`) into its markdown table and plot.

    python -m ir_stack.bench.e2e_report RESULT.json

Writes <stem>.md (milliseconds per call and error per mode and workload, ``ir_stack`` against
stock ``torch.compile`` and the full-graph ceiling, the startup times) and <stem>.png (decode
latency against batch size) beside the JSON. The benchmark writes both itself; this redoes
them from a result, for example one edited by hand or produced by an older version.
"""

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: What `markdown` reads of a result besides the optional ``startup``.
REQUIRED_KEYS = ("model", "device", "dtype", "torch", "date", "iters", "context", "rows")


def markdown(result: dict[str, Any]) -> str:
    """The result as a markdown table (ms per call), the startup times and the targets."""
    rows = result["rows"]
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    table = {(r["mode"], r["workload"]): r for r in rows}
    lines = [
        f"# End to end — {result['model']} reference model, {result['dtype']}",
        "",
        f"{result['device']}, torch {result['torch']}, {result['date']}. Milliseconds per call "
        f"(mean of {result['iters']} back-to-back calls, timed with "
        f"{'CUDA events' if 'CPU' not in result['device'] else 'perf_counter'}); decode steps "
        "attend over "
        f"{result['context']} cached positions. In parentheses: max |error| of the logits "
        "against eager native.",
        "",
        "| mode | " + " | ".join(workloads) + " |",
        "|---|" + "---:|" * len(workloads),
    ]
    for mode in modes:
        cells = []
        for w in workloads:
            r = table.get((mode, w))
            cells.append("-" if r is None else f"{r['ms']:.3f} ({r['max_abs_error']:.2g})")
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    lines.append("")
    skips = next((r["cudagraph_skips"] for r in rows if "cudagraph_skips" in r), None)
    if skips:
        lines += [
            f"torch.compile reduce-overhead skipped CUDA graphs for {skips} compiled graph(s) "
            "(Inductor's `cudagraph_skips` counter: the KV cache is an input it mutates).",
            "",
        ]
    lines += target_lines(table, workloads)
    start = result.get("startup")
    if start:
        cold, warm = start["cold"], start["warm"]
        lines += [
            "",
            f"Startup (`ir_stack.compile` to the first output of every workload, fresh process): "
            f"cold {cold['seconds']:.1f} s ({cold['counters']['num_backend_compilations']} "
            f"compilations), warm {warm['seconds']:.1f} s "
            f"({warm['counters']['num_cache_hits']} cache hits, "
            f"{warm['counters']['num_backend_compilations']} compilations, "
            f"{warm['counters'].get('num_traces_loaded', 0)} saved traces loaded): "
            f"**{cold['seconds'] / warm['seconds']:.1f}x** faster.",
        ]
    return "\n".join(lines) + "\n"


def target_lines(table: dict[tuple[str, str], dict[str, Any]], workloads: list[str]) -> list[str]:
    """One line per workload that mode ``ir_stack`` ran: its time as a multiple of stock
    ``torch.compile`` reduce-overhead's and of the full-graph ceiling's, where those ran."""
    lines = []
    for w in workloads:
        ours = table.get(("ir_stack", w))
        if ours is None:
            continue
        notes = []
        stock = table.get(("torch.compile reduce-overhead", w))
        if stock is not None:
            ratio = ours["ms"] / stock["ms"]
            notes.append(f"{ratio:.3f}x of torch.compile reduce-overhead")
        ceiling = table.get(("full CUDA graph", w))
        if ceiling is not None:
            notes.append(f"{ours['ms'] / ceiling['ms']:.3f}x of the full-graph ceiling")
        if notes:
            lines.append(f"- {w}: ir_stack at " + ", ".join(notes) + ".")
    return lines


def plot(result: dict[str, Any], out: Path) -> None:
    """Decode latency against batch size per mode (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    decode = [r for r in result["rows"] if r["tokens"] == 1]
    for mode in dict.fromkeys(r["mode"] for r in decode):
        points = sorted((r["batch"], r["ms"]) for r in decode if r["mode"] == mode)
        style = "-o" if mode.startswith("ir_stack") else "--."
        ax.plot([b for b, _ in points], [ms for _, ms in points], style, label=mode)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("decode batch size")
    ax.set_ylabel("ms per decode step")
    ax.set_title(f"{result['model']} on {result['device']} ({result['dtype']})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def write_report(result: dict[str, Any], stem: Path) -> Path:
    """Write `result`'s table to ``<stem>.md`` and, where matplotlib is installed, its plot to
    ``<stem>.png``; return the table's path."""
    table = stem.with_name(stem.name + ".md")
    table.write_text(markdown(result))
    try:
        plot(result, stem.with_name(stem.name + ".png"))
    except ImportError:
        print("matplotlib is not installed: no plot (pip install ir-stack[bench])")
    return table


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ir_stack.bench.e2e_report RESULT.json``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("result", type=Path, help="a JSON the end-to-end benchmark wrote")
    path = parser.parse_args(argv).result
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        parser.error(f"result: cannot read {path}: {err}")
    missing = [k for k in REQUIRED_KEYS if k not in result]
    if missing:
        parser.error(f"result: {path} is not an end-to-end result (no {', '.join(missing)})")
    print(write_report(result, path.with_suffix("")).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
