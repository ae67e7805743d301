"""Selection state: the process-wide user priority, scoped overlays and modes, global switches.

Scoped state lives in a context variable, so `priority` and `mode` blocks nest, restore on
exceptions and stay local to their thread or asyncio task. Every change that can alter a
choice bumps `generation` and clears the ops' cached eager choices.
"""

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import ir_spec

from .defaults import EAGER, MODES
from .discovery import ensure_providers_loaded
from .installation import require_installed
from .names import validate_priority

BATCH_INVARIANT_ENV = "IR_BATCH_INVARIANT"
STATS_ENV = "IR_DISPATCH_STATS"


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "0").strip().lower() not in ("", "0", "false", "no")


PriorityMapping = Mapping[str, "list[str] | tuple[str, ...]"]


@dataclass
class Scope:
    """A `priority` / `mode` block: its overlay of user lists, its mode, its own choice caches."""

    overlay: Mapping[str, tuple[str, ...]]
    mode: str
    generation: int = -1
    caches: dict[str, dict[Any, ir_spec.Impl]] = field(default_factory=dict)


class _State:
    user: dict[str, tuple[str, ...]] = {}  # noqa: RUF012 (module-level state)
    batch_invariant: bool = _env_flag(BATCH_INVARIANT_ENV)
    collect_stats: bool = _env_flag(STATS_ENV)
    generation: int = 0
    active_scopes: int = 0  # scopes entered and not yet left, in every thread
    lock = threading.Lock()


def refresh_fast_path() -> None:
    """Let eager calls use the ops' own caches directly while no scope is active anywhere and
    stats are off (see `ir_spec.use_op_choice_caches`)."""
    ir_spec.use_op_choice_caches(_State.active_scopes == 0 and not _State.collect_stats)


_SCOPE: ContextVar[Scope | None] = ContextVar("ir_dispatch_scope", default=None)


def changed() -> None:
    """Record a change that may alter choices: bump the generation, drop cached choices."""
    _State.generation += 1
    ir_spec.forget_all_choices()


def merge(mapping: PriorityMapping | None, per_op: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Validate and combine the positional mapping and keyword form of a priority call."""
    require_installed()
    if mapping is not None and not isinstance(mapping, Mapping):
        raise TypeError(f"priority mapping: got {mapping!r}, expected a mapping op -> providers")
    combined: dict[str, Any] = dict(mapping or {})
    for name, providers in per_op.items():
        if name in combined:
            raise ValueError(f"priority for {name!r} given both in the mapping and as keyword")
        combined[name] = providers
    return {name: validate_priority(name, providers) for name, providers in combined.items()}


def set_priority(mapping: PriorityMapping | None = None, /, **per_op: Any) -> None:
    """Set the process-wide user priority: one list of provider names per op.

    It replaces the previous user priority as a whole (``set_priority()`` clears it). The
    effective list of an op is its user list followed by the platform default entries the user
    list does not name. Unknown op or provider names raise `ValueError`.
    """
    _State.user = merge(mapping, per_op)
    changed()


def user_priority() -> dict[str, list[str]]:
    """The user lists in force here: the process-wide ones under any scoped overlays."""
    merged = dict(_State.user)
    scope = _SCOPE.get()
    if scope is not None:
        merged.update(scope.overlay)
    return {name: list(p) for name, p in merged.items()}


def current_mode() -> str:
    """The selection mode here: ``"eager"`` unless inside a `mode` block."""
    scope = _SCOPE.get()
    return EAGER if scope is None else scope.mode


@contextlib.contextmanager
def _enter(scope: Scope) -> Iterator[None]:
    with _State.lock:
        _State.active_scopes += 1
        refresh_fast_path()
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)
        with _State.lock:
            _State.active_scopes -= 1
            refresh_fast_path()


def priority(
    mapping: PriorityMapping | None = None, /, **per_op: Any
) -> contextlib.AbstractContextManager[None]:
    """Context manager: override the user priority of some ops inside the block.

    Blocks nest (the innermost list of an op wins), restore on exceptions and are local to the
    thread or asyncio task that enters them.
    """
    overlay = merge(mapping, per_op)
    outer = _SCOPE.get()
    base = dict(outer.overlay) if outer is not None else {}
    base.update(overlay)
    return _enter(Scope(base, current_mode()))


def mode(name: str) -> contextlib.AbstractContextManager[None]:
    """Context manager: select with the platform defaults of mode `name` (``"eager"`` or
    ``"inductor"``) inside the block; compile-time lowering runs under ``mode("inductor")``."""
    if name not in MODES:
        raise ValueError(f"mode: got {name!r}, expected one of {', '.join(MODES)}")
    outer = _SCOPE.get()
    return _enter(Scope(dict(outer.overlay) if outer else {}, name))


def set_batch_invariant(enabled: bool) -> None:
    """Only implementations declared ``batch_invariant=True`` (and native) stay eligible."""
    _State.batch_invariant = bool(enabled)
    changed()


def selection_state() -> tuple[Any, ...]:
    """A cheap, hashable value that differs whenever a selection may differ: the generation
    (bumped by priority, registration, stats and batch-invariant changes) and this context's
    scoped overlay. Callers that derive something costly from the selection (a compile cache
    key) can keep it per value.

    Loads the providers first: their registrations, on the first selection, would otherwise
    change the value under a caller that had just read it."""
    ensure_providers_loaded()
    scope = _SCOPE.get()
    overlay = tuple(sorted(scope.overlay.items())) if scope is not None else ()
    return (_State.generation, overlay)


def batch_invariant() -> bool:
    """Whether batch-invariant mode is on (``IR_BATCH_INVARIANT=1`` or `set_batch_invariant`)."""
    return _State.batch_invariant


def collect_stats(enabled: bool = True) -> None:
    """Count eager calls per (op, provider) for `ir_dispatch.stats` (``IR_DISPATCH_STATS=1``).

    Counting bypasses the choice cache, so it slows eager calls down; it is off by default.
    """
    _State.collect_stats = bool(enabled)
    refresh_fast_path()
    changed()
