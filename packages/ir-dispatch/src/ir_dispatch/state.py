"""Selection state: the process-wide user priority, scoped overlays and modes, global switches.

Scoped state lives in a context variable, so `priority` and `mode` blocks nest, restore on
exceptions and stay local to their thread or asyncio task. Every change that can alter a
choice bumps `generation` and clears the ops' cached eager choices.

The environment (``IR_OP_PRIORITY``, ``IR_BATCH_INVARIANT``, ``IR_DISPATCH_STATS``) applies
once, before the first selection, read of the state or change to it (`read_environment`): a
malformed value raises there, naming the variable, rather than at import, so that a program
such as the ``ir-stack`` command can report it as an error of its own.
"""

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, cast

import ir_spec

from .cli import ENV as PRIORITY_ENV
from .cli import parse_priority_env
from .defaults import EAGER, MODES
from .discovery import ensure_providers_loaded
from .installation import require_installed
from .names import resolve_op, validate_priority
from .switches import env_switch

BATCH_INVARIANT_ENV = "IR_BATCH_INVARIANT"
STATS_ENV = "IR_DISPATCH_STATS"


_Providers = list[str] | tuple[str, ...]
#: op name (or the `IrOp` itself) -> provider names
PriorityMapping = (
    Mapping[str, _Providers]
    | Mapping[ir_spec.IrOp, _Providers]
    | Mapping[str | ir_spec.IrOp, _Providers]
)


@dataclass
class Scope:
    """A `priority` / `mode` block: its overlay of user lists, its mode, its own choice caches."""

    overlay: Mapping[str, tuple[str, ...]]
    mode: str
    generation: int = -1
    caches: dict[str, dict[Any, ir_spec.Impl]] = field(default_factory=dict)


class _State:
    user: dict[str, tuple[str, ...]] = {}  # noqa: RUF012 (module-level state)
    batch_invariant: bool = False
    collect_stats: bool = False
    generation: int = 0
    active_scopes: int = 0  # scopes entered and not yet left, in every thread
    lock = threading.Lock()
    environment_read = False
    environment_lock = threading.RLock()
    reading_environment = False


def read_environment() -> None:
    """Apply ``IR_OP_PRIORITY``, ``IR_BATCH_INVARIANT`` and ``IR_DISPATCH_STATS`` (once; every
    function that reads or changes the selection state calls it first). A malformed value
    raises `ValueError` naming the variable, and again on the next use: nothing applies until
    all three are valid."""
    if _State.environment_read:
        return
    with _State.environment_lock:
        if _State.environment_read or _State.reading_environment:
            return
        _State.reading_environment = True
        try:
            batch_invariant = env_switch(BATCH_INVARIANT_ENV)
            stats = env_switch(STATS_ENV)
            raw = os.environ.get(PRIORITY_ENV, "")
            user = merge(parse_priority_env(raw), {}) if raw.strip() else {}
        finally:
            _State.reading_environment = False
        _State.user = user
        _State.batch_invariant = batch_invariant
        _State.collect_stats = stats
        _State.environment_read = True
    refresh_fast_path()
    changed()


def refresh_fast_path() -> None:
    """Let eager calls use the ops' own caches directly while no scope is active anywhere and
    stats are off (see `ir_spec.use_op_choice_caches`)."""
    ir_spec.use_op_choice_caches(_State.active_scopes == 0 and not _State.collect_stats)


# ir-spec's scope variable: eager calls remember their last choice per `Scope` object (a block's
# overlay and mode never change; every other change goes through `changed`).
_SCOPE = cast("ContextVar[Scope | None]", ir_spec.choice_scope)


def changed() -> None:
    """Record a change that may alter choices: bump the generation, drop cached choices."""
    with _State.lock:
        _State.generation += 1
    ir_spec.forget_all_choices()


def merge(mapping: PriorityMapping | None, per_op: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Validate and combine the positional mapping (keys: op names or `IrOp` objects) and the
    keyword form of a priority call."""
    require_installed()
    if mapping is not None and not isinstance(mapping, Mapping):
        raise TypeError(f"priority mapping: got {mapping!r}, expected a mapping op -> providers")
    combined: dict[str, Any] = {}
    for op, providers in (mapping or {}).items():
        name = resolve_op(op).name
        if name in combined:
            raise ValueError(f"priority for {name!r} given twice (by name and as an op)")
        combined[name] = providers
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
    read_environment()
    _State.user = merge(mapping, per_op)
    changed()


def user_priority() -> dict[str, list[str]]:
    """The user lists in force here: the process-wide ones under any scoped overlays."""
    read_environment()
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
    read_environment()
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
    read_environment()
    _State.batch_invariant = bool(enabled)
    changed()


def selection_state() -> tuple[Any, ...]:
    """A cheap, hashable value that differs whenever a selection may differ: the generation
    (bumped by priority, registration, stats and batch-invariant changes) and this context's
    scoped overlay. Callers that derive something costly from the selection (a compile cache
    key) can keep it per value.

    Loads the providers first: their registrations, on the first selection, would otherwise
    change the value under a caller that had just read it (and so would the environment)."""
    ensure_providers_loaded()
    read_environment()
    scope = _SCOPE.get()
    overlay = tuple(sorted(scope.overlay.items())) if scope is not None else ()
    return (_State.generation, overlay)


def batch_invariant() -> bool:
    """Whether batch-invariant mode is on (``IR_BATCH_INVARIANT=1`` or `set_batch_invariant`)."""
    read_environment()
    return _State.batch_invariant


def collect_stats(enabled: bool = True) -> None:
    """Count eager calls per (op, provider) for `ir_dispatch.stats` (``IR_DISPATCH_STATS=1``).

    Counting bypasses the choice cache, so it slows eager calls down; it is off by default.
    """
    read_environment()
    _State.collect_stats = bool(enabled)
    refresh_fast_path()
    changed()
