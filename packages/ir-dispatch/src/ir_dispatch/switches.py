"""Boolean switches, from environment variables and configuration files alike: one parser.

``1``, ``true``, ``yes`` and ``on`` turn a switch on, ``0``, ``false``, ``no`` and ``off`` turn
it off (any case, surrounding blanks ignored); the booleans and the integers 1 and 0 stand for
themselves. Anything else is refused with an error that names where the value came from, so
that ``IR_BATCH_INVARIANT=off`` or ``fuse = "off"`` cannot count as on.
"""

import os
from collections.abc import Mapping

_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"0", "false", "no", "off"})
ACCEPTED = "1/0, true/false, yes/no, on/off (any case)"


def parse_switch(value: object, origin: str) -> bool:
    """`value` as a switch; `origin` (a variable or a field and its file) names it in the
    `ValueError` raised for anything but the accepted spellings."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _ON:
            return True
        if text in _OFF:
            return False
    raise ValueError(f"{origin}: got {value!r}, expected one of {ACCEPTED}")


def env_switch(name: str, default: bool = False, environ: Mapping[str, str] | None = None) -> bool:
    """The switch in environment variable `name`; `default` where it is unset or blank."""
    raw = (os.environ if environ is None else environ).get(name, "")
    return default if not raw.strip() else parse_switch(raw, name)
