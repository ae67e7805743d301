"""`Config`: priorities and pass switches in one object, from code, a TOML file, the
environment and the command line (later sources override earlier ones, code last).

Every value is checked against the type of its field: from code, a value of another type
raises `TypeError`; from a TOML file, `ValueError` naming the file and the field. Switches in a
file take what ``IR_*`` switches take in the environment (`ir_dispatch.parse_switch`:
``true``/``false``, ``"on"``/``"off"``, ``"yes"``/``"no"``, 1/0), never a string that counts as
on whatever it says.
"""

import dataclasses
import enum
import os
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import ir_dispatch
from ir_dispatch.cli import ENV as PRIORITY_ENV
from ir_dispatch.names import resolve_op, validate_priority
from ir_passes import PassConfig
from ir_piecewise import CompilationConfig
from ir_spec import IrOp

from .pass_flags import split_pass_args, with_settings

CONFIG_ENV = "IR_STACK_CONFIG"
_SECTIONS = ("priority", "passes", "piecewise")


@dataclass(frozen=True)
class Config:
    """Everything ``ir_stack.compile`` needs.

    Attributes:
        priority: op name (or `IrOp`) -> provider list (prepended to the platform defaults).
        passes: the ir-passes configuration: optimization level, fusion switches and token
            thresholds (``[passes]`` in TOML; ``-O2``, ``--pass.<field>=<value>`` flags).
        piecewise: piecewise compilation (splitting, sizes, CUDA graphs, cache); None compiles
            the whole model as one graph with ``ir_passes.compile``.
    """

    priority: Mapping[str, list[str]] = field(default_factory=dict)
    passes: PassConfig = field(default_factory=PassConfig)
    piecewise: CompilationConfig | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "priority", _checked_priority(self.priority))
        if not isinstance(self.passes, PassConfig):
            raise TypeError(f"Config.passes: got {self.passes!r}, expected an ir_passes.PassConfig")
        _check_fields(self.passes, "Config.passes")
        if self.piecewise is not None:
            if not isinstance(self.piecewise, CompilationConfig):
                raise TypeError(
                    f"Config.piecewise: got {self.piecewise!r}, expected an "
                    "ir_piecewise.CompilationConfig or None"
                )
            _check_fields(self.piecewise, "Config.piecewise")

    @classmethod
    def from_toml(cls, path: str | Path) -> "Config":
        """Read ``[priority]`` (op = [providers]), ``[passes]`` (PassConfig fields, type-checked;
        a threshold of ``"none"`` for no limit) and ``[piecewise]`` (CompilationConfig fields;
        ``cudagraph_mode`` by name).

        A file that cannot be read raises `OSError`; one that is not TOML, or holds a value
        of the wrong type, `ValueError` naming the file (and the line or the field)."""
        return cls._from_file(path, origin=str(path))

    @classmethod
    def _from_file(cls, path: str | Path, *, origin: str) -> "Config":
        raw = Path(path).read_bytes()
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            # the decode error's message ends with "(at line L, column C)"
            raise ValueError(f"{origin}: not valid TOML: {err}") from None
        return cls().merged(data, origin=origin)

    def merged(self, data: Mapping[str, Any], *, origin: str) -> "Config":
        """A copy with the ``priority``, ``passes`` and ``piecewise`` tables of `data` applied."""
        unknown = set(data) - set(_SECTIONS)
        if unknown:
            raise ValueError(
                f"{origin}: unknown sections {sorted(unknown)}; expected priority, passes, "
                "piecewise"
            )
        for section in _SECTIONS:
            if section in data and not isinstance(data[section], Mapping):
                raise ValueError(
                    f"{origin}: {section}: got {data[section]!r}, expected a table ([{section}])"
                )
        priority = dict(self.priority)
        for op, providers in data.get("priority", {}).items():
            if not isinstance(providers, list) or not all(isinstance(p, str) for p in providers):
                raise ValueError(
                    f"{origin}: priority.{op}: got {providers!r}, expected a list of provider names"
                )
            try:
                priority[op] = list(validate_priority(op, providers))
            except ValueError as err:
                raise ValueError(f"{origin}: {err}") from None
        piecewise = self.piecewise
        if "piecewise" in data:
            piecewise = _piecewise_from(dict(data["piecewise"]), piecewise, origin)
        passes = with_settings(self.passes, dict(data.get("passes", {})), origin=origin)
        return Config(priority, passes, piecewise)

    @classmethod
    def load(cls, argv: Sequence[str] = (), env: Mapping[str, str] | None = None) -> "Config":
        """TOML file named by ``IR_STACK_CONFIG``, then ``IR_OP_PRIORITY``, then
        ``--ir-op-priority.<op>=...`` flags in `argv`; the passes from the TOML file, then
        ``-O<level>`` and ``--pass.<field>=<value>`` flags (`pass_flags`).

        A missing, unreadable or malformed file raises `ValueError` naming the variable."""
        env = os.environ if env is None else env
        config = cls()
        source = env.get(CONFIG_ENV)
        if source:
            origin = f"{CONFIG_ENV}={source!r}"
            try:
                config = cls._from_file(source, origin=origin)
            except OSError as err:
                raise ValueError(f"{origin}: cannot read the file: {err.strerror}") from None
        priority = dict(config.priority)
        if env.get(PRIORITY_ENV):
            priority.update(ir_dispatch.parse_priority_env(env[PRIORITY_ENV]))
        priority.update(ir_dispatch.parse_priority_args(argv))
        flags = split_pass_args(argv)[0]
        passes = with_settings(config.passes, flags, origin="command line", text=True)
        return Config(priority, passes, config.piecewise)

    def apply(self) -> None:
        """Make this configuration's priorities the process-wide ones."""
        ir_dispatch.set_priority({op: list(p) for op, p in self.priority.items()})


def _checked_priority(priority: Any) -> dict[str, list[str]]:
    if not isinstance(priority, Mapping):
        raise TypeError(
            f"Config.priority: got {priority!r}, expected a mapping op name -> list of "
            "provider names"
        )
    checked: dict[str, list[str]] = {}
    for op, providers in priority.items():
        if not isinstance(op, str | IrOp):
            raise TypeError(f"Config.priority: got the key {op!r}, expected an op name or an IrOp")
        name = resolve_op(op).name if isinstance(op, IrOp) else op
        if not isinstance(providers, list | tuple) or not all(
            isinstance(p, str) for p in providers
        ):
            raise TypeError(
                f"Config.priority[{name!r}]: got {providers!r}, expected a list of provider names"
            )
        checked[name] = list(providers)
    return checked


def _options(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _accepts(value: Any, hint: Any) -> bool:
    """Whether `value` is of type `hint` (the field types of the configuration dataclasses)."""
    for option in _options(hint):
        origin = typing.get_origin(option)
        if option is type(None):
            ok = value is None
        elif option is bool:
            ok = isinstance(value, bool)
        elif option is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif origin is tuple:
            item = typing.get_args(option)[0]
            ok = isinstance(value, tuple) and all(_accepts(v, item) for v in value)
        elif origin is Mapping:
            ok = isinstance(value, Mapping) and all(isinstance(k, str) for k in value)
        elif origin is Literal:
            ok = any(value == a and type(value) is type(a) for a in typing.get_args(option))
        else:
            ok = isinstance(option, type) and isinstance(value, option)
        if ok:
            return True
    return False


def _describe(hint: Any) -> str:
    """What a value of type `hint` is, in words, for error messages."""
    options = list(_options(hint))
    words = []
    if str in options and Path in options:
        options.remove(Path)
        options[options.index(str)] = Path
    for option in options:
        origin = typing.get_origin(option)
        if option is type(None):
            words.append("none")
        elif option is bool:
            words.append("a bool")
        elif option is int:
            words.append("an int")
        elif option is str:
            words.append("a str")
        elif option is Path:
            words.append("a path (str)")
        elif origin is tuple:
            item = typing.get_args(option)[0]
            words.append("a list of ints" if item is int else "a list of names")
        elif origin is Mapping:
            words.append("a table of names to values")
        elif origin is Literal:
            words.append(" or ".join(repr(a) for a in typing.get_args(option)))
        elif isinstance(option, type) and issubclass(option, enum.Enum):
            words.append(f"one of {list(option.__members__)}")
        else:
            words.append(
                f"a {getattr(option, '__module__', '')}.{getattr(option, '__name__', option)}"
            )
    return " or ".join(words)


def _check_fields(obj: Any, where: str) -> None:
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if not _accepts(value, hints[f.name]):
            raise TypeError(f"{where}.{f.name}: got {value!r}, expected {_describe(hints[f.name])}")


def _from_toml(value: Any, hint: Any, where: str) -> Any:
    """A TOML value as the field of type `hint` takes it: switches parsed, lists as tuples,
    enums by name; `ValueError` naming `where` for anything else."""
    options = _options(hint)
    if bool in options:
        return ir_dispatch.parse_switch(value, where)
    enums = [o for o in options if isinstance(o, type) and issubclass(o, enum.Enum)]
    if enums and isinstance(value, enums[0]):  # a mapping given in code may hold the member
        return value
    if enums:
        name = str(value).upper()
        if name not in enums[0].__members__:
            raise ValueError(f"{where}: got {value!r}, expected {_describe(hint)}")
        return enums[0][name]
    if isinstance(value, list):
        value = tuple(value)
    if not _accepts(value, hint):
        shown = list(value) if isinstance(value, tuple) else value
        raise ValueError(f"{where}: got {shown!r}, expected {_describe(hint)}")
    return value


def _piecewise_from(
    table: dict[str, Any], base: CompilationConfig | None, origin: str
) -> CompilationConfig:
    hints = typing.get_type_hints(CompilationConfig)
    fields = set(hints) - {"passes"}
    bad = set(table) - fields
    if bad:
        raise ValueError(
            f"{origin}: unknown piecewise settings {sorted(bad)}; expected {sorted(fields)}"
        )
    values = {
        name: _from_toml(value, hints[name], f"{origin}: piecewise.{name}")
        for name, value in table.items()
    }
    try:
        return dataclasses.replace(base or CompilationConfig(), **values)
    except ValueError as err:  # its own checks name the field first
        raise ValueError(f"{origin}: piecewise.{err}") from None
