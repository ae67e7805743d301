"""Decode steps and a prefill of a transformers model over a static KV cache, before and after
`convert_hf_model`: the ``e2e`` and ``profile`` suites' workloads for converted transformers
models.

A model of a released checkpoint's shape (`SHAPES`: Llama 3.2 1B, Qwen3 1.7B; random weights,
bf16, the vocabulary cut as the ``hf`` suite cuts it) runs each `Workload` of the reference
suites: a decode step of ``batch`` sequences at position ``context`` over a static cache whose
first ``context`` positions hold random keys and values, or a prefill of one prompt into an
empty cache. Each workload has its own transformers ``StaticCache`` (it is sized by batch),
shared by every mode; every call writes the same positions, so a step can be repeated (where
transformers counts the cache's length in tensors, `HFSetup.rewind` sets them back before each
call).

Modes (`MODES`), each a function of a workload returning the logits:

- ``hf eager``: the original model, nothing compiled: the reference of the others' errors;
- ``torch.compile reduce-overhead``: the original model compiled whole (``fullgraph=True``,
  static shapes) with Inductor's CUDA graphs; transformers marks its static cache's tensors
  static, so the graphs are in use (the rows record ``cudagraph_skips``);
- ``ir_stack``: the converted model, ``torch.compile(backend="ir_stack",
  mode="reduce-overhead")`` with the default configuration: what a user of ir-stack writes;
- ``full CUDA graph``: the converted model in eager mode captured whole per decode workload
  (the ceiling; a model whose eager forward cannot be captured gets no row, and the reason is
  kept).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from . import timing
from .e2e import Workload, cudagraph_skips, stamp, workload_row

log = logging.getLogger(__name__)

#: family -> the checkpoint whose shape its model takes (`hf_families.LLAMA_1B`,
#: `hf_families.QWEN3_1_7B`: the vocabulary cut to the ``hf`` suite's, so the logits stay
#: small beside the layers)
SHAPES = {"llama": "Llama 3.2 1B", "qwen3": "Qwen3 1.7B"}
MODES = ("hf eager", "torch.compile reduce-overhead", "ir_stack", "full CUDA graph")
#: the mode whose logits the others are compared with
REFERENCE = "hf eager"

Step = Callable[[Workload], Tensor | None]


def recompiling() -> Any:
    """A context in which Dynamo compiles `forward_of`'s function once a workload and mode
    (static shapes; one code object for all of them) without reaching its recompile limit."""
    return torch._dynamo.config.patch(recompile_limit=64)


def model_name(family: str, layers: int | None = None) -> str:
    """The rows' name of `family`'s converted model (with its layers where cut)."""
    cut = f", {layers} layers" if layers is not None else ""
    return f"transformers {family}, {SHAPES[family]} shape{cut}"


def build_model(family: str, layers: int | None = None) -> Any:
    """`family`'s model at its `SHAPES` checkpoint's shape (`layers` layers, default the
    checkpoint's), random weights, bf16, on the GPU."""
    from .hf_families import LLAMA_1B, QWEN3_1_7B, build

    shape = {"llama": LLAMA_1B, "qwen3": QWEN3_1_7B}[family]
    return build(family, layers or int(shape["num_hidden_layers"]), shape=shape)


@dataclasses.dataclass
class HFSetup:
    """A model's workloads: the original and its converted copy, inputs, and the static
    caches (one a workload, shared by every mode)."""

    name: str
    model: Any
    converted: Any
    context: int
    workloads: list[Workload]
    inputs: dict[str, tuple[Tensor, Tensor]] = dataclasses.field(default_factory=dict)
    caches: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: the tensors in which each workload's cache counts its filled positions (`counters_of`)
    counters: dict[str, list[Tensor]] = dataclasses.field(default_factory=dict)
    #: what `converter` returned (the ``hf`` suite's: the parts converted, by kind)
    conversion: object = None

    def filled(self, workload: Workload) -> int:
        """The cache positions filled before a call of `workload`."""
        return self.context if workload.is_decode else 0

    def call_args(self, workload: Workload) -> tuple[Tensor, Tensor, Any, int]:
        """The arguments of a `forward_of` function for a call of `workload`."""
        ids, positions = self.inputs[workload.name]
        return ids, positions, self.caches[workload.name], self.filled(workload)

    def rewind(self, workload: Workload) -> None:
        """Set `workload`'s cache back to the positions filled before its call, where
        transformers counts them in tensors: two kernels for all the layers."""
        counters = self.counters[workload.name]
        if counters:
            torch._foreach_zero_(counters)
            torch._foreach_add_(counters, self.filled(workload))


def prepare(
    name: str,
    model: Any,
    converter: Callable[[Any], object],
    workloads: Sequence[Workload],
    context: int,
) -> HFSetup:
    """The setup of `model` (left as it is; a deep copy is converted by `converter`): inputs,
    and a static cache a workload, a decode workload's first `context` positions random."""
    import transformers

    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(7)
    setup = HFSetup(name, model, copy.deepcopy(model), context, list(workloads))
    vocab = model.config.vocab_size
    forward = forward_of(model)
    with torch.no_grad():
        for w in setup.workloads:
            ids = torch.randint(0, vocab, (w.batch, w.tokens), device=device, generator=generator)
            start = setup.filled(w)
            positions = torch.arange(start, start + w.tokens, device=device).repeat(w.batch, 1)
            setup.inputs[w.name] = (ids, positions)
            cache = transformers.StaticCache(config=model.config, max_cache_len=start + w.tokens)
            forward(ids, positions, cache, start)  # allocates the cache, eagerly (static)
            for layer in cache.layers:
                for tensor in (layer.keys, layer.values):
                    tensor.copy_(torch.randn(tensor.shape, generator=generator, device=device))
            setup.caches[w.name] = cache
            setup.counters[w.name] = counters_of(cache)  # after the allocation moved them
    setup.conversion = converter(setup.converted)
    return setup


def counters_of(cache: Any) -> list[Tensor]:
    """The tensors in which `cache` counts its filled positions, one a layer (transformers
    from 5.2x: each update advances them); none on earlier releases, which take the positions
    of each call instead."""
    counted = (getattr(layer, "cumulative_length", None) for layer in cache.layers)
    return [counter for counter in counted if isinstance(counter, Tensor)]


def forward_of(model: Any) -> Callable[[Tensor, Tensor, Any, int], Tensor]:
    """``forward(ids, positions, cache, filled)``: the logits of `model` on a call that writes
    `cache` from position `filled`, whichever name its transformers release gives the cache
    (``cache``, or ``past_key_values`` with ``cache_position``)."""
    takes_cache = "cache" in inspect.signature(model.forward).parameters

    def forward(ids: Tensor, positions: Tensor, cache: Any, filled: int) -> Tensor:
        options: dict[str, Any] = {"cache": cache}
        if not takes_cache:
            where = torch.arange(filled, filled + ids.shape[1], device=ids.device)
            options = {"past_key_values": cache, "cache_position": where}
        logits: Tensor = model(
            input_ids=ids, position_ids=positions, use_cache=True, **options
        ).logits
        return logits

    return forward


def make_mode(mode: str, setup: HFSetup) -> Step:
    """A function running one workload in `mode` (None where the mode has no row)."""
    if mode == REFERENCE:
        return _calls(forward_of(setup.model), setup)
    if mode == "torch.compile reduce-overhead":
        compiled = torch.compile(
            forward_of(setup.model), mode="reduce-overhead", fullgraph=True, dynamic=False
        )
        return _calls(compiled, setup, graphs=True)
    if mode == "ir_stack":
        return ir_stack_steps(setup, graphs=True)
    if mode == "full CUDA graph":
        return FullGraph(setup).call
    raise ValueError(f"mode {mode!r}: expected one of {MODES}")


def ir_stack_steps(setup: HFSetup, *, graphs: bool) -> Step:
    """The converted model through the ``ir_stack`` Dynamo backend (default configuration),
    with Inductor's CUDA graphs (``mode="reduce-overhead"``) or without (for the profiler)."""
    from ..dynamo import backend  # the entry point's: found here without an installation

    compiled = torch.compile(
        forward_of(setup.converted),
        backend=backend,
        mode="reduce-overhead" if graphs else None,
        fullgraph=True,
        dynamic=False,
    )
    return _calls(compiled, setup, graphs=graphs)


def _calls(forward: Callable[..., Tensor], setup: HFSetup, *, graphs: bool = False) -> Step:
    def call(w: Workload) -> Tensor:
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        return _rewound(setup, forward, w)

    return call


def _rewound(setup: HFSetup, forward: Callable[..., Tensor], w: Workload) -> Tensor:
    setup.rewind(w)
    return forward(*setup.call_args(w))


class FullGraph:
    """The converted model in eager mode, captured whole: one CUDA graph a decode workload."""

    def __init__(self, setup: HFSetup) -> None:
        self.graphs: dict[str, tuple[torch.cuda.CUDAGraph, Tensor]] = {}
        forward = forward_of(setup.converted)
        for w in setup.workloads:
            if not w.is_decode:
                continue
            step = functools.partial(_rewound, setup, forward, w)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    step()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = step()
            self.graphs[w.name] = (graph, out)

    def call(self, w: Workload) -> Tensor | None:
        entry = self.graphs.get(w.name)
        if entry is None:
            return None
        entry[0].replay()
        return entry[1]


def run_modes(
    setup: HFSetup,
    modes: Sequence[str],
    iters: int,
    mode_done: Callable[[list[dict[str, Any]]], None] = lambda rows: None,
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Time `modes` on every workload of `setup` (errors against `REFERENCE`'s logits); the
    rows, and the reason of each mode that could not run here (CUDA graphs on the CPU, an
    eager forward that cannot be captured)."""
    device = next(setup.model.parameters()).device
    on_cuda = device.type == "cuda"
    rows: list[dict[str, Any]] = []
    missing: dict[str, str] = {}
    with torch.no_grad(), recompiling():
        reference_step = make_mode(REFERENCE, setup)
        reference = {w.name: _logits(reference_step(w)) for w in setup.workloads}
        for mode in modes:
            if mode == "full CUDA graph" and not on_cuda:
                missing[mode] = "no CUDA graphs on the CPU"
                continue
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()
            try:
                step = make_mode(mode, setup)
            except RuntimeError as failure:  # an eager forward that a graph cannot capture
                if mode != "full CUDA graph":
                    raise
                log.warning("%s: %s: %s", setup.name, mode, failure)
                missing[mode] = f"{type(failure).__name__}: {str(failure).splitlines()[0]}"
                continue
            for w in setup.workloads:
                out = step(w)
                if out is None:
                    continue
                error = float((out.float() - reference[w.name]).abs().max())
                ms = timing.mean_ms(functools.partial(step, w), device, iters)
                rows.append(
                    workload_row(setup.name, mode, w, ms, 0.0 if mode == REFERENCE else error)
                )
                print(f"{setup.name}: {mode:>30} {w.name:>14} {ms:9.3f} ms  err {error:.3g}")
            if mode == "torch.compile reduce-overhead" and on_cuda:
                stamp(rows, mode, "cudagraph_skips", cudagraph_skips())
            mode_done(rows)
    return rows, missing


def _logits(out: Tensor | None) -> Tensor:
    assert out is not None, "the reference runs every workload"
    return out.float().clone()
