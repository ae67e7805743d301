"""``ir-stack demo``: the tiny model in each mode, timed and compared with eager native, and
the provider each mode ran for each op.

``ir-stack demo --tp N`` runs the tensor-parallel model (`ir_stack.models.ParallelLlamaModel`)
over N ranks and compares every mode with the single-device model: it starts the N processes
itself (gloo on the CPU; NCCL where N GPUs are visible), or is one of them when ``torchrun``
started it: ``torchrun --nproc-per-node N -m ir_stack.cli demo --tp N``.
"""

import contextlib
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from rich.console import Console
from rich.table import Table

import ir_dispatch
import ir_passes
from ir_piecewise import CompilationConfig, CUDAGraphMode
from ir_spec import ops, process_groups

from .compiler import compile
from .config import Config
from .models import TINY, LlamaModel, ParallelLlamaModel
from .models.parallel import shard_sizes

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


def main(console: Console | None = None, config: Config | None = None, tp: int = 1) -> int:
    """Run every mode; exit code 0 only when all agree with eager native within tolerance.
    `config` (the command's: its priorities and passes) is the one the kernel and compiled
    modes run under; the piecewise mode adds its CUDA-graph mode to it. With `tp` > 1, the
    tensor-parallel model over `tp` ranks (`parallel_main`)."""
    console = console or Console()
    config = config or Config.load([])
    if tp != 1 or launched_by_torchrun():
        return parallel_main(console, config, tp)
    config.apply()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = LlamaModel(TINY).to(device).eval()
    title = f"ir-stack demo: tiny Llama on {device}"
    return 0 if run_modes(console, config, model, device, title) else 1


def run_modes(
    console: Console,
    config: Config,
    model: LlamaModel,
    device: torch.device,
    title: str,
    *,
    reference_model: LlamaModel | None = None,
    show: bool = True,
) -> bool:
    """Run `model` in every mode, print the timings and providers (where `show`) and return
    whether every mode agrees with the reference within tolerance: eager native of
    `reference_model` where given (the single-device model beside a tensor-parallel one), else
    of `model` itself."""
    results: list[ModeResult] = []
    reference: torch.Tensor | None = None
    tolerance = 1e-3
    with torch.no_grad():
        if reference_model is not None:
            with ir_dispatch.priority({op.name: ["native"] for op in ops}):
                reference = run_generation(reference_model, reference_model, device)[0]
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
                status = (
                    console.status(f"{name}: warming up (compiling kernels and graphs) ...")
                    if show
                    else contextlib.nullcontext()
                )
                with status, passes_run_every_time(), ir_passes.collect_reports() as reports:
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
    agree = all(r.max_error is None or r.max_error <= tolerance for r in results)
    if not show:
        return agree
    table = Table(
        title=f"{title} (batch {BATCH}, prefill {PREFILL_TOKENS} tokens, {DECODE_STEPS} "
        "decode steps)"
    )
    table.add_column("mode", no_wrap=True)
    against = "single-device eager native" if reference_model is not None else "eager native"
    for column in ("prefill ms", "decode ms/step", f"max |error| vs {against}"):
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
    console.print("all modes agree within" if agree else "MODES DISAGREE beyond", tolerance)
    return agree


# ---------------------------------------------------------------- tensor parallelism
#: the environment variables torchrun sets in each process it starts
TORCHRUN_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def launched_by_torchrun() -> bool:
    """Whether this process is one of several that ``torchrun`` started."""
    return all(v in os.environ for v in TORCHRUN_ENV) and int(os.environ["WORLD_SIZE"]) > 1


def parallel_main(console: Console, config: Config, tp: int) -> int:
    """``ir-stack demo --tp N``: the tiny model split over `tp` ranks, each mode's logits
    against the single-device model's. Under ``torchrun --nproc-per-node N`` this process is
    one rank (`tp` must be the world size, or 1 to take it); otherwise it starts `tp` processes
    itself: NCCL with one GPU each where this machine has `tp` GPUs, gloo on the CPU where it
    has none. Rank 0 prints the tables; the exit code is 0 only when every rank agrees."""
    if launched_by_torchrun():
        world = int(os.environ["WORLD_SIZE"])
        if tp not in (1, world):
            console.print(f"--tp {tp}: torchrun started {world} processes; expected --tp {world}")
            return 2
        return 0 if parallel_rank(int(os.environ["RANK"]), world, config, None, True) else 1
    if tp < 1:
        console.print(f"--tp {tp}: expected a positive number of ranks")
        return 2
    gpus = torch.cuda.device_count()
    if 0 < gpus < tp:
        console.print(
            f"--tp {tp}: {gpus} GPU(s) visible, one a rank needed (or hide them with "
            "CUDA_VISIBLE_DEVICES= to run the ranks on the CPU with gloo)"
        )
        return 2
    try:
        shard_sizes(TINY, tp)
    except ValueError as error:
        console.print(f"--tp {tp}: {error}")
        return 2
    backend = "nccl" if gpus else "gloo"
    with tempfile.TemporaryDirectory(prefix="ir-stack-demo-") as tmp:
        verdicts = Path(tmp)
        process_groups.run_in_world(parallel_rank, tp, config, verdicts, backend=backend)
        agree = [(verdicts / f"rank-{r}").read_text() == "agree" for r in range(tp)]
    return 0 if all(agree) else 1


def parallel_rank(
    rank: int, world: int, config: Config, verdicts: Path | None, own_group: bool = False
) -> bool:
    """One rank of the tensor-parallel demo (see `parallel_main`); writes its verdict under
    `verdicts` where given. With `own_group` (under torchrun) it joins the default group
    itself, and leaves it at the end."""
    if own_group:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(backend)
    try:
        ir_dispatch.read_environment()
        config.apply()
        if torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())
        else:
            device = torch.device("cpu")
        reference = LlamaModel(TINY, device=device).eval()
        model = ParallelLlamaModel(TINY, device=device).eval()
        title = f"ir-stack demo: tiny Llama over {world} ranks ({dist.get_backend()}, {device})"
        console = Console() if rank == 0 else Console(quiet=True)
        agree = run_modes(
            console, config, model, device, title, reference_model=reference, show=rank == 0
        )
        if verdicts is not None:
            (verdicts / f"rank-{rank}").write_text("agree" if agree else "disagree")
        return agree
    finally:
        if own_group:
            dist.destroy_process_group()
