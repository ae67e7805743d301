"""Platforms: a family of devices with its own default priorities and extra passes.

A platform is a `Platform`: its name, how it is detected, its default priority per selection
mode and the extra FX passes ir-passes runs for it. ir-dispatch's own platforms (CUDA, ROCm,
XPU and CPU, in `ir_dispatch.builtin_platforms`) are declared the way an out-of-tree platform
package declares its own, in the entry point group ``ir.platforms``::

    [project.entry-points."ir.platforms"]
    my_npu = "my_npu_package.platform:PLATFORM"

The entry point names a `Platform` (or a callable returning one) named as the entry point is;
a name taken by ir-dispatch's platforms or an earlier entry point is refused. A platform
package that fails to import, or supplies something else, is logged and skipped
(`ir_dispatch.plugins`).

`detect_platform` picks the platform in force once a process: the one ``IR_PLATFORM`` names
(an unknown name raises `ValueError` listing the installed platforms), else the first whose
``detect()`` says yes, by `Platform.detect_rank` (highest first; out-of-tree platforms come
before ir-dispatch's accelerators, and CPU, always detected, comes last). `platform_origin`
says which it is, why, and where its defaults come from.
"""

import functools
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .defaults import MODES
from .plugins import PluginLoad, PluginRegistry

logger = logging.getLogger("ir_dispatch")

#: Environment variable that forces the platform (for tests and cross-platform debugging).
PLATFORM_ENV = "IR_PLATFORM"
GROUP = "ir.platforms"
#: `Platform.detect_rank` of a platform that gives none: before ir-dispatch's own.
DEFAULT_DETECT_RANK = 100
_NAME = re.compile(r"[a-z][a-z0-9_]*")

#: mode -> op name -> provider names
DefaultTable = Mapping[str, Mapping[str, Sequence[str]]]
#: an FX pass over the post-grad graph (``torch.fx.Graph``), run for its effect
GraphPass = Callable[[Any], object]


@dataclass(frozen=True, eq=False)
class Platform:
    """A family of devices with its own default priorities and extra passes.

    Attributes:
        name: lowercase letters, digits and ``_``, starting with a letter (``"cuda"``); what
            ``IR_PLATFORM`` names and what its entry point is called.
        detect: whether this process runs on the platform (called once a process, unless
            ``IR_PLATFORM`` decides; an exception counts as no and is logged).
        defaults: per selection mode (``"eager"``, ``"inductor"``), op name -> provider names
            tried after a user's list (`ir_dispatch.effective_priority`); ops it does not name
            default to ``native`` alone.
        passes: FX passes over the post-grad graph (a ``torch.fx.Graph``, changed in place)
            that ir-passes runs on this platform after its fusions and before lowering, so they
            see the IR ops; their code enters ir-passes' selection key.
        detect_rank: the order of detection: highest first (`DEFAULT_DETECT_RANK` unless
            given; ir-dispatch's accelerators 20 and 10, CPU 0).
        description: one line for ``ir-stack explain`` and ``python -m ir_dispatch``.
    """

    name: str
    detect: Callable[[], bool]
    defaults: DefaultTable = field(default_factory=dict)
    passes: Sequence[GraphPass] = ()
    detect_rank: int = DEFAULT_DETECT_RANK
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"Platform.name: got {self.name!r}, expected lowercase letters, digits and _ "
                "starting with a letter"
            )
        where = f"Platform {self.name!r}"
        if not callable(self.detect):
            raise TypeError(f"{where}: detect: got {self.detect!r}, expected a callable")
        object.__setattr__(self, "defaults", _checked_defaults(where, self.defaults))
        passes = tuple(self.passes) if isinstance(self.passes, Sequence) else None
        if passes is None or not all(callable(p) for p in passes):
            raise TypeError(
                f"{where}: passes: got {self.passes!r}, expected a sequence of callables taking "
                "a torch.fx.Graph"
            )
        object.__setattr__(self, "passes", passes)
        if isinstance(self.detect_rank, bool) or not isinstance(self.detect_rank, int):
            raise TypeError(f"{where}: detect_rank: got {self.detect_rank!r}, expected an int")
        if not isinstance(self.description, str):
            raise TypeError(f"{where}: description: got {self.description!r}, expected a str")

    @property
    def value(self) -> str:
        """The name (what the enum of platforms this class replaced gave as its value)."""
        return self.name

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Platform({self.name!r})"

    def default_priority(self, mode: str, op_name: str) -> list[str]:
        """The default list for `op_name` in `mode` (``["native"]`` where none is given)."""
        return list(self.defaults.get(mode, {}).get(op_name, ("native",)))

    def provider_names(self) -> set[str]:
        """Every provider name the defaults list."""
        return {p for table in self.defaults.values() for ps in table.values() for p in ps}


def _checked_defaults(where: str, defaults: Any) -> dict[str, dict[str, tuple[str, ...]]]:
    if not isinstance(defaults, Mapping):
        raise TypeError(f"{where}: defaults: got {defaults!r}, expected mode -> op -> providers")
    checked: dict[str, dict[str, tuple[str, ...]]] = {}
    for mode, table in defaults.items():
        if mode not in MODES:
            raise ValueError(f"{where}: defaults: unknown mode {mode!r}; expected {MODES}")
        if not isinstance(table, Mapping):
            raise TypeError(f"{where}: defaults[{mode!r}]: got {table!r}, expected op -> providers")
        checked[mode] = {}
        for op, providers in table.items():
            names = tuple(providers) if not isinstance(providers, str) else ()
            if not names or not all(isinstance(p, str) and p for p in names):
                raise ValueError(
                    f"{where}: defaults[{mode!r}][{op!r}]: got {providers!r}, expected a "
                    "non-empty list of provider names"
                )
            if len(set(names)) != len(names):
                raise ValueError(
                    f"{where}: defaults[{mode!r}][{op!r}]: provider listed twice in {list(names)}"
                )
            checked[mode][str(op)] = names
    return checked


def _accept(obj: object) -> Platform:
    if not isinstance(obj, Platform):
        raise TypeError(f"got {obj!r}, expected an ir_dispatch.Platform")
    return obj


def _builtins() -> tuple[Platform, ...]:
    from .builtin_platforms import BUILTIN

    return BUILTIN


PLATFORMS: PluginRegistry[Platform] = PluginRegistry(
    GROUP,
    "platform",
    accept=_accept,
    name_of=lambda p: p.name,
    builtins=_builtins,
    builtin_source="built into ir-dispatch",
)


def installed_platforms() -> list[Platform]:
    """Every installed platform (ir-dispatch's and the ``ir.platforms`` entry points')."""
    return PLATFORMS.items()


def platform_loads() -> list[PluginLoad]:
    """What happened to each ``ir.platforms`` entry point."""
    return PLATFORMS.loads()


class _Chosen:
    reason = ""


@functools.cache
def detect_platform() -> Platform:
    """The platform in force: the one ``IR_PLATFORM`` names, else the first detected (see
    the module's docstring). Kept for the process; ``detect_platform.cache_clear()`` makes
    the next call choose again."""
    forced = os.environ.get(PLATFORM_ENV, "").strip()
    if forced:
        platform = PLATFORMS.get(forced.lower(), origin=f"{PLATFORM_ENV}={forced!r}")
        _Chosen.reason = f"set by {PLATFORM_ENV}"
        return platform
    ordered = sorted(installed_platforms(), key=lambda p: (-p.detect_rank, p.name))
    for platform in ordered:
        try:
            found = bool(platform.detect())
        except Exception as error:
            logger.warning(
                "ir_dispatch: detecting platform %r failed (%s: %s); taken as absent",
                platform.name,
                type(error).__name__,
                error,
            )
            continue
        if found:
            _Chosen.reason = "detected"
            return platform
    _Chosen.reason = "no platform detected"  # CPU detects always; only a test removes it
    return PLATFORMS.get("cpu")


def platform_origin() -> str:
    """The platform in force, why (set by ``IR_PLATFORM`` or detected) and where it and its
    defaults come from: ``cuda (detected; built into ir-dispatch)``."""
    platform = detect_platform()
    return f"{platform.name} ({_Chosen.reason}; {PLATFORMS.source(platform.name)})"
