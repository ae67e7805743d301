"""Fingerprints of what can change a compiled result besides the graph: the code that runs
and the versions of the packages it comes from.

`code_fingerprint` hashes the code objects of functions as they are loaded — bytecode,
constants, names, defaults — and follows what they reference: the globals and module
attributes their code names, their closures, the functions that triton's ``@jit`` and
``functools.wraps`` wrap, the methods of classes. It follows into the modules of the installed
``ir-*`` distributions and into the modules the caller names (an op's or a provider's own);
anything else (torch, triton, the standard library) is named, not read, and counted through its
version instead (`package_versions`).

Code objects rather than source files: the key describes the code this process runs, so an
edit to a file after it was imported cannot file results of the old code under the new
code's key; and an edit outside the functions a result depends on (a comment, another op's
helper) does not invalidate. Line numbers are left out, so moving code does not either. Within
a process the code is taken as fixed: what a process monkeypatches after a fingerprint was
taken is not seen until the selection state changes.
"""

import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import logging
import platform
from collections import deque
from collections.abc import Iterable
from types import BuiltinFunctionType, CodeType, FunctionType, MethodType, ModuleType
from typing import Any

import torch

logger = logging.getLogger("ir_passes")

#: Distributions whose version every key covers, besides the ``ir-*`` ones.
BASE_DISTRIBUTIONS = ("torch", "triton")


@functools.cache
def project_distributions() -> tuple[str, ...]:
    """The installed ``ir-*`` distributions (normalized names), sorted."""
    names = set()
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith("ir-"):
            names.add(name)
    return tuple(sorted(names))


def project_packages() -> frozenset[str]:
    """Top-level import names of the ``ir-*`` distributions (``ir-spec`` -> ``ir_spec``)."""
    return frozenset(name.replace("-", "_") for name in project_distributions())


@functools.cache
def package_versions() -> tuple[tuple[str, str], ...]:
    """``(name, version)`` of Python, torch, triton and every ``ir-*`` distribution, read
    through `importlib.metadata` ("none" where one is not installed), once a process: the
    code it runs is the code it imported."""
    versions = [("python", platform.python_version())]
    for name in (*BASE_DISTRIBUTIONS, *project_distributions()):
        try:
            versions.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            versions.append((name, "none"))
    return tuple(versions)


def code_fingerprint(roots: Iterable[Any], *, modules: Iterable[str] = ()) -> str:
    """A SHA-256 over the code of `roots` (functions, classes, modules, callables wrapping
    functions) and of everything they reach inside the ``ir-*`` packages and `modules` (module
    names whose code is followed too, say an op's own module); see the module docstring."""
    walker = _Walker(project_packages(), frozenset(modules))
    for root in roots:
        if isinstance(root, ModuleType):  # a root module: everything defined in it
            walker.feed("root module", root.__name__)
            for _, member in sorted(vars(root).items()):
                if getattr(member, "__module__", None) == root.__name__:
                    walker.add(member)
        else:
            walker.add(root)
    return walker.digest()


_PLAIN = (int, float, complex, str, bytes, bool, type(None), type(...), enum.Enum)


def describe(value: Any) -> str | None:
    """A text of `value` that is the same in every process, or None where there is none
    (objects whose only text is their identity)."""
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, torch.dtype | torch.device):
        return str(value)
    if isinstance(value, tuple | list):
        parts = [describe(v) for v in value]
        if any(p is None for p in parts):
            return None
        return f"{type(value).__name__}({', '.join(parts)})"  # type: ignore[arg-type]
    if isinstance(value, frozenset | set):
        parts = [describe(v) for v in value]
        if any(p is None for p in parts):
            return None
        return f"{type(value).__name__}({', '.join(sorted(parts))})"  # type: ignore[arg-type]
    if isinstance(value, dict):
        items = [(describe(k), describe(v)) for k, v in value.items()]
        if any(k is None or v is None for k, v in items):
            return None
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [describe(getattr(value, f.name)) for f in dataclasses.fields(value)]
        if any(f is None for f in fields):
            return None
        return f"{_qualified(type(value))}({', '.join(fields)})"  # type: ignore[arg-type]
    return None


def _qualified(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


class _Walker:
    """Breadth-first walk from the roots, feeding one hash; each object is read once."""

    def __init__(self, packages: frozenset[str], modules: frozenset[str]) -> None:
        self.packages = packages
        self.modules = modules
        self.hash = hashlib.sha256()
        self.seen: set[int] = set()
        self.seen_modules: set[tuple[str, tuple[str, ...]]] = set()
        self.keep: list[Any] = []  # holds what `seen` names, so that no id is reused
        self.queue: deque[tuple[Any, tuple[str, ...]]] = deque()

    def followed(self, module: str | None) -> bool:
        if not module:
            return False
        return module in self.modules or module.partition(".")[0] in self.packages

    def feed(self, *parts: str) -> None:
        for part in parts:
            self.hash.update(part.encode())
            self.hash.update(b"\0")

    def add(self, value: Any, names: tuple[str, ...] = ()) -> None:
        self.queue.append((value, names))

    def digest(self) -> str:
        while self.queue:
            value, names = self.queue.popleft()
            self._visit(value, names)
        return self.hash.hexdigest()

    def _first_time(self, value: Any) -> bool:
        if id(value) in self.seen:
            return False
        self.seen.add(id(value))
        self.keep.append(value)
        return True

    def _visit(self, value: Any, names: tuple[str, ...]) -> None:
        text = describe(value)
        if text is not None:
            self.feed("value", text)
        elif isinstance(value, FunctionType):
            self._function(value)
        elif isinstance(value, MethodType):
            self.add(value.__func__)
        elif isinstance(value, functools.partial):
            self.feed("partial", describe(value.args) or "?", describe(value.keywords) or "?")
            self.add(value.func)
        elif isinstance(value, staticmethod | classmethod):
            self.add(value.__func__)
        elif isinstance(value, property):
            for accessor in (value.fget, value.fset, value.fdel):
                if accessor is not None:
                    self.add(accessor)
        elif isinstance(value, type):
            self._class(value)
        elif isinstance(value, ModuleType):
            self._module(value, names)
        elif isinstance(value, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
            self.feed("torch op", str(value))
        elif isinstance(value, BuiltinFunctionType):
            self.feed("builtin", _qualified(value))
        else:
            self._object(value)

    def _function(self, fn: FunctionType) -> None:
        if not self.followed(fn.__module__):
            self.feed("ref", _qualified(fn))
            return
        if not self._first_time(fn):
            self.feed("again", _qualified(fn))
            return
        self.feed("function", _qualified(fn))
        names = self._code(fn.__code__)
        self.feed("defaults", describe(fn.__defaults__) or "?", describe(fn.__kwdefaults__) or "?")
        for cell in fn.__closure__ or ():
            try:
                self.add(cell.cell_contents, names)
            except ValueError:  # an empty cell
                self.feed("empty cell")
        wrapped = getattr(fn, "__wrapped__", None)
        if wrapped is not None:
            self.add(wrapped)
        scope = fn.__globals__
        for name in names:
            if name in scope:
                self.feed("global", name)
                self.add(scope[name], names)

    def _code(self, code: CodeType) -> tuple[str, ...]:
        """Feed `code` (nested code objects included); return every name it reads."""
        names: dict[str, None] = {}
        stack = [code]
        while stack:
            current = stack.pop()
            self.feed("code", current.co_name, current.co_code.hex())
            self.feed(repr(current.co_names), repr(current.co_varnames), repr(current.co_freevars))
            names.update(dict.fromkeys(current.co_names))
            for const in current.co_consts:
                if isinstance(const, CodeType):
                    stack.append(const)
                else:
                    self.feed(describe(const) or type(const).__name__)
        return tuple(names)

    def _class(self, cls: type) -> None:
        if not self.followed(cls.__module__):
            self.feed("ref", _qualified(cls))
            return
        if not self._first_time(cls):
            self.feed("again", _qualified(cls))
            return
        self.feed("class", _qualified(cls))
        for base in cls.__mro__[1:]:
            self.add(base)
        for name, member in sorted(vars(cls).items()):
            if isinstance(member, FunctionType | staticmethod | classmethod | property):
                self.feed("member", name)
                self.add(member)
            elif name not in ("__dict__", "__weakref__", "__doc__", "__module__"):
                text = describe(member)
                if text is not None:
                    self.feed("attribute", name, text)

    def _module(self, module: ModuleType, names: tuple[str, ...]) -> None:
        """A module the code reads attributes of: follow those of `names` that it has (the
        names the code uses, attribute names included)."""
        self.feed("module", module.__name__)
        if not self.followed(module.__name__) or (module.__name__, names) in self.seen_modules:
            return
        self.seen_modules.add((module.__name__, names))
        contents = vars(module)
        for name in names:
            if name in contents:
                self.feed("attribute", name)
                self.add(contents[name], names)

    def _object(self, value: Any) -> None:
        """Another object: triton's ``@jit`` (and ``@autotune``, ``@heuristics``) keep the
        function as ``.fn``; an object of a followed class is read through its class."""
        kind = type(value)
        self.feed("object", _qualified(kind))
        # the instance's own attribute only: a class's ``__getattr__`` may do anything
        inner = getattr(value, "__dict__", {}).get("fn")
        if callable(inner):
            self.add(inner)
        if self.followed(kind.__module__):
            self.add(kind)
