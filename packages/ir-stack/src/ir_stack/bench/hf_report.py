"""The markdown and plot of an ``hf`` result: per family, each forward way's µs and its
logits against hf eager's, then the generate ways' µs a token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import results
from .results import Result


def families(result: Result) -> list[str]:
    return list(dict.fromkeys(r["family"] for r in result.rows))


def is_generate(row: dict[str, Any]) -> bool:
    return str(row["workload"]).startswith("generate")


def forward_table(result: Result, family: str) -> list[str]:
    """The forward ways of one family: µs per workload, the largest logit difference from hf
    eager, the warm-up seconds."""
    rows = [r for r in result.rows if r["family"] == family and not is_generate(r)]
    if not rows:
        return []
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    cells = {(r["way"], r["workload"]): r for r in rows}
    ways = list(dict.fromkeys(r["way"] for r in rows))
    facts = result.facts.get("families", {}).get(family, {})
    lines = results.table(
        ["way", *(f"{w} µs" for w in workloads), "max abs diff of logits vs hf eager", "warm-up s"],
        (
            [way]
            + [
                results.number(cells[(way, w)]["us"], 4) if (way, w) in cells else "-"
                for w in workloads
            ]
            + [
                ", ".join(
                    f"{cells[(way, w)]['max_abs_diff']:.3g}" for w in workloads if (way, w) in cells
                ),
                f"{next(cells[(way, w)] for w in workloads if (way, w) in cells)['warmup_s']:.0f}",
            ]
            for way in ways
        ),
        align="l" + "r" * len(workloads) + "rr",
    )
    if facts:
        lines += [f"- {facts.get('layers')} layers; converted: {facts.get('converted')}"]
        lines += [f"- Liger ways: {facts.get('liger')}"]
        for name, summary in facts.get("passes", {}).items():
            lines.append(f"- {name}: fusions {summary['fusions']}, kernels {summary['selected']}")
        lines += fusion_ratio_lines(cells, workloads)
        lines.append("")
    return lines


#: the fusion rows' ways: the fusion on, and the way it is held against
FUSION_ON, FUSION_OFF = (
    "ir compile, kernels, qk_norm fusion on",
    "ir compile, kernels, qk_norm fusion off",
)


def fusion_ratio_lines(
    cells: dict[tuple[str, str], dict[str, Any]], workloads: list[str]
) -> list[str]:
    """Where both fusion ways ran: the time with the fusion on over the time with it off."""
    pairs = [(w, cells.get((FUSION_ON, w)), cells.get((FUSION_OFF, w))) for w in workloads]
    ratios = [f"{w} {on['us'] / off['us']:.3f}x" for w, on, off in pairs if on and off]
    return [f"- {FUSION_ON} over {FUSION_OFF}: " + ", ".join(ratios) + "."] if ratios else []


def generate_table(result: Result, family: str) -> list[str]:
    """The generate ways of one family, per batch size."""
    rows = [r for r in result.rows if r["family"] == family and is_generate(r)]
    if not rows:
        return []
    lines = [
        f"`generate` ({rows[0].get('layers')} layers, a {result.params.get('prompt')}-token "
        f"prompt, {result.params.get('new')} greedy tokens; medians of the rounds, the ways "
        "taking turns):",
        "",
    ]
    lines += results.table(
        [
            "batch",
            "way",
            "µs a token",
            "its range",
            "prompt ms",
            "first token's logits vs hf eager",
            "leading tokens as its eager way's",
            "warm-up s",
        ],
        (
            (
                r["workload"].removeprefix("generate "),
                r["way"],
                f"{r['us']:.1f}",
                f"{r['us_low']:.0f}-{r['us_high']:.0f}",
                f"{r['prompt_ms']:.2f}",
                f"{r['first_logits_rel_diff']:.2%}",
                r["leading_tokens_as_eager"],
                f"{r['warmup_s']:.0f}",
            )
            for r in rows
        ),
        align="llrrrrlr",
    )
    return [
        *lines,
        "The first token's logits: the largest difference from hf eager's over their largest "
        "magnitude. Leading tokens: for each sequence, the generated tokens that agree with the "
        "same model's eager way before the first that differs (random weights give near-uniform "
        "logits, where bf16 sums in another order flip near ties).",
        "",
    ]


def markdown(result: Result) -> str:
    """Per family: the forward table, then the generate table where it ran."""
    method = (
        "Random weights, bf16. Forward: `triton.testing.do_bench` medians of a batch of "
        "one-token sequences (no KV cache) and of one prompt; compiled ways use Inductor's CUDA "
        'graphs, as `mode="reduce-overhead"` does.'
    )
    lines = results.header(result, method)
    for family in families(result):
        lines += [f"## {family}", ""]
        lines += forward_table(result, family)
        lines += generate_table(result, family)
    lines += [f"{note}\n" for note in result.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


def plot(result: Result, out: Path) -> None:
    """Per family, each forward way's time relative to hf eager, per workload (PNG)."""
    import matplotlib.pyplot as plt

    names = families(result)
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 2.4 * len(names)), squeeze=False)
    for ax, family in zip(axes[:, 0], names, strict=True):
        rows = [r for r in result.rows if r["family"] == family and not is_generate(r)]
        workloads = list(dict.fromkeys(r["workload"] for r in rows))
        ways = list(dict.fromkeys(r["way"] for r in rows))
        base = {r["workload"]: r["us"] for r in rows if r["way"] == "hf eager"}
        cells = {(r["way"], r["workload"]): r["us"] for r in rows}
        height = 0.8 / max(1, len(workloads))
        for i, w in enumerate(workloads):
            ax.barh(
                [k + i * height for k in range(len(ways))],
                [cells.get((way, w), 0.0) / base[w] if w in base else 0.0 for way in ways],
                height=height,
                label=w,
            )
        ax.set_yticks([k + 0.4 - height / 2 for k in range(len(ways))], ways, fontsize=6)
        ax.invert_yaxis()
        ax.axvline(1.0, color="black", linewidth=0.8, linestyle=":")
        ax.set_title(f"{family}: time relative to hf eager", fontsize=8)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=6)
    fig.suptitle(result.device.name, fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=70)
    plt.close(fig)
