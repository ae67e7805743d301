"""The one selection rule, its explanation, and the dispatcher ir-spec calls.

Walk the op's effective priority list; skip a provider that has no implementation, is disabled,
is not supported on this platform, is not batch-invariant in batch-invariant mode, or whose
`supports_args` rejects the arguments; return the first that remains. ``native`` is the last
resort. The rule reads argument metadata only, so it runs on real and fake tensors alike: eager
dispatch and compile-time lowering both use it.
"""

import enum
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ir_spec import Impl, IrOp

from .defaults import EAGER, default_priority
from .discovery import disabled_providers, ensure_providers_loaded
from .names import resolve_op
from .platforms import Platform, detect_platform
from .state import _SCOPE, _State, current_mode, user_priority

logger = logging.getLogger("ir_dispatch")


def effective_priority(op: IrOp | str, *, mode: str | None = None) -> list[str]:
    """The user's list for `op` followed by the platform default entries it does not name."""
    ir_op = resolve_op(op)
    ensure_providers_loaded()
    user = user_priority().get(ir_op.name, [])
    defaults = default_priority(detect_platform(), mode or current_mode(), ir_op.name)
    merged = list(user) + [p for p in defaults if p not in user]
    return merged


class Verdict(enum.StrEnum):
    """Why a provider was or was not selected."""

    SELECTED = "selected"
    NOT_REGISTERED = "not registered"
    DISABLED = "disabled"
    NOT_SUPPORTED = "not supported on this platform"
    NOT_BATCH_INVARIANT = "not batch-invariant"
    ARGS_REJECTED = "arguments rejected"
    NOT_REACHED = "not reached"
    ELIGIBLE = "eligible"


@dataclass(frozen=True)
class ProviderVerdict:
    """One provider's line in an explanation."""

    provider: str
    verdict: Verdict
    reason: str

    def __str__(self) -> str:
        return f"{self.provider}: {self.verdict.value}" + (
            f" ({self.reason})" if self.reason else ""
        )


@dataclass(frozen=True)
class Explanation:
    """The verdict for each provider of an op's effective list, in order."""

    op: str
    mode: str
    platform: Platform
    verdicts: tuple[ProviderVerdict, ...]

    @property
    def selected(self) -> str | None:
        """The selected provider, or None when the arguments were not given."""
        return next((v.provider for v in self.verdicts if v.verdict is Verdict.SELECTED), None)

    def __iter__(self) -> Iterator[ProviderVerdict]:
        return iter(self.verdicts)

    def __str__(self) -> str:
        lines = [f"ir.{self.op} on {self.platform.value} ({self.mode} mode):"]
        lines += [f"  {i + 1}. {v}" for i, v in enumerate(self.verdicts)]
        return "\n".join(lines)


def why_unsupported(impl: Impl) -> str:
    """The reason an implementation registered with ``supported=False`` gave, or a stand-in."""
    return impl.unsupported_reason or "registered with supported=False"


def _static_verdict(impl: Impl | None, provider: str) -> tuple[Verdict, str] | None:
    """The verdict that does not depend on the arguments, or None if the provider is eligible."""
    if impl is None:
        return Verdict.NOT_REGISTERED, "no implementation registered for this op"
    if provider in disabled_providers():
        return Verdict.DISABLED, "listed in IR_DISABLE_PROVIDERS"
    if not impl.supported:
        return Verdict.NOT_SUPPORTED, why_unsupported(impl)
    if _State.batch_invariant and not impl.batch_invariant:
        return Verdict.NOT_BATCH_INVARIANT, "batch-invariant mode is on"
    return None


def _walk(op: IrOp, args: tuple[Any, ...] | None) -> tuple[Impl, list[ProviderVerdict]]:
    verdicts: list[ProviderVerdict] = []
    chosen: Impl | None = None
    providers = effective_priority(op)
    if "native" not in providers:
        providers.append("native")
    for provider in providers:
        impl = op.impls.get(provider)
        if chosen is not None:
            verdicts.append(ProviderVerdict(provider, Verdict.NOT_REACHED, ""))
            continue
        static = _static_verdict(impl, provider)
        if static is not None:
            verdicts.append(ProviderVerdict(provider, *static))
            continue
        assert impl is not None
        if args is None:
            verdicts.append(ProviderVerdict(provider, Verdict.ELIGIBLE, "arguments not given"))
            continue
        if impl.supports_args is not None and not impl.supports_args(*args):
            verdicts.append(
                ProviderVerdict(
                    provider, Verdict.ARGS_REJECTED, f"{_name(impl.supports_args)} returned False"
                )
            )
            continue
        chosen = impl
        verdicts.append(ProviderVerdict(provider, Verdict.SELECTED, ""))
    return chosen or op.native_impl, verdicts


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", repr(fn))


def select(op: IrOp | str, *args: Any, **kwargs: Any) -> Impl:
    """The implementation of `op` that runs for these arguments (real or fake tensors)."""
    ir_op = resolve_op(op)
    return _walk(ir_op, ir_op.normalize(args, kwargs))[0]


def explain(op: IrOp | str, *args: Any, **kwargs: Any) -> Explanation:
    """For each provider of the effective list: its verdict and the reason.

    Without arguments, providers that would be tried are reported as eligible.
    """
    ir_op = resolve_op(op)
    normalized = ir_op.normalize(args, kwargs) if (args or kwargs) else None
    if normalized is not None:
        ir_op.check(normalized)
    _, verdicts = _walk(ir_op, normalized)
    return Explanation(ir_op.name, current_mode(), detect_platform(), tuple(verdicts))


class _Stats:
    counts: Counter[tuple[str, str]] = Counter()  # noqa: RUF012 (module-level state)


def stats() -> dict[tuple[str, str], int]:
    """Eager calls per (op, provider) counted while `collect_stats` was on."""
    return dict(_Stats.counts)


class PriorityDispatcher:
    """ir-spec's dispatcher while ir-dispatch is installed: the rule above, cached per key."""

    def select(self, op: IrOp, args: tuple[Any, ...]) -> Impl:
        """Choose for a call; runs on each new dispatch key (on every call when counting)."""
        impl, verdicts = _walk(op, args)
        if _State.collect_stats:
            _Stats.counts[(op.name, impl.provider)] += 1
        elif logger.isEnabledFor(logging.DEBUG):
            rejected = "; ".join(
                str(v) for v in verdicts if v.verdict not in (Verdict.SELECTED, Verdict.NOT_REACHED)
            )
            logger.debug(
                "ir.%s -> %s (%s mode)%s",
                op.name,
                impl.provider,
                current_mode(),
                f"; rejected: {rejected}" if rejected else "",
            )
        return impl

    def choice_cache(self, op: IrOp) -> dict[Any, Impl] | None:
        """``op.choices`` outside scopes; a scope's own cache inside one; None while counting."""
        scope = _SCOPE.get()
        if scope is None:
            return None if _State.collect_stats else op.choices
        if _State.collect_stats or scope.mode != EAGER:
            return None
        if scope.generation != _State.generation:
            scope.caches.clear()
            scope.generation = _State.generation
        cache = scope.caches.get(op.name)
        if cache is None:
            cache = scope.caches[op.name] = {}
        return cache

    def registration_changed(self, op: IrOp) -> None:
        """A registration changes choices in every scope too."""
        _State.generation += 1

    def __repr__(self) -> str:
        return "ir_dispatch.PriorityDispatcher()"


def reset_stats() -> None:
    """Zero the counts of `stats`."""
    _Stats.counts.clear()
