"""Hook-up to Inductor: the passes as custom graph passes, and `compile`.

The pre-grad pass functionalizes ``maybe_inplace`` calls; the post-grad pass fuses (the fusions
`PassConfig` turns on), lowers and eliminates clones. Both are `CustomGraphPass` objects whose
``uuid`` is `selection_key`: the pass configuration, the effective priorities (inductor mode),
the registered implementations and the code they run, the code of these passes, the package
versions and the process's world size and rank, so Inductor's graph cache reuses a compilation
exactly when none of these changed, and the ranks of a tensor-parallel model never load each
other's compiled code.
"""

import contextlib
import functools
import hashlib
import importlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import fx
from torch._inductor.custom_graph_pass import CustomGraphPass

import ir_dispatch
from ir_spec import ops, process_groups

from . import fingerprint
from .clones import CloneEliminationPass
from .config import FUSION_SWITCHES, PassConfig
from .functionalize import InplaceFunctionalizationPass
from .fusion import FusionPass
from .graph_utils import dump
from .inplace_check import keep_checks
from .lowering import LoweringPass
from .mutating import define_lowered_ops
from .report import PassReport, claim_report, current_report, new_report

logger = logging.getLogger("ir_passes")
#: the modules of this package, whose code (the passes and this hook-up) every key covers
_MODULES = tuple(
    f"{__package__}.{path.stem}"
    for path in sorted(Path(__file__).parent.glob("*.py"))
    if path.stem != "__init__"
)


@functools.cache
def _passes_fingerprint() -> str:
    return fingerprint.code_fingerprint(importlib.import_module(name) for name in _MODULES)


@functools.lru_cache(maxsize=16)
def _code_fingerprint(roots: tuple[Any, ...], modules: frozenset[str]) -> str:
    """The code of the ops' native functions and implementations, kept per set of them: a
    priority change keeps it, a registration computes it again."""
    return fingerprint.code_fingerprint(roots, modules=modules)


_selection_keys: dict[tuple[Any, ...], str] = {}


def selection_key(config: PassConfig) -> str:
    """Everything that changes what the passes produce, as one hash.

    Called on every call of a `compile`d function, so it is kept per
    ``ir_dispatch.selection_state()`` (which changes with every priority, registration or mode
    change) and recomputed only then.
    """
    state = (
        config.key(),
        ir_dispatch.selection_state(),
        ir_dispatch.batch_invariant(),
        ir_dispatch.detect_platform(),
        process_groups.world_key(),
    )
    key = _selection_keys.get(state)
    if key is None:
        key = _selection_keys[state] = _compute_selection_key(config)
    return key


def _compute_selection_key(config: PassConfig) -> str:
    """The pass configuration; the versions of Python, torch, triton and the ``ir-*``
    distributions; the code of these passes; the platform in force and the code of its extra
    passes; per op the effective priority (inductor mode) and each implementation's flags; the
    code of every native function, implementation and ``supports_args``, followed into what
    they call (`ir_passes.fingerprint`); the batch-invariant mode; and the world size and rank
    (`ir_spec.process_groups.world_key`)."""
    # compiled code a cache serves may call the lowered mutating ops: define them first
    define_lowered_ops()
    h = hashlib.sha256(config.key().encode())
    h.update(repr(fingerprint.package_versions()).encode())
    h.update(_passes_fingerprint().encode())
    platform = ir_dispatch.detect_platform()
    h.update(f"platform={platform.name}:{len(platform.passes)}".encode())
    roots: list[Any] = list(platform.passes)
    modules: set[str] = {getattr(p, "__module__", None) or "" for p in platform.passes} - {""}
    with ir_dispatch.mode(ir_dispatch.INDUCTOR):
        for op in sorted(ops, key=lambda o: o.name):
            h.update(f"{op.name}:{ir_dispatch.effective_priority(op)}".encode())
            for provider, impl in sorted(op.impls.items()):
                h.update(f"{provider}:{impl.supported}:{impl.inplace}".encode())
                roots.extend(f for f in (impl.fn, impl.supports_args) if f is not None)
                modules.add(impl.fn.__module__)
            modules.add(op.native.__module__)
    h.update(_code_fingerprint(tuple(roots), frozenset(modules)).encode())
    h.update(f"batch_invariant={ir_dispatch.batch_invariant()}".encode())
    h.update(process_groups.world_key().encode())
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
    """Inductor post-grad hook: fusion, the platform's extra passes (`ir_dispatch.Platform`:
    they see the IR ops, fused or not), lowering and clone elimination."""

    def __call__(self, graph: fx.Graph) -> None:
        report = current_report()
        report.passes_ran = True
        keep_checks(graph)
        fusing = any(self.config.fusion_on(switch) for switch in FUSION_SWITCHES)
        steps: list[tuple[str, bool, Callable[[fx.Graph], fx.Graph]]] = [
            ("fusion", fusing, FusionPass(report, self.config)),
            ("platform", True, PlatformPasses(report)),
            ("lowering", self.config.lower, LoweringPass(report, self.config)),
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


class PlatformPasses:
    """The extra passes of the platform in force, in order; each is named in the report."""

    def __init__(self, report: PassReport) -> None:
        self.report = report

    def __call__(self, graph: fx.Graph) -> fx.Graph:
        platform = ir_dispatch.detect_platform()
        for run in platform.passes:
            name = getattr(run, "__qualname__", None) or type(run).__qualname__
            self.report.platform_passes.append(f"{platform.name}:{name}")
            run(graph)
        return graph


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


@contextlib.contextmanager
def refusals_unwrapped() -> Iterator[None]:
    """Raise the `ValueError` with which a pass refuses a program (a donated value used
    again), as the eager call would, rather than the `BackendCompilerFailed` that Dynamo wraps
    every exception of a backend in (the wrapper is the error's cause)."""
    try:
        yield
    except torch._dynamo.exc.BackendCompilerFailed as failed:
        if isinstance(failed.inner_exception, ValueError):
            raise failed.inner_exception from failed
        raise


def compile(
    fn: Callable[..., Any], *, config: PassConfig | None = None, **torch_compile_kwargs: Any
) -> Callable[..., Any]:
    """`torch.compile` with the IR passes installed.

    The returned callable recompiles when the selection state changes (priorities,
    registrations, batch-invariant mode): it keeps one compiled function per state. Each
    compilation starts a `PassReport` (`last_report`); when Inductor's caches serve it, the
    passes do not run again and the report says so (``passes_ran=False``). A program the
    passes refuse raises their `ValueError` (`refusals_unwrapped`).
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
        with refusals_unwrapped():
            return target(*args, **kwargs)

    run.__wrapped__ = fn  # type: ignore[attr-defined]
    return run
