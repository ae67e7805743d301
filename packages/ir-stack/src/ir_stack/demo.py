"""``ir-stack demo``: the tiny model in each mode, timed and compared with eager native, and
the provider each mode ran for each op."""

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

import ir_dispatch
import ir_passes
from ir_piecewise import CompilationConfig, CUDAGraphMode
from ir_spec import ops

from .compiler import compile
from .config import Config
from .models import TINY, LlamaModel

PREFILL_TOKENS = 16
DECODE_STEPS = 4
BATCH = 2


@dataclass
class ModeResult:
    """One mode's timings, error against eager native and the providers it used (op name ->
    providers, sorted)."""

    name: str
    prefill_ms: float | None = None
    decode_ms: float | None = None
    max_error: float | None = None
    providers: dict[str, list[str]] = field(default_factory=dict)


def run_generation(
    forward: Callable[..., Any], model: LlamaModel, device: torch.device
) -> tuple[torch.Tensor, float, float]:
    """Prefill then greedy decode steps; returns (all logits, prefill ms, decode ms per step)."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(
        0, model.config.vocab_size, (BATCH, PREFILL_TOKENS), generator=generator
    ).to(device)
    positions = torch.arange(PREFILL_TOKENS, device=device).repeat(BATCH, 1)
    cache = model.new_kv_cache(BATCH)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    start = time.perf_counter()
    # clone: under CUDA graphs a forward returns the graph's output buffer, which the next
    # replay of the same size overwrites
    logits = [forward(ids, positions, cache).clone()]
    sync()
    prefill = (time.perf_counter() - start) * 1e3
    step_ids = logits[0].view(BATCH, PREFILL_TOKENS, -1)[:, -1].argmax(-1, keepdim=True)
    start = time.perf_counter()
    for step in range(DECODE_STEPS):
        pos = torch.full((BATCH, 1), PREFILL_TOKENS + step, device=device)
        logits.append(forward(step_ids, pos, cache).clone())
        step_ids = logits[-1].argmax(-1, keepdim=True)
    sync()
    decode = (time.perf_counter() - start) * 1e3 / DECODE_STEPS
    return torch.cat(logits), prefill, decode


def providers_used(reports: list[ir_passes.PassReport]) -> dict[str, list[str]]:
    """Providers per op: what the compilations' `reports` lowered to (a compiled mode's) and
    what the eager calls counted by ``ir_dispatch`` ran (an eager mode's, and the ops a
    compiled mode runs eagerly)."""
    chosen: dict[str, set[str]] = {}
    for report in reports:
        for op, nodes in report.selected_impls.items():
            chosen.setdefault(op, set()).update(nodes.values())
    for op, provider in ir_dispatch.stats():
        chosen.setdefault(op, set()).add(provider)
    return {op: sorted(providers) for op, providers in sorted(chosen.items())}


@contextlib.contextmanager
def passes_run_every_time() -> Iterator[None]:
    """Inductor compiles without its graph caches, so that the IR passes run and report what
    they lowered to: a graph served from a cache carries no report. (Its compiled kernels are
    still reused; only the graphs are compiled again.)"""
    with (
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        yield


def providers_table(results: list[ModeResult]) -> Table:
    """The provider each mode ran for each op: ops down, modes across. Each mode's column is
    as wide as its widest cell or header word, its header wrapped at spaces, so that the table
    fits an 80-column terminal."""
    ops_run = sorted({op for result in results for op in result.providers})
    cells = [["/".join(r.providers.get(op, ["-"])) for op in ops_run] for r in results]
    table = Table(title="providers by op (what each mode ran)")
    table.add_column("op", no_wrap=True)
    for result, column in zip(results, cells, strict=True):
        width = max(len(text) for text in [*result.name.split(), *column])
        table.add_column(result.name, min_width=width, max_width=width)
    for op, *row in zip(ops_run, *cells, strict=True):
        table.add_row(op, *row)
    return table


def main(console: Console | None = None, config: Config | None = None) -> int:
    """Run every mode; exit code 0 only when all agree with eager native within tolerance.
    `config` (the command's: its priorities and passes) is the one the kernel and compiled
    modes run under; the piecewise mode adds its CUDA-graph mode to it."""
    console = console or Console()
    config = config or Config.load([])
    config.apply()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = LlamaModel(TINY).to(device).eval()
    results: list[ModeResult] = []
    reference: torch.Tensor | None = None
    tolerance = 1e-3
    with torch.no_grad():
        piecewise_name = "piecewise" + (" + CUDA graphs" if device.type == "cuda" else "")
        for name in ("eager native", "eager, selected kernels", "ir_stack.compile", piecewise_name):
            # eager native overrides every op in its own block; the other modes select under
            # the priority in force (the command's --ir-op-priority flags and config file)
            native_only = (
                ir_dispatch.priority({op.name: ["native"] for op in ops})
                if name == "eager native"
                else contextlib.nullcontext()
            )
            forward: Callable[..., Any] = model
            if name == "ir_stack.compile":
                forward = compile(model, dataclasses.replace(config, piecewise=None))
            elif name == piecewise_name:
                # decode steps replay as one graph (capturable attention), prefill piecewise
                graphs = (
                    CUDAGraphMode.FULL_AND_PIECEWISE
                    if device.type == "cuda"
                    else CUDAGraphMode.NONE
                )
                base = config.piecewise or CompilationConfig()
                piecewise = dataclasses.replace(
                    config,
                    piecewise=dataclasses.replace(base, cudagraph_mode=graphs, cache=False),
                )
                forward = compile(model, piecewise)
            # a first run outside the timing: Dynamo/Inductor and Triton compile there
            with native_only:
                with (
                    console.status(f"{name}: warming up (compiling kernels and graphs) ..."),
                    passes_run_every_time(),
                    ir_passes.collect_reports() as reports,
                ):
                    run_generation(forward, model, device)
                ir_dispatch.reset_stats()
                ir_dispatch.collect_stats(True)  # ops a compiled mode runs eagerly count too
                try:
                    logits, prefill, decode = run_generation(forward, model, device)
                finally:
                    ir_dispatch.collect_stats(False)
            if reference is None:
                reference = logits
            error = float((logits.float() - reference.float()).abs().max())
            results.append(ModeResult(name, prefill, decode, error, providers_used(reports)))
    table = Table(
        title=f"ir-stack demo: tiny Llama on {device} (batch {BATCH}, prefill "
        f"{PREFILL_TOKENS} tokens, {DECODE_STEPS} decode steps)"
    )
    table.add_column("mode", no_wrap=True)
    for column in ("prefill ms", "decode ms/step", "max |error| vs eager native"):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(
            r.name,
            "-" if r.prefill_ms is None else f"{r.prefill_ms:.2f}",
            "-" if r.decode_ms is None else f"{r.decode_ms:.2f}",
            "-" if r.max_error is None else f"{r.max_error:.2e}",
        )
    console.print(table)
    console.print(providers_table(results))
    agree = all(r.max_error is None or r.max_error <= tolerance for r in results)
    console.print("all modes agree within" if agree else "MODES DISAGREE beyond", tolerance)
    return 0 if agree else 1
