"""Provider discovery through the entry-point group ``ir.providers``.

A provider distribution declares, in its ``pyproject.toml``::

    [project.entry-points."ir.providers"]
    my_provider = "my_package.ir_impls"

The value names a module (imported for its ``register_impl`` side effects) or a callable
(``module:function``, called with no arguments). Entry points load lazily, once, on the first
selection, explanation, priority change or read of the selection state, in the order of their
names. ``IR_DISABLE_PROVIDERS=a,b`` skips the entry points named ``a`` and ``b`` (and makes
providers of those names ineligible); a name there that no entry point, registration or
platform default knows is warned about.

Plugins are isolated from each other and from the process (by `ir_dispatch.plugins`, the loader
of every entry point group; providers add the ownership of their names):

* A provider name belongs to the entry point of that name, and so do the names that extend it
  with ``_`` (``triton`` owns ``triton_inplace``); a name already registered belongs, the same
  way, to the module that registered it. A plugin may register under a name that belongs to
  another distribution only with that distribution's own code (a plugin may import another
  provider package it builds on); otherwise it is refused.
* A plugin that fails (an exception, `sys.exit`, any BaseException but KeyboardInterrupt),
  or is refused, has every registration it made removed, is logged with its own exception and
  skipped; it never stops the process.
"""

import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from ir_spec import Impl, ops

from .defaults import default_provider_names
from .plugins import called, describe_error, isolated, log_failure

logger = logging.getLogger("ir_dispatch")

GROUP = "ir.providers"
DISABLE_ENV = "IR_DISABLE_PROVIDERS"


@dataclass(frozen=True)
class ProviderLoad:
    """What happened to one entry point."""

    name: str
    value: str
    status: str  # "loaded", "disabled" or "failed"
    error: str = ""


class _Discovery:
    lock = threading.RLock()
    loaded = False
    loading = False
    results: list[ProviderLoad] = []  # noqa: RUF012 (module-level state)
    #: The IR_DISABLE_PROVIDERS value whose names were last checked against the known ones.
    checked_disabled: str | None = None


class ProviderNameError(ValueError):
    """A plugin registered under a provider name that belongs to another distribution."""


def _parse_disabled(raw: str) -> frozenset[str]:
    return frozenset(name.strip() for name in raw.split(",") if name.strip())


def disabled_providers() -> frozenset[str]:
    """Provider names listed in ``IR_DISABLE_PROVIDERS``."""
    raw = os.environ.get(DISABLE_ENV, "")
    if raw != _Discovery.checked_disabled and _Discovery.loaded:
        _warn_unknown_disabled(raw)
    return _parse_disabled(raw)


def _known_names(points: Iterable[EntryPoint]) -> set[str]:
    names = {"native", *(ep.name for ep in points)}
    for op in ops:
        names.update(op.impls)
    names.update(default_provider_names())
    return names


def _warn_unknown_disabled(raw: str) -> None:
    _Discovery.checked_disabled = raw
    disabled = _parse_disabled(raw)
    if not disabled:
        return
    known = _known_names(entry_points(group=GROUP))
    for name in sorted(disabled - known):
        logger.warning(
            "ir_dispatch: %s names unknown provider %r; known providers: %s",
            DISABLE_ENV,
            name,
            ", ".join(sorted(known)),
        )


def _top_module(dotted: str) -> str:
    return dotted.partition(":")[0].strip().split(".")[0]


def _impl_module(impl: Impl) -> str:
    return _top_module(getattr(impl.fn, "__module__", None) or "")


@dataclass(frozen=True)
class _Owner:
    """Who a provider name (and the names extending it with ``_``) belongs to."""

    name: str
    module: str  # the owner's top-level module
    label: str
    rank: int  # of two owners of one name: the loading entry point, another, a registration

    def covers(self, provider: str) -> bool:
        return provider == self.name or provider.startswith(self.name + "_")


def _owners(
    ep: EntryPoint, points: Iterable[EntryPoint], registered: dict[tuple[str, str], Impl]
) -> list[_Owner]:
    """The owners of provider names while `ep` loads: `ep` itself, the other entry points, and
    the modules of the registrations made before."""
    owners = [_Owner(ep.name, _top_module(ep.value), f"entry point {ep.name!r}", 2)]
    owners += [
        _Owner(p.name, _top_module(p.value), f"entry point {p.name!r}", 1)
        for p in points
        if p is not ep
    ]
    for (_, provider), impl in registered.items():
        if provider != "native":
            module = _impl_module(impl)
            owners.append(_Owner(provider, module, f"provider {provider!r} of {module}", 0))
    return owners


def _owner_of(provider: str, owners: list[_Owner]) -> _Owner | None:
    """The owner whose name is the longest that covers `provider` (the loading entry point's
    own name first, then another entry point's, then a registered one's)."""
    matches = [o for o in owners if o.covers(provider)]
    return max(matches, key=lambda o: (len(o.name), o.rank)) if matches else None


def _registrations() -> dict[tuple[str, str], Impl]:
    return {(op.name, provider): impl for op in ops for provider, impl in op.impls.items()}


def _sort_out(
    ep: EntryPoint, new: dict[tuple[str, str], Impl], owners: list[_Owner]
) -> tuple[list[tuple[str, str]], str]:
    """The registrations made while `ep` loaded that are its own (to remove if it fails), and
    the first refusal: a name that belongs to another distribution, registered by other code
    than that distribution's."""
    own: list[tuple[str, str]] = []
    refusal = ""
    plugin = _top_module(ep.value)
    for key, impl in new.items():
        owner = _owner_of(key[1], owners)
        if owner is None or owner.module == plugin:
            own.append(key)
        elif _impl_module(impl) != owner.module:
            own.append(key)
            refusal = refusal or (
                f"ir.{key[0]}: provider name {key[1]!r} belongs to {owner.label} "
                f"(module {owner.module}), not to {ep.name!r} ({ep.value})"
            )
    return own, refusal


def _load(ep: EntryPoint, owners: list[_Owner]) -> ProviderLoad:
    before = _registrations()
    try:
        _, error = isolated(ep, lambda: called(ep.load()), "provider", log=False)
    except KeyboardInterrupt:
        _remove(ep, before, owners)
        raise
    if error is None:
        new = {k: v for k, v in _registrations().items() if k not in before}
        own, refusal = _sort_out(ep, new, owners)
        if refusal:
            _unregister(own)
            logger.error("ir_dispatch: provider %r refused: %s; skipped", ep.name, refusal)
            return ProviderLoad(
                ep.name, ep.value, "failed", f"{ProviderNameError.__name__}: {refusal}"
            )
        logger.debug("ir_dispatch: loaded provider %r from %s", ep.name, ep.value)
        return ProviderLoad(ep.name, ep.value, "loaded")
    own = _remove(ep, before, owners)
    log_failure(ep, "provider", error, f" (its {len(own)} registrations removed)" if own else "")
    return ProviderLoad(ep.name, ep.value, "failed", describe_error(error))


def _remove(
    ep: EntryPoint, before: dict[tuple[str, str], Impl], owners: list[_Owner]
) -> list[tuple[str, str]]:
    """Unregister what `ep` registered since `before` (not what another distribution's code
    registered meanwhile); return those registrations."""
    new = {k: v for k, v in _registrations().items() if k not in before}
    own, _ = _sort_out(ep, new, owners)
    _unregister(own)
    return own


def _unregister(registrations: list[tuple[str, str]]) -> None:
    for op_name, provider in registrations:
        op: Any = getattr(ops, op_name)
        op.unregister_impl(provider)


def ensure_providers_loaded() -> None:
    """Load every ``ir.providers`` entry point once (thread-safe, re-entrancy-safe)."""
    if _Discovery.loaded:
        return
    with _Discovery.lock:
        if _Discovery.loaded or _Discovery.loading:
            return
        _Discovery.loading = True
        try:
            raw_disabled = os.environ.get(DISABLE_ENV, "")
            disabled = _parse_disabled(raw_disabled)
            points = sorted(entry_points(group=GROUP), key=lambda e: e.name)
            results = []
            for ep in points:
                if ep.name in disabled:
                    logger.info("ir_dispatch: provider %r disabled by %s", ep.name, DISABLE_ENV)
                    results.append(ProviderLoad(ep.name, ep.value, "disabled"))
                    continue
                results.append(_load(ep, _owners(ep, points, _registrations())))
            _Discovery.results = results
            _Discovery.loaded = True
            _warn_unknown_disabled(raw_disabled)
        finally:
            _Discovery.loading = False


def provider_loads() -> list[ProviderLoad]:
    """The outcome for each discovered entry point (loading them first)."""
    ensure_providers_loaded()
    return list(_Discovery.results)


def reset_discovery() -> None:
    """Forget what was loaded, so the next use scans the entry points again (for tests)."""
    with _Discovery.lock:
        _Discovery.loaded = False
        _Discovery.results = []
        _Discovery.checked_disabled = None
