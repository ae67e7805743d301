"""The markdown and plot of an ``e2e`` result: milliseconds a call and the logits' error per
mode and workload, for each model the result holds, ``ir_stack`` against stock
``torch.compile`` reduce-overhead and the full-graph ceiling, and for the rotary fusions' rows
each fused mode against the mode with both off, with how often each fusion fired.

    python -m ir_stack.bench.e2e_report RESULT.json

is ``ir-stack bench render RESULT.json``: the markdown and plot again beside the result.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import results
from .results import Result


def models(result: Result) -> list[str]:
    """The models of the result's rows, in order of appearance."""
    return list(dict.fromkeys(r["model"] for r in result.rows))


def cell(row: dict[str, Any]) -> str:
    """A row's milliseconds, and its error where it was measured."""
    error = row.get("max_abs_error")
    return f"{row['ms']:.3f}" + ("" if error is None else f" ({error:.2g})")


def model_table(result: Result, model: str) -> list[str]:
    """One model's table (ms, and in parentheses the max |error| against eager native), the
    CUDA-graph skips of stock torch.compile and the targets."""
    rows = [r for r in result.rows if r["model"] == model]
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    cells = {(r["mode"], r["workload"]): r for r in rows}
    lines = [f"## {model}", ""] if len(models(result)) > 1 else []
    lines += results.table(
        ["mode", *workloads],
        (
            [mode] + ["-" if (r := cells.get((mode, w))) is None else cell(r) for w in workloads]
            for mode in modes
        ),
        align="l" + "r" * len(workloads),
    )
    skips = next((r["cudagraph_skips"] for r in rows if r.get("cudagraph_skips")), None)
    if skips:
        lines += [
            f"torch.compile reduce-overhead skipped CUDA graphs for {skips} compiled graph(s) "
            "(Inductor's `cudagraph_skips` counter: the KV cache is an input it mutates).",
            "",
        ]
    lines += target_lines(cells, workloads)
    lines += not_run_lines(result, model)
    lines += fusion_lines(rows, cells, workloads)
    lines += autotune_lines(rows, cells, workloads)
    return lines


#: the autotuned mode, and the mode it is held against
AUTOTUNED, UNTUNED = "ir_stack autotuned", "ir_stack"


def autotune_lines(
    rows: list[dict[str, Any]], cells: dict[tuple[str, str], dict[str, Any]], workloads: list[str]
) -> list[str]:
    """Where the autotuned mode ran: its time per workload over ``ir_stack``'s, and the choices
    measurement changed (``autotune_changed``)."""
    changed = next((r["autotune_changed"] for r in rows if "autotune_changed" in r), None)
    if changed is None:
        return []
    pairs = [(w, cells.get((UNTUNED, w)), cells.get((AUTOTUNED, w))) for w in workloads]
    ratios = [f"{w} {t['ms'] / u['ms']:.3f}x" for w, u, t in pairs if u and t]
    lines = [f"Selection by measurement ({AUTOTUNED}):", ""]
    if ratios:
        lines.append(f"- time over {UNTUNED}: " + ", ".join(ratios) + ".")
    lines.append(f"- choices changed: {len(changed)}" + (":" if changed else "."))
    lines += [f"  - {line}" for line in changed]
    return [*lines, ""]


def not_run_lines(result: Result, model: str) -> list[str]:
    """The modes a converted transformers model could not run, with the reason (its facts'
    ``not_run``)."""
    hf: dict[str, dict[str, Any]] = result.facts.get("hf", {})
    facts = next((f for f in hf.values() if f.get("model") == model), {})
    lines = [f"- {mode}: not run ({why})." for mode, why in facts.get("not_run", {}).items()]
    return [*lines, ""] if lines else []


#: the mode the rotary fusions' modes are held against
FUSIONS_OFF = "ir_stack, rotary fusions off"


def fusion_lines(
    rows: list[dict[str, Any]], cells: dict[tuple[str, str], dict[str, Any]], workloads: list[str]
) -> list[str]:
    """For each mode that counted the rotary fusions it fired (``fusions_fired``): which fired
    and how often, and its time per workload over the mode with both off."""
    fired = {r["mode"]: r["fusions_fired"] for r in rows if "fusions_fired" in r}
    lines = []
    for mode, counts in fired.items():
        text = ", ".join(f"`{pattern}` x{n}" for pattern, n in counts.items()) or "none"
        line = f"- {mode}: fired {text}"
        off = [(w, cells.get((FUSIONS_OFF, w)), cells.get((mode, w))) for w in workloads]
        ratios = [f"{w} {r['ms'] / o['ms']:.3f}x" for w, o, r in off if o and r]
        if mode != FUSIONS_OFF and ratios:
            line += f"; time over {FUSIONS_OFF}: " + ", ".join(ratios)
        lines.append(line + ".")
    if not lines:
        return []
    return [
        "Rotary fusions fired, in the pieces compiled (identical layers compile once):",
        "",
        *lines,
        "",
    ]


def target_lines(cells: dict[tuple[str, str], dict[str, Any]], workloads: list[str]) -> list[str]:
    """One line per workload that mode ``ir_stack`` ran: its time as a multiple of stock
    ``torch.compile`` reduce-overhead's and of the full-graph ceiling's, where those ran."""
    lines = []
    for w in workloads:
        ours = cells.get(("ir_stack", w))
        if ours is None:
            continue
        notes = []
        stock = cells.get(("torch.compile reduce-overhead", w))
        if stock is not None:
            notes.append(f"{ours['ms'] / stock['ms']:.3f}x of torch.compile reduce-overhead")
        ceiling = cells.get(("full CUDA graph", w))
        if ceiling is not None:
            notes.append(f"{ours['ms'] / ceiling['ms']:.3f}x of the full-graph ceiling")
        if notes:
            lines.append(f"- {w}: ir_stack at " + ", ".join(notes) + ".")
    return [*lines, ""] if lines else []


def markdown(result: Result) -> str:
    """The result as markdown: a table per model, then the result's notes."""
    p = result.params
    method = (
        f"Milliseconds a call (mean of {p.get('iters')} back-to-back calls, timed with "
        f"{result.facts.get('timed_with', 'CUDA events')}); decode steps attend over "
        f"{p.get('context')} cached positions. In parentheses: max |error| of the logits "
        f"against {result.facts.get('errors_against', 'eager native')}"
        + (
            "; the converted transformers models' against the original model in eager mode "
            "(hf eager)."
            if any(r["mode"] == "hf eager" for r in result.rows)
            else "."
        )
    )
    lines = results.header(result, method)
    for model in models(result):
        lines += model_table(result, model)
    lines += [f"{note}\n" for note in result.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


def plot(result: Result, out: Path) -> None:
    """Decode latency against batch size per mode, for the first model (PNG)."""
    import matplotlib.pyplot as plt

    model = models(result)[0]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    decode = [r for r in result.rows if r["model"] == model and r.get("tokens") == 1]
    for mode in dict.fromkeys(r["mode"] for r in decode):
        points = sorted((r["batch"], r["ms"]) for r in decode if r["mode"] == mode)
        style = "-o" if mode.startswith("ir_stack") else "--."
        ax.plot([b for b, _ in points], [ms for _, ms in points], style, label=mode)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("decode batch size")
    ax.set_ylabel("ms per decode step")
    ax.set_title(f"{model} on {result.device.name} ({result.facts.get('dtype', '')})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """``ir-stack bench render`` with `argv` (the command line's arguments by default)."""
    from . import main as bench

    return bench(["render", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
