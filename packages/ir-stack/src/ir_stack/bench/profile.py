"""Suite ``profile``: where a compiled step's GPU time goes, beside the floor the card allows.

For each workload of the reference model (decode steps over cached positions, a prefill), the
model compiled by ``ir_stack.compile`` without CUDA graphs runs under ``torch.profiler`` so
every kernel is seen; the kernels' time a step is summed by category (`CATEGORIES`: matrix
products, attention, the IR ops' kernels, KV-cache writes, Inductor's fused code, other),
with the kernels a step launches. Beside it, in the same run:

- the graph-replayed step: the model compiled with ``FULL_AND_PIECEWISE`` (decode steps replay
  as one CUDA graph), the mean of back-to-back steps;
- the weight-read floor of a decode step: the bytes of the weights the step reads (every
  parameter but the embedding table, of which a step reads one row a token) over the measured
  device copy bandwidth;
- for a prefill, the model's matrix FLOPs over the measured dense bf16 matrix throughput.

    ir-stack bench --only profile [--model 1b|tiny] [--quick]
    python -m ir_stack.bench.profile --out DIR [--batches 1,32] [--prefill 2048] [--context 512]

Writes ``DIR/profile-<device>.json``, ``.md`` and ``.png``. CUDA GPUs only.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import importlib
import pkgutil
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ir_piecewise import CUDAGraphMode

from ..compiler import compile as ir_stack_compile
from . import common, e2e, results, timing

#: Kernel categories, in the order the tables and the plot show them.
CATEGORIES = (
    "matrix products",
    "attention",
    "IR ops",
    "cache writes",
    "Inductor fused",
    "other",
)
KEY = ["model", "workload", "category"]
METRICS = [
    results.Metric("us", "µs"),
    results.Metric("kernels", "count"),
]
#: Parts of kernel names by category, matched in `CATEGORIES` order (after the IR ops' own
#: kernel names, which `ir_kernel_names` collects).
_MATMUL = ("gemm", "gemv", "cutlass", "cublas", "xmma", "nvjet", "matmul", "splitk")
_ATTENTION = ("attention", "attn", "flash", "fmha", "sdpa", "_partial_kernel", "_combine_kernel")
_CACHE = ("kv_cache", "cache_write", "index_put", "scatter", "gather_kernel")


@functools.cache
def ir_kernel_names() -> frozenset[str]:
    """The names of the Triton provider's kernels (its ``@triton.jit`` functions, autotuned
    or not, compiled or run by the interpreter); the CUDA provider's kernels are known by
    their namespace (``ir_cuda::``)."""
    names: set[str] = set()
    try:
        from triton.runtime.jit import KernelInterface

        import ir_kernels_triton
    except ImportError:
        return frozenset()
    for info in pkgutil.walk_packages(ir_kernels_triton.__path__, "ir_kernels_triton."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue
        for value in vars(module).values():
            if isinstance(value, KernelInterface):
                while isinstance(value, KernelInterface):  # an autotuner wraps the jit function
                    value = value.fn
                names.add(value.__name__)
    return frozenset(names)


def category(name: str, ir_names: Iterable[str] = ()) -> str:
    """The category of a kernel called `name` (one of `CATEGORIES`)."""
    lowered = name.lower()
    if any(part in lowered for part in _ATTENTION):
        return "attention"
    if any(part in lowered for part in _CACHE):
        return "cache writes"
    if name in ir_names or "ir_cuda::" in name:
        return "IR ops"
    if any(part in lowered for part in _MATMUL):
        return "matrix products"
    if name.startswith("triton_"):  # Inductor names its kernels triton_{poi,red,per}_fused_...
        return "Inductor fused"
    return "other"


#: kernels named per category in a result: the ones that take the most time
TOP_KERNELS = 3


@dataclasses.dataclass
class Breakdown:
    """Kernel time (µs) and launches a step, by category, and each category's kernels that
    take the most time a step (name, µs), longest first."""

    us: dict[str, float] = dataclasses.field(default_factory=dict)
    kernels: dict[str, int] = dataclasses.field(default_factory=dict)
    top: dict[str, list[tuple[str, float]]] = dataclasses.field(default_factory=dict)

    @property
    def total_us(self) -> float:
        return sum(self.us.values())


def breakdown(
    events: Iterable[tuple[str, float]], steps: int, ir_names: Iterable[str]
) -> Breakdown:
    """Sum kernel events (name, µs) by category, a step's worth (divided by `steps`)."""
    names = frozenset(ir_names)
    us: dict[str, float] = collections.defaultdict(float)
    count: dict[str, int] = collections.defaultdict(int)
    per_kernel: dict[str, dict[str, float]] = collections.defaultdict(
        lambda: collections.defaultdict(float)
    )
    for name, duration in events:
        kind = category(name, names)
        us[kind] += duration
        count[kind] += 1
        per_kernel[kind][name] += duration
    top = {
        k: [(n, t / steps) for n, t in sorted(v.items(), key=lambda i: -i[1])[:TOP_KERNELS]]
        for k, v in per_kernel.items()
    }
    return Breakdown(
        {k: us[k] / steps for k in CATEGORIES if k in us},
        {k: round(count[k] / steps) for k in CATEGORIES if k in count},
        {k: top[k] for k in CATEGORIES if k in top},
    )


def short_name(kernel: str, width: int = 60) -> str:
    """A kernel's name for a table cell: C++ template arguments and parameter lists dropped,
    at most `width` characters."""
    name = re.sub(r"\([^()]*\)$", "", kernel.strip())
    depth, kept = 0, []
    for char in name:
        depth += char == "<"
        if depth == 0:
            kept.append(char)
        depth -= char == ">" and depth > 0
    name = "".join(kept).removeprefix("void ").strip() or kernel
    return name if len(name) <= width else name[: width - 1] + "…"


def profile_kernels(step: Callable[[], Any], steps: int) -> list[tuple[str, float]]:
    """The GPU kernels `steps` calls of `step` launch: (name, µs) each."""
    from torch.profiler import DeviceType, ProfilerActivity, profile

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return [
        (event.name, float(event.device_time))
        for event in prof.events()
        if event.device_type == DeviceType.CUDA and event.device_time > 0
    ]


def weight_bytes(model: torch.nn.Module, tokens: int) -> int:
    """Bytes of the weights a step of `tokens` tokens reads: every parameter, but of an
    embedding table only the rows of the tokens."""
    total = 0
    for module in model.modules():
        for parameter in module.parameters(recurse=False):
            size = parameter.numel() * parameter.element_size()
            if isinstance(module, torch.nn.Embedding):
                size = min(size, tokens * parameter.shape[1] * parameter.element_size())
            total += size
    return total


def matrix_flops(model: torch.nn.Module, tokens: int, context: int, heads_dim: int) -> float:
    """The matrix FLOPs of a forward of `tokens` tokens: 2 a weight of every linear layer a
    token, and the attention's two products over `context` positions (causal prompts attend
    half on average)."""
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return 2.0 * linear * tokens + 4.0 * tokens * context * heads_dim


def dense_matrix_tflops(dtype: torch.dtype = torch.bfloat16, size: int = 8192) -> float:
    """TFLOP/s of a square `size` matrix product in `dtype`: the card's dense throughput."""
    a = torch.randn(size, size, device="cuda", dtype=dtype)
    b = torch.randn(size, size, device="cuda", dtype=dtype)
    us = timing.plain_us(lambda: a @ b, rep_ms=200).median_us
    return 2.0 * size**3 / (us * 1e-6) / 1e12


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.parser("profile", (__doc__ or "").split("\n")[0])
    e2e.add_model_args(parser)
    parser.add_argument("--iters", type=int, help="steps profiled and timed (default: by model)")
    args = parser.parse_args(argv)
    e2e.resolve_sizes(parser, args)
    return args


def run(args: argparse.Namespace) -> results.Result:
    """Profile every workload of the reference model; the result (not yet saved)."""
    device = torch.device("cuda")
    common.load_providers()
    setup = e2e.build_setup(args, device)
    model = e2e.build_model(setup)
    config = setup.config
    bandwidth = timing.copy_bandwidth_gbps()
    tflops = dense_matrix_tflops(setup.dtype)
    name = args.model + (" fp8" if args.fp8 else "")
    result = results.new_result(
        "profile",
        f"Where a step's GPU time goes: the {name} reference model, bfloat16",
        results.current_device("cuda"),
        {"model": name, "batches": args.batches, "prefill": args.prefill}
        | {"context": args.context, "iters": args.iters},
        KEY,
        METRICS,
    )
    result.facts = {"copy_bandwidth_gbps": bandwidth, "dense_bf16_tflops": tflops}
    ir_names = ir_kernel_names()
    with tempfile.TemporaryDirectory(prefix="ir-stack-profile-") as cache, torch.no_grad():
        profiled = ir_stack_compile(model, e2e.piecewise_config(CUDAGraphMode.NONE, Path(cache)))
        replayed = ir_stack_compile(
            model, e2e.piecewise_config(CUDAGraphMode.FULL_AND_PIECEWISE, Path(cache))
        )
        for w in setup.workloads:
            ids, positions = setup.inputs[w.name]
            kv = setup.cache_for(w)
            events = profile_kernels(functools.partial(profiled, ids, positions, kv), args.iters)
            parts = breakdown(events, args.iters, ir_names)
            step_ms = timing.mean_ms(
                functools.partial(replayed, ids, positions, kv), device, args.iters
            )
            tokens = w.batch * w.tokens
            summary: dict[str, Any] = {
                "model": name,
                "workload": w.name,
                "category": "step",
                "us": parts.total_us,
                "kernels": sum(parts.kernels.values()),
                "graph_step_ms": step_ms,
            }
            if w.is_decode:
                floor = weight_bytes(model, tokens) / (bandwidth * 1e9) * 1e3
                summary |= {"floor_ms": floor, "step_over_floor": step_ms / floor}
            else:
                flops = matrix_flops(model, tokens, w.tokens, config.hidden_size)
                summary |= {
                    "model_tflops": flops / (step_ms * 1e-3) / 1e12,
                    "fraction_of_dense": flops / (step_ms * 1e-3) / 1e12 / tflops,
                }
            result.rows.append(summary)
            for kind in CATEGORIES:
                if kind in parts.us:
                    result.rows.append(
                        {
                            "model": name,
                            "workload": w.name,
                            "category": kind,
                            "us": parts.us[kind],
                            "kernels": parts.kernels[kind],
                            "share": parts.us[kind] / parts.total_us,
                            "top_kernels": "; ".join(
                                f"{short_name(n)} {t:.1f}" for n, t in parts.top[kind]
                            ),
                        }
                    )
            print(f"{w.name:>14}: graph step {step_ms:.3f} ms, kernels {parts.total_us:.0f} µs")
    return result


def markdown(result: results.Result) -> str:
    """A table of steps against their floors, then each workload's breakdown by category."""
    facts = result.facts
    method = (
        f"Kernel time a step from torch.profiler (compiled, no CUDA graphs); the step replayed "
        f"as CUDA graphs (FULL_AND_PIECEWISE), mean of {result.params.get('iters')} steps. "
        f"Copy bandwidth {results.number(facts.get('copy_bandwidth_gbps'))} GB/s, dense bf16 "
        f"matrix throughput {results.number(facts.get('dense_bf16_tflops'))} TFLOP/s, measured "
        "in the same run."
    )
    lines = results.header(result, method)
    steps = [r for r in result.rows if r["category"] == "step"]
    lines += results.table(
        [
            "workload",
            "graph step (ms)",
            "kernels (µs)",
            "kernels a step",
            "weight-read floor (ms)",
            "step / floor",
            "TFLOP/s",
            "of dense bf16",
        ],
        (
            [
                r["workload"],
                results.number(r.get("graph_step_ms")),
                results.number(r.get("us")),
                results.number(r.get("kernels")),
                results.number(r.get("floor_ms")),
                results.number(r.get("step_over_floor")),
                results.number(r.get("model_tflops")),
                results.number(r.get("fraction_of_dense")),
            ]
            for r in steps
        ),
        "lrrrrrrr",
    )
    for step in steps:
        parts = [
            r for r in result.rows if r["workload"] == step["workload"] and r["category"] != "step"
        ]
        lines.append(f"## {step['workload']}\n")
        lines += results.table(
            ["category", "µs a step", "share", "kernels", "longest kernels (µs a step)"],
            (
                [
                    r["category"],
                    results.number(r["us"]),
                    f"{100 * r.get('share', 0):.1f} %",
                    results.number(r["kernels"]),
                    r.get("top_kernels", "-").replace("|", "\\|") or "-",
                ]
                for r in parts
            ),
            "lrrrl",
        )
    lines += [f"{note}\n" for note in result.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


def plot(result: results.Result, out: Path) -> None:
    """Stacked kernel time by category, a bar a workload (PNG)."""
    import matplotlib.pyplot as plt

    workloads = [r["workload"] for r in result.rows if r["category"] == "step"]
    shares: Mapping[tuple[str, str], float] = {
        (r["workload"], r["category"]): r["us"] for r in result.rows if r["category"] != "step"
    }
    fig, ax = plt.subplots(figsize=(8, 4.5))
    bottom = [0.0] * len(workloads)
    for kind in CATEGORIES:
        heights = [shares.get((w, kind), 0.0) / 1e3 for w in workloads]
        ax.bar(workloads, heights, bottom=bottom, label=kind)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_ylabel("kernel time a step (ms)")
    ax.set_title(f"{result.params.get('model')} on {result.device.name}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; writes JSON, markdown and a plot under ``--out``."""
    args = parse_args(argv)
    try:
        common.require_gpu("profile")
    except common.CannotRun as error:
        print(error)
        return common.CANNOT_RUN
    result = run(args)
    path = results.save(result, args.out)
    print(path.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
