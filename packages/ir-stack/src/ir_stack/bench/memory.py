"""Suite ``memory``: peak GPU memory of a chain of residual norms whose kernel may work in place.

Eight steps of ``fused_add_rms_norm.maybe_inplace`` (bf16, tokens x hidden): eager through
``maybe_inplace`` and through the default overload with the in-place provider
(``triton_inplace``: the default overload clones its activations first), compiled with the IR
passes (``ir_passes.compile``: the in-place functionalization and the clone elimination
decide what may be overwritten), and eager with the out-of-place provider. A row holds the
peak allocated above the memory held before the call (inputs and weights in that baseline),
after a warm-up call (compilation happens there), and the largest difference from the eager
default overload's outputs.

    ir-stack bench --only memory
    python -m ir_stack.bench.memory --out DIR [--tokens 16384 --hidden 8192]

Writes ``DIR/memory-<device>.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import ir_dispatch
import ir_passes
from ir_spec import ops

from . import common, results
from .results import Result

STEPS = 8
KEY = ["way"]
METRICS = [results.Metric("peak_mib", "MiB")]


def steps_maybe_inplace(x: Tensor, r: Tensor, weights: list[Tensor]) -> tuple[Tensor, Tensor]:
    for w in weights:
        x, r = ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
    return x, r


def steps_default(x: Tensor, r: Tensor, weights: list[Tensor]) -> tuple[Tensor, Tensor]:
    for w in weights:
        x, r = ops.fused_add_rms_norm(x, r, w, 1e-6)
    return x, r


def peak(fn: Callable[..., Any], make_inputs: Callable[[], tuple[Any, ...]]) -> tuple[int, Any]:
    """Bytes allocated at the peak of a call of `fn` above what was allocated before it (after
    a warm-up call), and its outputs."""
    fn(*make_inputs())
    torch.cuda.synchronize()
    inputs = make_inputs()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn(*inputs)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base, out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; exit status 2 without a GPU."""
    parser = common.parser("memory", (__doc__ or "").split("\n")[0])
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--hidden", type=int, default=8192)
    a = parser.parse_args(argv)
    if a.tokens < 1 or a.hidden < 1:
        parser.error(f"--tokens {a.tokens} --hidden {a.hidden}: expected positive sizes")
    try:
        common.require_gpu("memory")
    except common.CannotRun as error:
        print(error)
        return common.CANNOT_RUN
    tokens, hidden = (4096, 4096) if a.quick else (a.tokens, a.hidden)
    common.load_providers()
    gen = torch.Generator(device="cuda").manual_seed(0)
    bf16 = torch.bfloat16
    weights = [torch.randn(hidden, device="cuda", generator=gen, dtype=bf16) for _ in range(STEPS)]
    x0 = torch.randn(tokens, hidden, device="cuda", generator=gen, dtype=bf16)
    r0 = torch.randn(tokens, hidden, device="cuda", generator=gen, dtype=bf16)

    def make_inputs() -> tuple[Any, ...]:
        return x0.clone(), r0.clone(), weights

    device = results.current_device("cuda")
    result = results.new_result(
        "memory",
        f"Peak memory of {STEPS} residual norms, {tokens} x {hidden}, bf16",
        device,
        {"tokens": tokens, "hidden": hidden, "steps": STEPS},
        KEY,
        METRICS,
    )
    outputs: dict[str, Any] = {}
    peaks: dict[str, int] = {}
    with ir_dispatch.priority(fused_add_rms_norm=["triton_inplace"]):
        compiled = ir_passes.compile(steps_maybe_inplace)
        for way, fn in (
            ("eager maybe_inplace (triton_inplace)", steps_maybe_inplace),
            ("eager default overload (triton_inplace: clones first)", steps_default),
            ("compiled ir_passes.compile, maybe_inplace", compiled),
        ):
            peaks[way], outputs[way] = peak(fn, make_inputs)
        report = ir_passes.last_report()
    with ir_dispatch.priority(fused_add_rms_norm=["triton"]):
        way = "eager default overload (triton, out of place)"
        peaks[way], outputs[way] = peak(steps_default, make_inputs)
        reference = steps_default(*make_inputs())
    for way, out in outputs.items():
        diff = max(
            float((o.float() - e.float()).abs().max()) for o, e in zip(out, reference, strict=True)
        )
        result.rows.append({"way": way, "peak_mib": peaks[way] / 2**20, "max_abs_error": diff})
        print(f"{way:58s} peak above inputs: {peaks[way] / 2**20:9.1f} MiB")
    result.facts = {"one_activation_mib": x0.numel() * x0.element_size() / 2**20}
    if report is not None:
        result.facts["compiled_report"] = {
            "functionalized": report.functionalized,
            "donated_inputs": sorted(report.donated_inputs),
            "clones_inserted": report.clones_inserted,
            "clones_removed": report.clones_removed,
        }
    path = results.save(result, a.out)
    print(path.with_suffix(".md").read_text())
    return 0


def markdown(result: Result) -> str:
    """Each way's peak above the inputs, in MiB and in activations, and what the passes did."""
    one = result.facts.get("one_activation_mib") or 1.0
    method = (
        f"Peak memory allocated during the call above what was allocated before it (inputs "
        f"and weights in that baseline), after a warm-up call; one activation is {one:.0f} "
        "MiB. Error: the largest difference from the eager default overload's outputs."
    )
    lines = results.header(result, method)
    lines += results.table(
        ["way", "peak above inputs (MiB)", "activations", "max abs error"],
        (
            (
                r["way"],
                f"{r['peak_mib']:.1f}",
                f"{r['peak_mib'] / one:.1f}",
                results.number(r["max_abs_error"]),
            )
            for r in result.rows
        ),
        align="lrrr",
    )
    compiled = result.facts.get("compiled_report")
    if compiled:
        lines += [
            f"The compiled graph: {compiled['functionalized']} in-place calls functionalized, "
            f"inputs {compiled['donated_inputs']} donated, {compiled['clones_inserted']} clones "
            f"inserted and {compiled['clones_removed']} removed.",
            "",
        ]
    lines += [f"{note}\n" for note in result.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


def plot(result: Result, out: Path) -> None:
    """Each way's peak above the inputs (PNG)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.5 * len(result.rows)))
    ax.barh([r["way"] for r in result.rows], [r["peak_mib"] for r in result.rows])
    ax.invert_yaxis()
    ax.tick_params(labelsize=7)
    ax.set_xlabel("MiB above the inputs")
    ax.set_title(f"{result.title} ({result.device.name})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
