"""Provider discovery through the entry-point group ``ir.providers``.

A provider distribution declares, in its ``pyproject.toml``::

    [project.entry-points."ir.providers"]
    my_provider = "my_package.ir_impls"

The value names a module (imported for its ``register_impl`` side effects) or a callable
(``module:function``, called with no arguments). Entry points load lazily, once, on the first
selection, explanation, priority change or read of the selection state.
``IR_DISABLE_PROVIDERS=a,b`` skips the entry points named ``a`` and ``b`` (and makes providers
of those names ineligible). A provider that fails to load is logged with its exception and
skipped; it never stops the process.
"""

import logging
import os
import threading
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

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


def disabled_providers() -> frozenset[str]:
    """Provider names listed in ``IR_DISABLE_PROVIDERS``."""
    raw = os.environ.get(DISABLE_ENV, "")
    return frozenset(name.strip() for name in raw.split(",") if name.strip())


def _load(ep: EntryPoint) -> ProviderLoad:
    try:
        obj = ep.load()
        if callable(obj):
            obj()
    except Exception as err:
        logger.error(
            "ir_dispatch: provider %r (%s) failed to load; skipped",
            ep.name,
            ep.value,
            exc_info=True,
        )
        return ProviderLoad(ep.name, ep.value, "failed", f"{type(err).__name__}: {err}")
    logger.debug("ir_dispatch: loaded provider %r from %s", ep.name, ep.value)
    return ProviderLoad(ep.name, ep.value, "loaded")


def ensure_providers_loaded() -> None:
    """Load every ``ir.providers`` entry point once (thread-safe, re-entrancy-safe)."""
    if _Discovery.loaded:
        return
    with _Discovery.lock:
        if _Discovery.loaded or _Discovery.loading:
            return
        _Discovery.loading = True
        try:
            disabled = disabled_providers()
            results = []
            for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
                if ep.name in disabled:
                    logger.info("ir_dispatch: provider %r disabled by %s", ep.name, DISABLE_ENV)
                    results.append(ProviderLoad(ep.name, ep.value, "disabled"))
                    continue
                results.append(_load(ep))
            _Discovery.results = results
            _Discovery.loaded = True
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
