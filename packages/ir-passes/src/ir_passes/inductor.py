"""Hook-up to Inductor: the passes as custom graph passes, and `compile`.

The pre-grad pass functionalizes ``maybe_inplace`` calls; the post-grad pass fuses (the fusions
`PassConfig` turns on), lowers and eliminates clones. Both are `CustomGraphPass` objects whose
``uuid`` covers the pass configuration, the effective priorities (inductor mode), the registered
implementations and the source of these passes, so Inductor's graph cache reuses a compilation
exactly when none of these changed.
"""

import functools
import hashlib
import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import fx
from torch._inductor.custom_graph_pass import CustomGraphPass

import ir_dispatch
from ir_spec import ops

from .clones import CloneEliminationPass
from .config import FUSION_SWITCHES, PassConfig
from .functionalize import InplaceFunctionalizationPass
from .fusion import FusionPass
from .graph_utils import dump
from .lowering import LoweringPass
from .mutating import define_lowered_ops
from .report import claim_report, current_report, new_report

logger = logging.getLogger("ir_passes")
_SOURCES = sorted(Path(__file__).parent.glob("*.py"))


@functools.cache
def _sources_hash() -> str:
    h = hashlib.sha256()
    for source in _SOURCES:
        h.update(source.read_bytes())
    return h.hexdigest()


@functools.cache
def _impl_hash(fn: Any) -> str:
    try:
        return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]
    except (OSError, TypeError):
        return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"


_selection_keys: dict[tuple[Any, ...], str] = {}


def selection_key(config: PassConfig) -> str:
    """Everything that changes what the passes produce, as one hash.

    Called on every call of a `compile`d function, so it is kept per
    ``ir_dispatch.selection_state()`` (which changes with every priority, registration or mode
    change) and recomputed only then.
    """
    state = (config.key(), ir_dispatch.selection_state(), ir_dispatch.batch_invariant())
    key = _selection_keys.get(state)
    if key is None:
        key = _selection_keys[state] = _compute_selection_key(config)
    return key


def _compute_selection_key(config: PassConfig) -> str:
    # compiled code a cache serves may call the lowered mutating ops: define them first
    define_lowered_ops()
    h = hashlib.sha256(config.key().encode())
    h.update(_sources_hash().encode())
    with ir_dispatch.mode(ir_dispatch.INDUCTOR):
        for op in sorted(ops, key=lambda o: o.name):
            h.update(f"{op.name}:{ir_dispatch.effective_priority(op)}".encode())
            for provider, impl in sorted(op.impls.items()):
                h.update(
                    f"{provider}:{impl.supported}:{impl.inplace}:{_impl_hash(impl.fn)}".encode()
                )
    h.update(f"batch_invariant={ir_dispatch.batch_invariant()}".encode())
    return h.hexdigest()


class _ConfiguredPass(CustomGraphPass):
    """An Inductor hook of the pipeline, run as its `PassConfig` says."""

    def __init__(self, config: PassConfig) -> None:
        self.config = config

    def uuid(self) -> str:
        return selection_key(self.config)


class PreGradPass(_ConfiguredPass):
    """Inductor pre-grad hook: `InplaceFunctionalizationPass` (starts a new report)."""

    def __call__(self, graph: fx.Graph) -> None:
        report = claim_report()
        if self.config.functionalize:
            dump(self.config.debug_dir, "pre-grad-before", graph)
            InplaceFunctionalizationPass(report)(graph)
            dump(self.config.debug_dir, "pre-grad-after-functionalize", graph)


class PostGradPass(_ConfiguredPass):
    """Inductor post-grad hook: fusion, lowering and clone elimination."""

    def __call__(self, graph: fx.Graph) -> None:
        report = current_report()
        report.passes_ran = True
        fusing = any(self.config.fusion_on(switch) for switch in FUSION_SWITCHES)
        steps: list[tuple[str, bool, Callable[[fx.Graph], fx.Graph]]] = [
            ("fusion", fusing, FusionPass(report, self.config)),
            ("lowering", self.config.lower, LoweringPass(report)),
            (
                "clone-elimination",
                self.config.lower and self.config.clone_elimination_on,
                CloneEliminationPass(report),
            ),
        ]
        dump(self.config.debug_dir, "post-grad-before", graph)
        for name, enabled, run in steps:
            if enabled:
                run(graph)
                dump(self.config.debug_dir, f"post-grad-after-{name}", graph)


def inductor_options(config: PassConfig | None = None) -> dict[str, Any]:
    """Options for ``torch.compile(..., options=...)`` installing the IR passes in Inductor.

    Asked again with the same configuration and selection state (`selection_key`), it gives
    the same hook objects, so the options compare equal: transformers compiles its forward
    again when a ``generate`` call's ``CompileConfig`` (options included) differs from the
    last one. After a change of priorities they are new objects, which torch.compile does not
    take for the backend it compiled with."""
    config = config or PassConfig()
    pre, post = _hooks(config, selection_key(config))
    return {"pre_grad_custom_pass": pre, "post_grad_custom_post_pass": post}


@functools.lru_cache(maxsize=32)
def _hooks(config: PassConfig, _selection: str) -> tuple[PreGradPass, PostGradPass]:
    return PreGradPass(config), PostGradPass(config)


def compile(
    fn: Callable[..., Any], *, config: PassConfig | None = None, **torch_compile_kwargs: Any
) -> Callable[..., Any]:
    """`torch.compile` with the IR passes installed.

    The returned callable recompiles when the selection state changes (priorities,
    registrations, batch-invariant mode): it keeps one compiled function per state. Each
    compilation starts a `PassReport` (`last_report`); when Inductor's caches serve it, the
    passes do not run again and the report says so (``passes_ran=False``).
    """
    config = config or PassConfig()
    options = dict(torch_compile_kwargs.pop("options", None) or {})
    compiled: dict[str, Callable[..., Any]] = {}

    def run(*args: Any, **kwargs: Any) -> Any:
        key = selection_key(config)
        target = compiled.get(key)
        if target is None:
            logger.debug("ir_passes: compiling %s for selection state %s", fn, key[:12])
            target = torch.compile(
                fn, options={**options, **inductor_options(config)}, **torch_compile_kwargs
            )
            compiled[key] = target
            new_report()  # filled by the passes, or left empty if the caches serve the call
        return target(*args, **kwargs)

    run.__wrapped__ = fn  # type: ignore[attr-defined]
    return run
