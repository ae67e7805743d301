"""The markdown and plot of a ``fusions`` result: for each table and head count, every token
count with the fused op on its best provider, the best unfused path and Inductor's code of the
native composition (µs and fraction of copy bandwidth), and the fused op's time over each.

    python -m ir_stack.bench.fusions_report RESULT.json

is ``ir-stack bench render RESULT.json``: the markdown and plot again beside the result.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import results
from .results import Result

#: each table's title
TITLES = {
    "qk_norm_rope": "QK-norm + RoPE: `qk_norm_rotary_embedding` against the per-head "
    "`rms_norm` of query and key then `rotary_embedding`",
    "rope_kvcache": "RoPE + KV-cache write: `rotary_embedding_write_kv_cache` against "
    "`rotary_embedding` then `write_kv_cache`",
}
COLUMNS = ("fused", "unfused", "inductor")
#: the column of a row that times one step of the unfused path alone
STEP_PREFIX = "step: "

Group = tuple[str, int, int]  # table, heads, kv_heads
Best = dict[int, dict[str, dict[str, Any]]]  # tokens -> column -> its fastest row


def groups(result: Result) -> list[Group]:
    """The (table, heads, kv_heads) of the rows, tables in their order, heads increasing."""
    found = {(r["table"], r["heads"], r["kv_heads"]) for r in result.rows}
    order = list(TITLES)
    return sorted(found, key=lambda g: (order.index(g[0]) if g[0] in order else len(order), g))


def best_by_tokens(result: Result, group: Group) -> Best:
    """For each token count of `group`, each column's fastest row (the fused op's best
    provider; repeated rows of one candidate count once, the fastest)."""
    best: Best = {}
    for row in result.rows:
        if (row["table"], row["heads"], row["kv_heads"]) != group or row["column"] not in COLUMNS:
            continue
        cells = best.setdefault(row["tokens"], {})
        current = cells.get(row["column"])
        if current is None or row["us"] < current["us"]:
            cells[row["column"]] = row
    return dict(sorted(best.items()))


def cell(row: dict[str, Any] | None) -> str:
    """µs and, where measured, the fraction of the copy bandwidth."""
    if row is None:
        return "-"
    fraction = row.get("fraction_of_copy")
    return f"{row['us']:.2f}" + ("" if fraction is None else f" ({fraction:.2f})")


def ratio(best: dict[str, dict[str, Any]], other: str) -> float | None:
    """The fused op's time over column `other`'s, where both ran."""
    if "fused" not in best or other not in best:
        return None
    return float(best["fused"]["us"]) / float(best[other]["us"])


def summary(best: Best) -> str:
    """A sentence: at how many token counts the fused op beats each other column."""
    counts = len(best)
    wins = {
        other: sum(1 for cells in best.values() if (r := ratio(cells, other)) is not None and r < 1)
        for other in ("unfused", "inductor")
    }
    return (
        f"The fused op is faster than the best unfused path at {wins['unfused']} of {counts} "
        f"token counts and than Inductor's code at {wins['inductor']} of {counts}."
    )


def losing_note(best: Best) -> list[str]:
    """A sentence on the token counts where the fused op loses to the unfused path: the
    fraction of the copy bandwidth that path reached over the minimum traffic, which the
    fused op would have to reach to win there."""
    losses = [
        (tokens, float(cells["unfused"]["fraction_of_copy"]))
        for tokens, cells in best.items()
        if (r := ratio(cells, "unfused")) is not None
        and r >= 1
        and cells["unfused"].get("fraction_of_copy") is not None
    ]
    if not losses:
        return []
    where = "; ".join(f"{tokens} tokens: {fraction:.2f}" for tokens, fraction in losses)
    return [
        "Where the fused op loses, the unfused path ran at this fraction of the copy bandwidth "
        f"over the minimum traffic, which the fused op would need to reach: {where}.",
        "",
    ]


def native_only_steps(result: Result, group: Group) -> dict[str, list[int]]:
    """For each step of `group`'s unfused path, the token counts at which the native function
    was the only implementation that took its arguments (the step's rows name no other)."""
    providers: dict[tuple[str, int], set[str]] = {}
    for row in result.rows:
        if (row["table"], row["heads"], row["kv_heads"]) == group and row["column"].startswith(
            STEP_PREFIX
        ):
            step = row["column"].removeprefix(STEP_PREFIX)
            providers.setdefault((step, row["tokens"]), set()).add(row["provider"])
    native_only: dict[str, list[int]] = {}
    for (step, tokens), names in sorted(providers.items()):
        if names == {"native"}:
            native_only.setdefault(step, []).append(tokens)
    return native_only


def native_only_note(result: Result, group: Group, counts: int) -> list[str]:
    """A sentence where the unfused path had no kernel for a step: its column then times the
    native function there, a weaker anchor than the kernels elsewhere in the table."""
    native_only = native_only_steps(result, group)
    if not native_only:
        return []
    parts = [
        f"`{step}` at {len(tokens)} of {counts} token counts ({min(tokens)} to {max(tokens)})"
        if len(tokens) > 1
        else f"`{step}` at {tokens[0]} tokens"
        for step, tokens in native_only.items()
    ]
    return [
        "The unfused path ran the native function, as no kernel took the arguments, for "
        + "; ".join(parts)
        + ".",
        "",
    ]


def group_table(result: Result, group: Group) -> list[str]:
    table, heads, kv_heads = group
    best = best_by_tokens(result, group)
    head_size = next((r.get("head_size") for r in result.rows if r["table"] == table), "?")
    lines = [
        f"## {TITLES.get(table, table)}; {heads} query / {kv_heads} key heads of {head_size}",
        "",
        summary(best),
        "",
        *losing_note(best),
        *native_only_note(result, group, len(best)),
    ]
    rows = []
    for tokens, cells in best.items():
        fused = cells.get("fused")
        unfused = cells.get("unfused")
        vs = [ratio(cells, other) for other in ("unfused", "inductor")]
        rows.append(
            [
                tokens,
                cell(fused),
                "-" if fused is None else fused["provider"],
                cell(unfused),
                "-" if unfused is None else unfused["provider"],
                cell(cells.get("inductor")),
                *("-" if v is None else f"{v:.3f}" for v in vs),
            ]
        )
    lines += results.table(
        [
            "tokens",
            "fused µs (frac)",
            "fused provider",
            "unfused µs (frac)",
            "unfused providers",
            "Inductor µs (frac)",
            "fused / unfused",
            "fused / Inductor",
        ],
        rows,
        align="rrlrlrrr",
    )
    return lines


def method(result: Result) -> str:
    copies = sorted({float(r["copy_gbps"]) for r in result.rows if r.get("copy_gbps")})
    measured = (
        " / ".join(f"**{c:.0f} GB/s**" for c in copies)
        + (" (the result joins runs; each row holds its own)" if len(copies) > 1 else "")
        if copies
        else "not measured here"
    )
    timed_by = sorted({str(r.get("timed_by")) for r in result.rows if r["column"] in COLUMNS})
    how = {
        "cuda graph replay": "CUDA-graph replays (`do_bench_cudagraph`)",
        "do_bench": "`do_bench` (where a candidate cannot be captured)",
        "timeit": "host times (`timeit`, the CPU path)",
    }
    return (
        f"Times (median) are {', '.join(how.get(t, t) for t in timed_by) or 'none'}; each "
        "column is its fastest candidate: the fused op on its best provider, the unfused ops "
        "each on the provider fastest for that step (timed together as one chain), Inductor's "
        "code of the native composition. GB/s counts the minimum traffic (inputs read once, "
        "outputs and the tokens' cache rows written once); in parentheses its fraction of the "
        f"device-to-device copy bandwidth measured in the same run: {measured}."
    )


def markdown(result: Result) -> str:
    """The result as markdown: how it was measured, then a table per table and head count."""
    lines = results.header(result, method(result))
    for group in groups(result):
        lines += group_table(result, group)
    lines += [f"{note}\n" for note in result.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


def plot(result: Result, out: Path) -> None:
    """µs against tokens per column, one panel a table and head count (PNG)."""
    import matplotlib.pyplot as plt

    found = groups(result)
    fig, axes = plt.subplots(
        max(1, len(found)), 1, figsize=(7, 2.8 * max(1, len(found))), squeeze=False
    )
    for ax, group in zip(axes[:, 0], found, strict=False):
        best = best_by_tokens(result, group)
        for column in COLUMNS:
            points = [(t, cells[column]["us"]) for t, cells in best.items() if column in cells]
            style = "-o" if column == "fused" else "--."
            ax.plot([t for t, _ in points], [us for _, us in points], style, label=column)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens", fontsize=7)
        ax.set_ylabel("µs", fontsize=7)
        ax.set_title(f"{group[0]}, {group[1]}/{group[2]} heads", fontsize=8)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=6)
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
