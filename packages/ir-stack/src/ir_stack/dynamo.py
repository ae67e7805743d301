"""The Dynamo backend ``ir_stack``: ``torch.compile(model, backend="ir_stack")`` runs the whole
pipeline (priorities, IR passes, piecewise split, CUDA graphs) with nothing imported first.

ir-stack declares it in the entry point group ``torch_dynamo_backends``, through which torch
finds a backend named by a string::

    [project.entry-points.torch_dynamo_backends]
    ir_stack = "ir_stack.dynamo:backend"

The configuration comes from ``options=``: an `ir_stack.Config`, or a mapping in the shape of
the TOML file (``{"priority": {...}, "passes": {...}, "piecewise": {...}}``, values as TOML
takes them or as the fields do); without options, from ``IR_STACK_CONFIG`` and
``IR_OP_PRIORITY`` (`Config.load`). A bad option raises `ValueError` naming it (Dynamo wraps
it in its ``BackendCompilerFailed``).

A configuration that names priorities makes them the process-wide ones, as
`ir_stack.compile` does. A configuration without ``piecewise`` compiles each graph with
Inductor and the IR passes (as the ``ir_passes`` backend does); with it, each graph is split
at the splitting ops (the
reference models' attention unless others are configured), its pieces compiled per compile
range and size by the configured piece compiler, and replayed as CUDA graphs as configured
(`ir_piecewise.dynamo`). Dynamo hands the backend one graph per guard set: the other shapes
of a model (a reference model's other token counts per sequence) come from its own
recompilations. ``mode=`` takes Inductor's modes, applied to every compilation (under
piecewise compilation without Inductor's own CUDA graphs, which the configuration's replace).
"""

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import fx

from ir_passes.dynamo import compile_graph
from ir_piecewise.dynamo import DynamoPiecewiseBackend

from .compiler import piecewise_config
from .config import Config

ORIGIN = "torch.compile(backend='ir_stack') options"


def config_from_options(options: object) -> Config:
    """The configuration `options` gives: a `Config`, a mapping in the TOML file's shape, or
    None (`Config.load`: ``IR_STACK_CONFIG`` and ``IR_OP_PRIORITY``)."""
    if options is None:
        return Config.load()
    if isinstance(options, Config):
        return options
    if isinstance(options, Mapping):
        return Config().merged(options, origin=ORIGIN)
    raise ValueError(
        f"{ORIGIN}: got {options!r}; expected an ir_stack.Config or a mapping with the TOML "
        "file's tables (priority, passes, piecewise)"
    )


def backend(
    gm: fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    options: Config | Mapping[str, Any] | None = None,
    mode: str | None = None,
) -> Any:
    """The ``ir_stack`` Dynamo backend; see the module docstring."""
    config = config_from_options(options)
    if config.priority:
        config.apply()
    if config.piecewise is None:
        return compile_graph(gm, example_inputs, config.passes, mode=mode)
    piecewise = piecewise_config(config)
    if mode not in (None, "default"):
        tuned = torch._inductor.list_mode_options(mode)
        tuned.pop("triton.cudagraphs", None)
        piecewise = dataclasses.replace(
            piecewise, inductor_compile_config={**tuned, **piecewise.inductor_compile_config}
        )
    return DynamoPiecewiseBackend(piecewise)(gm, list(example_inputs))
