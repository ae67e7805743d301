"""``ir-stack demo``: the tiny model in each mode, timed and compared with eager native."""

import time
from collections.abc import Callable
from dataclasses import dataclass
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
    """One mode's timings, error against eager native and the providers it used."""

    name: str
    prefill_ms: float | None = None
    decode_ms: float | None = None
    max_error: float | None = None
    providers: str = ""
    note: str = ""


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


class ReportingForward:
    """Calls a compiled forward and keeps the providers its compilations lowered to (prefill
    and decode compile separate graphs, each with its own report)."""

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.forward = forward
        self.selected: dict[str, set[str]] = {}

    def __call__(self, *args: Any) -> Any:
        out = self.forward(*args)
        report = ir_passes.last_report()
        if report is not None:
            for op, nodes in report.selected_impls.items():
                self.selected.setdefault(op, set()).update(nodes.values())
        return out


def providers_used(compiled: ReportingForward | None = None) -> str:
    """Providers per op: from the compilations' reports, or from eager call counts."""
    if compiled is not None:
        if not compiled.selected:
            return "served from Inductor's caches (the passes ran when it was first compiled)"
        chosen = {op: sorted(p) for op, p in compiled.selected.items()}
    else:
        chosen = {}
        for (op, provider), _ in sorted(ir_dispatch.stats().items()):
            chosen.setdefault(op, []).append(provider)
    return ", ".join(f"{op}: {'/'.join(p)}" for op, p in sorted(chosen.items()))


def main(console: Console | None = None) -> int:
    """Run every mode; exit code 0 only when all agree with eager native within tolerance."""
    console = console or Console()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = LlamaModel(TINY).to(device).eval()
    results: list[ModeResult] = []
    reference: torch.Tensor | None = None
    tolerance = 1e-3
    with torch.no_grad():
        piecewise_name = "piecewise" + (" + CUDA graphs" if device.type == "cuda" else "")
        for name in ("eager native", "eager, selected kernels", "ir_stack.compile", piecewise_name):
            if name == "eager native":
                ir_dispatch.set_priority({op.name: ["native"] for op in ops})
            else:
                ir_dispatch.set_priority()
            forward: Callable[..., Any] = model
            compiled = None
            if name == "ir_stack.compile":
                forward = compiled = ReportingForward(ir_passes.compile(model))
            elif name == piecewise_name:
                # decode steps replay as one graph (capturable attention), prefill piecewise
                graphs = (
                    CUDAGraphMode.FULL_AND_PIECEWISE
                    if device.type == "cuda"
                    else CUDAGraphMode.NONE
                )
                piecewise = Config(piecewise=CompilationConfig(cudagraph_mode=graphs))
                forward = compiled = ReportingForward(compile(model, piecewise))
            # a first run outside the timing: Dynamo/Inductor and Triton compile there
            with console.status(f"{name}: warming up (compiling kernels and graphs) ..."):
                run_generation(forward, model, device)
            ir_dispatch.reset_stats()
            ir_dispatch.collect_stats(compiled is None)
            logits, prefill, decode = run_generation(forward, model, device)
            ir_dispatch.collect_stats(False)
            if reference is None:
                reference = logits
            error = float((logits.float() - reference.float()).abs().max())
            results.append(ModeResult(name, prefill, decode, error, providers_used(compiled)))
    ir_dispatch.set_priority()
    table = Table(
        title=f"ir-stack demo: tiny Llama on {device} (batch {BATCH}, prefill "
        f"{PREFILL_TOKENS} tokens, {DECODE_STEPS} decode steps)"
    )
    for column in (
        "mode",
        "prefill ms",
        "decode ms/step",
        "max |error| vs eager native",
        "providers",
    ):
        table.add_column(column)
    for r in results:
        table.add_row(
            r.name,
            "-" if r.prefill_ms is None else f"{r.prefill_ms:.2f}",
            "-" if r.decode_ms is None else f"{r.decode_ms:.2f}",
            "-" if r.max_error is None else f"{r.max_error:.2e}",
            r.providers or r.note,
        )
    console.print(table)
    agree = all(r.max_error is None or r.max_error <= tolerance for r in results)
    console.print("all modes agree within" if agree else "MODES DISAGREE beyond", tolerance)
    return 0 if agree else 1
