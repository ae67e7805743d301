"""Suite ``profile``: where a compiled step's GPU time goes, beside the floor the card allows.

For each workload of the reference model (decode steps over cached positions, a prefill), the
model compiled by ``ir_stack.compile`` without CUDA graphs runs under ``torch.profiler`` so
every kernel is seen (and the same for converted transformers models, ``--hf``: the converted
model through the ``ir_stack`` Dynamo backend over transformers' static cache, as the ``e2e``
suite runs it, `ir_stack.bench.hf_steps`); the kernels' time a step is summed by category
(`CATEGORIES`: matrix products, attention, the IR ops' kernels, KV-cache writes, Inductor's
fused code, other), with the kernels a step launches. Beside it, in the same run:

- the graph-replayed step: the model compiled with ``FULL_AND_PIECEWISE`` (decode steps replay
  as one CUDA graph; a transformers model: the backend with ``mode="reduce-overhead"``), the
  mean of back-to-back steps;
- the weight-read floor of a decode step: the bytes of the weights the step reads (every
  parameter but the embedding table, of which a step reads one row a token) over the measured
  device copy bandwidth, and the matrix products' kernel time over it (`matrix_over_floor`);
- for a prefill, the model's matrix FLOPs over the measured dense bf16 matrix throughput;
- for a decode step, its matrix products by shape (`matrix_products`, from the operators'
  recorded input shapes): calls and kernel time a step, and the weights each reads over that
  time as a fraction of the copy bandwidth, which shows which products keep the step off the
  floor.

``--autotune`` profiles the reference model a second time compiled with
``PassConfig(autotune=True)`` (model ``<model> autotuned``), so the kernels that selection by
measurement changes stand beside those of the default selection, in one run.

    ir-stack bench --only profile [--model 1b|tiny] [--quick]
    python -m ir_stack.bench.profile --out DIR [--batches 1,32] [--prefill 2048] [--context 512]
        [--hf llama,qwen3] [--hf-layers N] [--autotune]

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

from ir_passes import PassConfig
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
#: The category of a decode step's rows of one matrix-product shape: ``"<this> MxKxN"``
#: (``" fp8"`` after it for a scaled product), beside the `CATEGORIES` rows.
MATRIX_SHAPE = "matrix product"
#: The matrix-product operators `matrix_products` reads, each with the index of its ``[m, k]``
#: operand among its inputs (the ``[k, n]`` one follows it).
_MATRIX_OPERANDS = {"aten::mm": 0, "aten::addmm": 1, "aten::_scaled_mm": 0}
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


@dataclasses.dataclass(frozen=True)
class MatrixProduct:
    """The matrix products of one shape, ``[m, k] @ [k, n]``, in a step: their calls and the
    kernel time they launch, a step's worth; `scaled` for fp8 products (``_scaled_mm``),
    whose ``[k, n]`` operand holds a byte an element."""

    m: int
    k: int
    n: int
    scaled: bool
    calls: float
    us: float

    @property
    def category(self) -> str:
        """The category of its row: `MATRIX_SHAPE` and the shape."""
        return f"{MATRIX_SHAPE} {self.m}x{self.k}x{self.n}" + (" fp8" if self.scaled else "")

    def weight_bytes(self, itemsize: int) -> int:
        """The bytes of its ``[k, n]`` operand (the weight), its elements of `itemsize` bytes
        (one for a scaled product)."""
        return self.k * self.n * (1 if self.scaled else itemsize)

    def fraction_of_copy(self, itemsize: int, bandwidth_gbps: float) -> float:
        """Its weights' bytes, read once a call, over its kernel time, as a fraction of a copy
        bandwidth of `bandwidth_gbps`."""
        return self.calls * self.weight_bytes(itemsize) / (self.us * 1e-6) / (bandwidth_gbps * 1e9)


@dataclasses.dataclass
class ProfiledSteps:
    """What `profile_kernels` saw: every GPU kernel (name, µs) and the matrix products by
    shape (`matrix_products`)."""

    kernels: list[tuple[str, float]]
    products: list[MatrixProduct] = dataclasses.field(default_factory=list)


def _device_us(average: Any) -> float:
    return float(average.self_device_time_total)


def matrix_products(
    averages: Iterable[Any], steps: int, time_us: Callable[[Any], float] = _device_us
) -> list[MatrixProduct]:
    """The matrix products among a profile's operator averages grouped by input shape
    (``key_averages(group_by_input_shape=True)``), merged by shape, a step's worth (over
    `steps`), longest first; `time_us` reads an average's kernel time."""
    merged: dict[tuple[int, int, int, bool], list[float]] = {}
    for average in averages:
        first = _MATRIX_OPERANDS.get(average.key)
        shapes = average.input_shapes or []
        if first is None or len(shapes) < first + 2:
            continue
        left, right = shapes[first], shapes[first + 1]
        if len(left) != 2 or len(right) != 2 or left[1] != right[0]:
            continue
        key = (int(left[0]), int(left[1]), int(right[1]), average.key == "aten::_scaled_mm")
        calls_us = merged.setdefault(key, [0.0, 0.0])
        calls_us[0] += average.count
        calls_us[1] += time_us(average)
    products = [
        MatrixProduct(m, k, n, scaled, calls / steps, us / steps)
        for (m, k, n, scaled), (calls, us) in merged.items()
    ]
    return sorted(products, key=lambda p: -p.us)


def profile_kernels(step: Callable[[], Any], steps: int) -> ProfiledSteps:
    """The GPU kernels `steps` calls of `step` launch, (name, µs) each, and its matrix
    products by shape. Two profiles of `steps` calls each: the kernels from one that records
    the GPU alone, the products from one that records the CPU's operators and their shapes
    too, so the kernels' list holds nothing the CPU's record adds."""
    from torch.profiler import DeviceType, ProfilerActivity, profile

    def profiled(activities: list[Any], shapes: bool) -> Any:
        with profile(activities=activities, record_shapes=shapes) as prof:
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
        return prof

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    kernels = profiled([ProfilerActivity.CUDA], False).events()
    with_shapes = profiled([ProfilerActivity.CPU, ProfilerActivity.CUDA], True)
    products = matrix_products(with_shapes.key_averages(group_by_input_shape=True), steps)
    return ProfiledSteps(kernel_events(kernels, DeviceType.CUDA), products)


def kernel_events(events: Iterable[Any], device_type: Any) -> list[tuple[str, float]]:
    """(name, µs) of each kernel among a profile's `events` on `device_type`: not the ranges
    that code names on the GPU's timeline (a profile that records the CPU too puts Inductor's
    ``## Call CompiledFxGraph`` ranges there, each as long as the kernels inside it)."""
    return [
        (event.name, float(event.device_time))
        for event in events
        if event.device_type == device_type
        and event.device_time > 0
        and not getattr(event, "is_user_annotation", False)
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


def matrix_flops(model: torch.nn.Module, tokens: int, context: int, attention_width: int) -> float:
    """The matrix FLOPs of a causal forward of `tokens` tokens over `context` positions: 2 a
    weight of every linear layer a token, and the attention's two products, 2 FLOPs a query
    element and position each, over half the context on average; `attention_width` is the
    query width (heads times head size) of all the attention layers together."""
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return 2.0 * linear * tokens + 2.0 * tokens * context * attention_width


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
    parser.add_argument(
        "--autotune",
        action="store_true",
        help="also profile the reference model compiled with PassConfig(autotune=True)",
    )
    e2e.add_hf_args(parser)
    args = parser.parse_args(argv)
    e2e.resolve_sizes(parser, args)
    args.hf = e2e.parse_hf(parser, args.hf, args.hf_layers)
    return args


def run(
    args: argparse.Namespace,
    device: torch.device | None = None,
    model_done: Callable[[results.Result], None] | None = None,
) -> results.Result:
    """Profile every workload of the reference model and of the converted transformers models
    of ``--hf`` on `device` (the GPU); the result, handed to `model_done` after each model as
    well (`main` saves it there, so a run stopped midway keeps the models it finished)."""
    device = device or torch.device("cuda")
    common.load_providers()
    setup = e2e.build_setup(args, device)
    model = e2e.build_model(setup)
    bandwidth = timing.copy_bandwidth_gbps()
    tflops = dense_matrix_tflops(setup.dtype)
    name = args.model + (" fp8" if args.fp8 else "")
    autotune = getattr(args, "autotune", False)  # a namespace built by hand may lack it
    also = " and converted transformers models" if args.hf else ""
    result = results.new_result(
        "profile",
        f"Where a step's GPU time goes: the {name} reference model{also}, bfloat16",
        results.current_device(device.type),
        {"model": name, "batches": args.batches, "prefill": args.prefill}
        | {"context": args.context, "iters": args.iters}
        | ({"hf": args.hf, "hf_layers": args.hf_layers} if args.hf else {})
        | ({"autotune": True} if autotune else {}),
        KEY,
        METRICS,
    )
    result.facts = {"copy_bandwidth_gbps": bandwidth, "dense_bf16_tflops": tflops}
    measure = functools.partial(
        workload_rows, iters=args.iters, bandwidth=bandwidth, tflops=tflops, device=device
    )
    selections = [(name, PassConfig())]
    if autotune:
        selections.append((f"{name} autotuned", PassConfig(autotune=True)))
    width = setup.config.num_layers * setup.config.num_heads * setup.config.head_dim
    for label, passes in selections:
        with tempfile.TemporaryDirectory(prefix="ir-stack-profile-") as cache, torch.no_grad():
            profiled, replayed = (
                ir_stack_compile(
                    model,
                    dataclasses.replace(e2e.piecewise_config(graphs, Path(cache)), passes=passes),
                )
                for graphs in (CUDAGraphMode.NONE, CUDAGraphMode.FULL_AND_PIECEWISE)
            )
            for w in setup.workloads:
                call = (*setup.inputs[w.name], setup.cache_for(w))
                result.rows += measure(
                    label, w, functools.partial(profiled, *call),
                    functools.partial(replayed, *call), model, width,
                )  # fmt: skip
            del profiled, replayed
        if model_done is not None:
            model_done(result)
    del model, setup
    for family in args.hf:
        result.rows += hf_rows(args, family, measure)
        if model_done is not None:
            model_done(result)
    return result


def hf_rows(
    args: argparse.Namespace, family: str, measure: Callable[..., list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The rows of `family`'s converted transformers model, on the reference's workloads."""
    from . import hf_steps
    from .hf_families import convert

    name = hf_steps.model_name(family, args.hf_layers)
    original = hf_steps.build_model(family, args.hf_layers)
    workloads = e2e.workloads_of([int(b) for b in args.batches.split(",")], args.prefill)
    setup = hf_steps.prepare(name, original, lambda m: convert(family, m), workloads, args.context)
    del original, setup.model  # the original model is not profiled
    config = setup.converted.config
    head_size = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    width = config.num_hidden_layers * config.num_attention_heads * head_size
    rows: list[dict[str, Any]] = []
    torch._dynamo.reset()
    with torch.no_grad(), hf_steps.recompiling():
        profiled = hf_steps.ir_stack_steps(setup, graphs=False)
        replayed = hf_steps.ir_stack_steps(setup, graphs=True)
        for w in setup.workloads:
            rows += measure(
                name, w, functools.partial(profiled, w), functools.partial(replayed, w),
                setup.converted, width,
            )  # fmt: skip
    return rows


def workload_rows(
    name: str,
    w: e2e.Workload,
    profiled: Callable[[], Any],
    replayed: Callable[[], Any],
    model: torch.nn.Module,
    width: int,
    *,
    iters: int,
    bandwidth: float,
    tflops: float,
    device: torch.device,
) -> list[dict[str, Any]]:
    """A workload's rows: its step (kernel time and launches of `profiled`, the time of
    `replayed`, the floor or the matrix throughput of `model`, whose attention layers are
    `width` wide together) and its kernel time by category."""
    profiled_steps = profile_kernels(profiled, iters)
    parts = breakdown(profiled_steps.kernels, iters, ir_kernel_names())
    step_ms = timing.mean_ms(replayed, device, iters)
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
        achieved = matrix_flops(model, tokens, w.tokens, width) / (step_ms * 1e-3) / 1e12
        summary |= {"model_tflops": achieved, "fraction_of_dense": achieved / tflops}
    rows = [summary]
    for kind in CATEGORIES:
        if kind in parts.us:
            rows.append(
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
    if w.is_decode:
        itemsize = next(model.parameters()).element_size()
        rows += [
            {
                "model": name,
                "workload": w.name,
                "category": product.category,
                "us": product.us,
                "kernels": product.calls,
                "weight_bytes": product.weight_bytes(itemsize),
                "fraction_of_copy": product.fraction_of_copy(itemsize, bandwidth),
            }
            for product in profiled_steps.products
            if product.us > 0
        ]
    print(f"{name} {w.name:>14}: graph step {step_ms:.3f} ms, kernels {parts.total_us:.0f} µs")
    return rows


def markdown(result: results.Result) -> str:
    """A table of steps against their floors, then each workload's breakdown by category."""
    facts = result.facts
    method = (
        "Kernel time a step from torch.profiler (compiled, no CUDA graphs); the step replayed "
        "as CUDA graphs (FULL_AND_PIECEWISE"
        + (
            "; a converted transformers model: the ir_stack backend, reduce-overhead"
            if result.params.get("hf")
            else ""
        )
        + f"), mean of {result.params.get('iters')} steps. "
        f"Copy bandwidth {results.number(facts.get('copy_bandwidth_gbps'))} GB/s, dense bf16 "
        f"matrix throughput {results.number(facts.get('dense_bf16_tflops'))} TFLOP/s, measured "
        "in the same run. Matrix products / floor: their kernel time a step over the "
        "weight-read floor, what the step would be over the floor were every other kernel free."
    )
    lines = results.header(result, method)
    steps = [r for r in result.rows if r["category"] == "step"]
    several = len({r["model"] for r in steps}) > 1
    lines += results.table(
        [
            *(["model"] if several else []),
            "workload",
            "graph step (ms)",
            "kernels (µs)",
            "kernels a step",
            "weight-read floor (ms)",
            "step / floor",
            "matrix products / floor",
            "TFLOP/s",
            "of dense bf16",
        ],
        (
            [
                *([r["model"]] if several else []),
                r["workload"],
                results.number(r.get("graph_step_ms")),
                results.number(r.get("us")),
                results.number(r.get("kernels")),
                results.number(r.get("floor_ms")),
                results.number(r.get("step_over_floor")),
                results.number(matrix_over_floor(result.rows, r)),
                results.number(r.get("model_tflops")),
                results.number(r.get("fraction_of_dense")),
            ]
            for r in steps
        ),
        ("l" if several else "") + "lrrrrrrrr",
    )
    for step in steps:
        mine = [
            r
            for r in result.rows
            if (r["model"], r["workload"]) == (step["model"], step["workload"])
        ]
        parts = [r for r in mine if r["category"] in CATEGORIES]
        lines.append(f"## {label(step, several)}\n")
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
        lines += shape_table([r for r in mine if r["category"].startswith(f"{MATRIX_SHAPE} ")])
    lines += [f"{note}\n" for note in result.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


def shape_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A decode step's matrix products by shape (`MATRIX_SHAPE` rows), longest first: what each
    shape's calls take and the fraction of the copy bandwidth they reach over their weights;
    nothing where the result has none."""
    if not rows:
        return []
    lines = [
        "Matrix products by shape (`[m, k] @ [k, n]`; weights: the `[k, n]` operand; of copy: "
        "its bytes over the kernel time, over the copy bandwidth).\n"
    ]
    lines += results.table(
        ["shape m x k x n", "calls a step", "µs a step", "µs a call", "weight MB", "of copy"],
        (
            [
                r["category"].removeprefix(MATRIX_SHAPE).strip(),
                results.number(r["kernels"]),
                results.number(r["us"]),
                results.number(r["us"] / r["kernels"] if r["kernels"] else None),
                results.number(r.get("weight_bytes", 0) / 1e6),
                results.number(r.get("fraction_of_copy")),
            ]
            for r in sorted(rows, key=lambda r: -float(r["us"]))
        ),
        "lrrrrr",
    )
    return lines


def matrix_over_floor(rows: Iterable[Mapping[str, Any]], step: Mapping[str, Any]) -> float | None:
    """A decode step's matrix-product kernel time over its weight-read floor (None without a
    floor or matrix products): the part of ``step / floor`` that the matrix products alone
    take."""
    floor_ms = step.get("floor_ms")
    matrix_us = next(
        (
            r["us"]
            for r in rows
            if (r["model"], r["workload"], r["category"])
            == (step["model"], step["workload"], "matrix products")
        ),
        None,
    )
    if not floor_ms or matrix_us is None:
        return None
    return float(matrix_us) / (float(floor_ms) * 1e3)


def label(row: Mapping[str, Any], with_model: bool) -> str:
    """A workload's name in headings and on the plot, with its model's where several are."""
    return f"{row['model']}: {row['workload']}" if with_model else str(row["workload"])


def plot(result: results.Result, out: Path) -> None:
    """Stacked kernel time by category, a bar a workload (PNG)."""
    import matplotlib.pyplot as plt

    several = len({r["model"] for r in result.rows}) > 1
    workloads = [label(r, several) for r in result.rows if r["category"] == "step"]
    shares: Mapping[tuple[str, str], float] = {
        (label(r, several), r["category"]): r["us"] for r in result.rows if r["category"] != "step"
    }
    fig, ax = plt.subplots(figsize=(8 + 1.5 * several * len(workloads) / 4, 4.5))
    bottom = [0.0] * len(workloads)
    for kind in CATEGORIES:
        heights = [shares.get((w, kind), 0.0) / 1e3 for w in workloads]
        ax.bar(workloads, heights, bottom=bottom, label=kind)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_ylabel("kernel time a step (ms)")
    if several:
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
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
    saved: list[Path] = []
    run(args, model_done=lambda partial: saved.append(results.save(partial, args.out)))
    print(saved[-1].with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
