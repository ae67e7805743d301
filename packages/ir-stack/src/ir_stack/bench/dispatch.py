"""Suite ``dispatch``: what an eager op call costs beyond calling its implementation directly.

Without pytest, on the CPU or a GPU:

- a trivial ``rms_norm`` provider (it returns its input) selected by priority: the op call
  against a direct call of the provider's function, so the difference is the dispatch alone;
- ``fused_add_rms_norm.maybe_inplace`` with a trivial in-place provider (it returns its
  activations), under ``no_grad`` and under ``inference_mode``, against the default overload
  (which clones the activations first) and a direct call;
- ``ir_dispatch.select`` and ``ir_dispatch.explain`` for one call's arguments;
- on a GPU, each registered provider of ``rms_norm``, ``fused_add_rms_norm``,
  ``silu_and_mul`` and ``rotary_embedding`` at a decode size (16 rows of a 1B model's width)
  through the op and directly, and the in-place providers through ``maybe_inplace``: the
  host's time a call over many calls issued back to back (kernels this small leave the host
  setting the pace).

The trivial providers' and selection's times are medians of short `timeit` rounds
(`ir_stack.bench.timing.cpu_us`); the providers' on a GPU, `timing.host_us_per_call`.
``benchmarks/cpu`` holds the same CPU measurements as pytest-benchmark tests, compared
against a saved baseline (``nox -s bench-cpu``).

    ir-stack bench --only dispatch
    python -m ir_stack.bench.dispatch --out DIR

Writes ``DIR/dispatch-<device>.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

import ir_dispatch
from ir_kernels_triton import launch_plans
from ir_spec import ops

from . import common, results, timing
from .results import Result

KEY = ["case", "call"]
METRICS = [results.Metric("us", "µs")]
#: The names the trivial providers register under (for this process only).
TRIVIAL = "bench_trivial"
TRIVIAL_INPLACE = "bench_trivial_inplace"
GPU_PROVIDERS = ("native", "triton", "cuda")
INPLACE_PROVIDERS = ("triton_inplace", "cuda_inplace")


def trivial(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    """An ``rms_norm`` provider that does nothing: the op call's cost is then dispatch alone."""
    return x


def trivial_inplace(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """A ``fused_add_rms_norm`` in-place provider that returns its activations."""
    return x, x_residual


@contextmanager
def trivial_providers() -> Iterator[None]:
    """`trivial` and `trivial_inplace` registered (and removed after)."""
    ops.rms_norm.register_impl(TRIVIAL)(trivial)
    ops.fused_add_rms_norm.register_impl(TRIVIAL_INPLACE, inplace=True)(trivial_inplace)
    try:
        yield
    finally:
        ops.rms_norm.unregister_impl(TRIVIAL)
        ops.fused_add_rms_norm.unregister_impl(TRIVIAL_INPLACE)


@contextmanager
def selected(**per_op: list[str]) -> Iterator[None]:
    """`per_op` added to the process-wide priority (`ir_dispatch.set_priority`), the previous
    one restored after: the priority a model's eager calls usually run under, rather than a
    scoped `ir_dispatch.priority` block, whose choices are kept apart."""
    previous = ir_dispatch.user_priority()
    ir_dispatch.set_priority({**previous, **per_op})
    try:
        yield
    finally:
        ir_dispatch.set_priority(previous)


def _bound(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], Any]:
    return lambda: fn(*args)


def trivial_rows(per_call: Callable[[Callable[[], Any]], float]) -> list[dict[str, Any]]:
    """The trivial providers' op calls, ``maybe_inplace`` and selection, against direct calls."""
    x, weight = torch.randn(4, 64), torch.randn(64)
    rows = []

    def row(case: str, call: str, fn: Callable[[], Any]) -> None:
        rows.append({"case": case, "call": call, "us": per_call(fn)})

    with trivial_providers(), selected(rms_norm=[TRIVIAL]):
        op = ops.rms_norm
        if op(x, weight, 1e-6) is not x:
            raise RuntimeError(f"rms_norm did not select the trivial provider {TRIVIAL!r}")
        row(
            "rms_norm, trivial provider",
            "direct call of the provider",
            lambda: trivial(x, weight, 1e-6),
        )
        row("rms_norm, trivial provider", "op call", lambda: op(x, weight, 1e-6))
        with torch.no_grad():
            row("rms_norm, trivial provider", "op call, no_grad", lambda: op(x, weight, 1e-6))
        row(
            "rms_norm, trivial provider",
            "ops.rms_norm lookup and call",
            lambda: ops.rms_norm(x, weight, 1e-6),
        )
        row("selection", "ir_dispatch.select", lambda: ir_dispatch.select(op, x, weight, 1e-6))
        row("selection", "ir_dispatch.explain", lambda: ir_dispatch.explain(op, x, weight, 1e-6))
    fused = ops.fused_add_rms_norm
    args = (torch.randn(4, 64), torch.randn(4, 64), weight, 1e-6)
    case = "fused_add_rms_norm, trivial in-place provider"
    with trivial_providers(), selected(fused_add_rms_norm=[TRIVIAL_INPLACE]):
        with torch.no_grad():
            if fused.maybe_inplace(*args)[0] is not args[0]:
                raise RuntimeError(f"maybe_inplace did not run {TRIVIAL_INPLACE!r} in place")
            row(case, "direct call of the provider", _bound(trivial_inplace, args))
            row(case, "maybe_inplace, no_grad", _bound(fused.maybe_inplace, args))
            row(case, "op call (clones first), no_grad", _bound(fused, args))
        with torch.inference_mode():
            inference_args = tuple(a.clone() if isinstance(a, Tensor) else a for a in args)
            row(case, "maybe_inplace, inference_mode", _bound(fused.maybe_inplace, inference_args))
    return rows


def gpu_cases() -> dict[str, tuple[Any, ...]]:
    """Decode-sized arguments (16 rows of a 1B model's width) of the ops timed per provider."""
    torch.manual_seed(0)
    cuda, bf16 = "cuda", torch.bfloat16
    x = torch.randn(16, 2048, device=cuda, dtype=bf16)
    weight = torch.rand(2048, device=cuda, dtype=bf16)
    return {
        "rms_norm": (x, weight, 1e-5),
        "fused_add_rms_norm": (x, torch.randn_like(x), weight, 1e-5),
        "silu_and_mul": (torch.randn(16, 16384, device=cuda, dtype=bf16),),
        "rotary_embedding": (
            torch.arange(16, device=cuda),
            torch.randn(16, 2048, device=cuda, dtype=bf16),
            torch.randn(16, 512, device=cuda, dtype=bf16),
            64,
            torch.randn(4096, 64, device=cuda),
            True,
        ),
    }


def provider_rows() -> list[dict[str, Any]]:
    """On a GPU: each provider through the op and directly (Triton's also with its launch
    plans off: every call through its configuration rules and Triton's own launcher), and the
    in-place ones through ``maybe_inplace``, at a decode size."""
    cases = gpu_cases()
    x = cases["rms_norm"][0]
    one_op = timing.host_us_per_call(lambda: x.mul(1))
    rows = [{"case": "one torch op (x.mul(1))", "call": "direct", "us": one_op}]

    def row(case: str, call: str, fn: Callable[[], Any], **more: Any) -> None:
        rows.append({"case": case, "call": call, "us": timing.host_us_per_call(fn), **more})

    for name, args in cases.items():
        op = getattr(ops, name)
        for provider in GPU_PROVIDERS:
            if provider not in op.impls or not op.impls[provider].supported:
                continue
            fn = op.native if provider == "native" else op.impls[provider].fn
            plans = [True, False] if provider == "triton" else [True]
            for planned in plans:
                case = f"{name}, {provider}" + ("" if planned else ", plans off")
                with selected(**{name: [provider]}), launch_plans(planned):
                    chosen = ir_dispatch.select(name, *args).provider
                    row(case, "op call", _bound(op, args), selected=chosen)
                    row(case, "direct call", _bound(fn, args))
        for provider in INPLACE_PROVIDERS:
            if provider not in op.impls or not op.allow_inplace:
                continue
            case = f"{name}, {provider}"
            with selected(**{name: [provider]}):
                row(case, "maybe_inplace", _bound(op.maybe_inplace, args))
                with torch.inference_mode():
                    row(case, "maybe_inplace, inference_mode", _bound(op.maybe_inplace, args))
            row(case, "direct call", _bound(op.impls[provider].fn, args))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite on this machine's device."""
    parser = common.parser("dispatch", (__doc__ or "").split("\n")[0])
    a = parser.parse_args(argv)
    device = results.current_device()
    result = results.new_result(
        "dispatch",
        "Eager dispatch overhead",
        device,
        {"quick": a.quick},
        KEY,
        METRICS,
    )
    budget = 0.1 if a.quick else 0.5
    result.rows = trivial_rows(lambda fn: timing.cpu_us(fn, budget_s=budget).median_us)
    if device.kind == "cuda":
        common.load_providers()
        result.rows += provider_rows()
    for row in result.rows:
        print(f"{row['case']:50s} {row['call']:36s} {row['us']:8.3f} µs")
    path = results.save(result, a.out)
    print(path.with_suffix(".md").read_text())
    return 0


def markdown(result: Result) -> str:
    """Each case's calls, with the op call's cost over the direct call where both ran."""
    method = (
        "µs a call: the trivial providers and selection, the median of short `timeit` rounds "
        "on the host; on a GPU, each provider at 16 rows of width 2048, the host's time a call "
        "over 3000 calls issued back to back. Overhead: the call's time less the direct call's in "
        "the same case."
    )
    lines = results.header(result, method)
    direct = {r["case"]: r["us"] for r in result.rows if r["call"].startswith("direct")}
    lines += results.table(
        ["case", "call", "µs a call", "overhead µs"],
        (
            (
                r["case"],
                r["call"] + (f" (selected {r['selected']})" if r.get("selected") else ""),
                f"{r['us']:.3f}",
                "-"
                if r["call"].startswith("direct") or r["case"] not in direct
                else f"{r['us'] - direct[r['case']]:.3f}",
            )
            for r in result.rows
        ),
        align="llrr",
    )
    lines += [f"{note}\n" for note in result.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


def plot(result: Result, out: Path) -> None:
    """Each call's µs, grouped by case (PNG)."""
    import matplotlib.pyplot as plt

    labels = [f"{r['case']}: {r['call']}" for r in result.rows]
    fig, ax = plt.subplots(figsize=(9, 0.8 + 0.28 * len(labels)))
    ax.barh(labels, [r["us"] for r in result.rows])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.tick_params(labelsize=6)
    ax.set_xlabel("µs a call")
    ax.set_title(f"{result.title} ({result.device.name})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
