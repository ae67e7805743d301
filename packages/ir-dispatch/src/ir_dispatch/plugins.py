"""Plugins through entry points: one loader for every group of the stack.

Each group (``ir.providers`` for kernel providers, ``ir.platforms`` for platforms,
``ir.piece_compilers`` for ir-piecewise's piece compilers) is loaded with `load_entry_point`,
which isolates a plugin from the process: whatever it raises (any BaseException but
KeyboardInterrupt, `sys.exit` included) is logged with its own traceback and the plugin is
skipped, never fatal. `PluginRegistry` builds a registry of named objects on top of it:
built-in entries, then the group's entry points, each checked by the registry's `accept`
function (a plugin whose object is refused is logged and skipped as well), with a name owned
by the first that claims it. An unknown name raises `ValueError` listing the installed ones.
"""

import logging
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

logger = logging.getLogger("ir_dispatch")

T = TypeVar("T")


@dataclass(frozen=True)
class PluginLoad:
    """What happened to one entry point of a group.

    Attributes:
        group: the entry point group (``ir.platforms``, say).
        name: the entry point's name.
        value: what it points to (``module`` or ``module:attribute``).
        status: ``"loaded"``, ``"disabled"`` or ``"failed"``.
        error: for a failure, the exception type and message (or why it was refused).
        distribution: the distribution that declares it, with its version (``""`` unknown).
    """

    group: str
    name: str
    value: str
    status: str
    error: str = ""
    distribution: str = ""


class PluginRefused(ValueError):
    """A plugin loaded, but what it supplies is refused (wrong type, a name already taken)."""


def distribution_of(ep: EntryPoint) -> str:
    """``name version`` of the distribution declaring `ep` (``""`` where unknown)."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return ""
    return f"{dist.metadata['Name']} {dist.version}"


def _detach(error: BaseException, handled: BaseException | None) -> None:
    """Cut `handled` (the exception the caller was handling when the plugin loaded) out of
    `error`'s chain: the plugin's failure has nothing to do with it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if handled is not None and current.__context__ is handled:
            current.__context__ = None
            return
        current = current.__context__


def load_entry_point(
    ep: EntryPoint, *, call: bool = False, kind: str = "plugin"
) -> tuple[object, BaseException | None]:
    """Load `ep` (and, with `call`, call what it names when that is callable): the object and
    None, or None and the error, which is logged (a `kind` named `ep.name`, skipped) with its
    traceback. KeyboardInterrupt propagates."""
    return isolated(ep, lambda: called(ep.load()) if call else ep.load(), kind)


def called(obj: object) -> object:
    """`obj()` where `obj` is callable, else `obj` (an entry point names a value or a
    factory)."""
    return obj() if callable(obj) else obj


def isolated(
    ep: EntryPoint, run: Callable[[], object], kind: str, *, log: bool = True
) -> tuple[object, BaseException | None]:
    """`run()` (code of the plugin `ep`) and None, or None and what it raised, its chain cut
    from any exception being handled here and, with `log`, logged (a `kind` named `ep.name`,
    skipped) with its traceback. KeyboardInterrupt propagates."""
    handled = sys.exception()
    try:
        return run(), None
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        _detach(error, handled)
        if log:
            log_failure(ep, kind, error)
        return None, error


def log_failure(ep: EntryPoint, kind: str, error: BaseException, note: str = "") -> None:
    """Log that the `kind` of entry point `ep` failed with `error` and is skipped."""
    logger.error(
        "ir_dispatch: %s %r (%s) failed to load; skipped%s",
        kind,
        ep.name,
        ep.value,
        note,
        exc_info=(type(error), error, error.__traceback__),
    )


def describe_error(error: BaseException) -> str:
    """``Type: message``, as `PluginLoad.error` records it."""
    return f"{type(error).__name__}: {error}"


class PluginRegistry(Generic[T]):
    """Named objects of one kind: built-in ones, then those of an entry point group.

    An entry point names the object (``module:attribute``) or a callable returning it. The
    object must pass `accept` (which returns it, possibly converted, or raises `TypeError` or
    `ValueError` saying why not) and be named as the entry point is (`name_of`); the first
    to claim a name keeps it (built-ins first). Entry points load once, on first use,
    thread-safely; `reset` forgets them (for tests).
    """

    def __init__(
        self,
        group: str,
        kind: str,
        *,
        accept: Callable[[object], T],
        name_of: Callable[[T], str],
        builtins: Callable[[], Iterable[T]] = tuple,
        builtin_source: str = "built in",
    ) -> None:
        self.group = group
        self.kind = kind
        self._accept = accept
        self._name_of = name_of
        self._builtins = builtins
        self._builtin_source = builtin_source
        self._lock = threading.RLock()
        self._loaded = False
        self._loading = False
        self._entries: dict[str, T] = {}
        self._sources: dict[str, str] = {}
        self._loads: list[PluginLoad] = []

    def reset(self) -> None:
        """Forget the loaded entry points: the next use scans the group again."""
        with self._lock:
            self._loaded = False
            self._entries = {}
            self._sources = {}
            self._loads = []

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded or self._loading:
                return
            self._loading = True
            try:
                entries: dict[str, T] = {}
                sources: dict[str, str] = {}
                for item in self._builtins():
                    entries[self._name_of(item)] = item
                    sources[self._name_of(item)] = self._builtin_source
                loads = [self._load(ep, entries, sources) for ep in self._points()]
                self._entries, self._sources, self._loads = entries, sources, loads
                self._loaded = True
            finally:
                self._loading = False

    def _points(self) -> list[EntryPoint]:
        return sorted(entry_points(group=self.group), key=lambda e: e.name)

    def _load(self, ep: EntryPoint, entries: dict[str, T], sources: dict[str, str]) -> PluginLoad:
        dist = distribution_of(ep)
        obj, error = load_entry_point(ep, kind=self.kind)
        if error is not None:
            return PluginLoad(self.group, ep.name, ep.value, "failed", describe_error(error), dist)
        try:
            item = self._accept(obj)
        except (TypeError, ValueError) as refusal:
            if not callable(obj):
                return self._refuse(ep, dist, str(refusal))
            # a factory: call it, then check what it returns
            made, error = isolated(ep, obj, self.kind)
            if error is not None:
                return PluginLoad(
                    self.group, ep.name, ep.value, "failed", describe_error(error), dist
                )
            try:
                item = self._accept(made)
            except (TypeError, ValueError) as again:
                return self._refuse(ep, dist, str(again))
        name = self._name_of(item)
        if name != ep.name:
            return self._refuse(
                ep, dist, f"it supplies {self.kind} {name!r}; an entry point must be named as "
                "its " + self.kind,
            )  # fmt: skip
        if name in entries:
            if entries[name] is item:  # the same object, declared again (a built-in's own)
                return PluginLoad(self.group, ep.name, ep.value, "loaded", "", dist)
            return self._refuse(ep, dist, f"{self.kind} {name!r} is {sources[name]} already")
        entries[name] = item
        sources[name] = f"entry point {ep.name!r} ({ep.value}) of {dist or 'an unknown dist'}"
        logger.debug("ir_dispatch: loaded %s %r from %s", self.kind, ep.name, ep.value)
        return PluginLoad(self.group, ep.name, ep.value, "loaded", "", dist)

    def _refuse(self, ep: EntryPoint, dist: str, why: str) -> PluginLoad:
        logger.error(
            "ir_dispatch: %s %r (%s) refused: %s; skipped", self.kind, ep.name, ep.value, why
        )
        return PluginLoad(
            self.group, ep.name, ep.value, "failed", f"{PluginRefused.__name__}: {why}", dist
        )

    def names(self) -> list[str]:
        """The names of every installed entry (built-ins and loaded entry points), sorted."""
        self._ensure_loaded()
        return sorted(self._entries)

    def items(self) -> list[T]:
        """Every installed entry, in the order of `names`."""
        self._ensure_loaded()
        return [self._entries[name] for name in sorted(self._entries)]

    def get(self, name: str, *, origin: str = "") -> T:
        """The entry named `name`; an unknown one raises `ValueError` naming `origin` (where
        the name came from) and listing the installed ones."""
        self._ensure_loaded()
        entry = self._entries.get(name) if isinstance(name, str) else None
        if entry is None:
            where = f"{origin}: " if origin else ""
            raise ValueError(
                f"{where}unknown {self.kind} {name!r}; installed {self.kind}s: "
                f"{', '.join(sorted(self._entries)) or 'none'} (entry point group {self.group!r})"
            )
        return entry

    def source(self, name: str) -> str:
        """Where `name` comes from: built in, or its entry point and distribution."""
        self._ensure_loaded()
        return self._sources[name]

    def loads(self) -> list[PluginLoad]:
        """What happened to each entry point of the group."""
        self._ensure_loaded()
        return list(self._loads)
