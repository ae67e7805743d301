"""The pass configuration from the command line and the TOML ``[passes]`` table.

Flags: ``-O0`` .. ``-O3`` set ``PassConfig.level``; ``--pass.<field>=<value>`` sets any other
field (``--pass.enable_qk_norm_rope_fusion=true``, ``--pass.rope_kvcache_max_tokens=128``,
``--pass.norm_quant_max_tokens=none``). The TOML table takes the same fields with TOML
values; a threshold of ``"none"`` means no limit. ``token_range`` is not a setting: ir-piecewise
sets it per compile range.
"""

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

import ir_dispatch
from ir_passes import PassConfig

#: fields a user may set (``token_range`` is ir-piecewise's, per compile range)
SETTABLE = tuple(f.name for f in dataclasses.fields(PassConfig) if f.name != "token_range")
_TYPES: dict[str, Any] = {f.name: f.type for f in dataclasses.fields(PassConfig)}
_LEVEL_FLAG = re.compile(r"-O(\d)")
_PASS_FLAG = "--pass."


def parse_value(field: str, value: Any, *, origin: str, text: bool = False) -> Any:
    """`value` as PassConfig field `field` takes it: a bool for the switches, an int for
    ``level`` and the thresholds, a str for ``debug_dir``, and "none" for None where the field
    is optional. With `text` (a flag's value) a bool or int may be written as text (``true``,
    ``off``, ``128``); otherwise (a TOML value) it must have that type. Raises `ValueError`
    naming the field, the value and what was expected."""
    if field not in SETTABLE:
        raise ValueError(
            f"{origin}: unknown pass setting {field!r}; expected one of {', '.join(SETTABLE)}"
        )
    kind = _TYPES[field]
    optional = kind in (bool | None, int | None, str | None)
    if isinstance(value, str) and value.strip().lower() == "none":
        if optional:
            return None
        raise ValueError(f"{origin}: passes.{field}: got {value!r}, expected a value (not none)")
    if kind in (bool, bool | None):
        # one parser for every switch (TOML values, flags, environment variables)
        return ir_dispatch.parse_switch(value, f"{origin}: passes.{field}")
    if kind in (int, int | None):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if text and isinstance(value, str) and re.fullmatch(r"\s*\d+\s*", value):
            return int(value)
        raise ValueError(
            f"{origin}: passes.{field}: got {value!r}, expected an integer"
            + (" (or none: no limit)" if optional else "")
        )
    if not isinstance(value, str):
        raise ValueError(
            f"{origin}: passes.{field}: got {value!r}, expected a str"
            + (" or none" if optional else "")
        )
    return value


def with_settings(
    base: PassConfig, settings: Mapping[str, Any], *, origin: str, text: bool = False
) -> PassConfig:
    """`base` with `settings` (field -> value as `parse_value` takes it, `text` for flags'
    values) applied; errors name `origin` (a file or "command line")."""
    parsed = {
        name: parse_value(name, value, origin=origin, text=text) for name, value in settings.items()
    }
    try:
        return dataclasses.replace(base, **parsed)
    except ValueError as error:
        raise ValueError(f"{origin}: {error}") from None


def split_pass_args(argv: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """The pass settings that ``-O<level>`` and ``--pass.<field>=<value>`` flags in `argv` make
    (field -> text), and the other arguments."""
    settings: dict[str, str] = {}
    rest: list[str] = []
    for arg in argv:
        level = _LEVEL_FLAG.fullmatch(arg)
        if level is not None:
            settings["level"] = level.group(1)
        elif arg.startswith(_PASS_FLAG):
            field, sep, value = arg[len(_PASS_FLAG) :].partition("=")
            if not sep:
                raise ValueError(
                    f"command line: {arg!r} has no value; expected {_PASS_FLAG}{field}=<value>"
                )
            settings[field] = value
        else:
            rest.append(arg)
    return settings, rest
