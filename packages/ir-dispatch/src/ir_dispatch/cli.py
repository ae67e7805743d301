"""Priorities from the command line (``--ir-op-priority.<op>=<p1>,<p2>``) and the environment
(``IR_OP_PRIORITY="<op>=<p1>,<p2>;<op>=..."``)."""

from collections.abc import Sequence

from .names import validate_priority

FLAG = "--ir-op-priority"
ENV = "IR_OP_PRIORITY"


def _providers(text: str, origin: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise ValueError(f"{origin}: expected a comma-separated list of provider names")
    return items


def split_priority_args(argv: Sequence[str]) -> tuple[dict[str, list[str]], list[str]]:
    """The priorities given as ``--ir-op-priority.<op>=<p1>,<p2>`` (or ``... <op> <p1>,<p2>`` as
    two arguments) in `argv`, names validated, and the other arguments in their order."""
    result: dict[str, list[str]] = {}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg != FLAG and not arg.startswith(FLAG + ".") and not arg.startswith(FLAG + "="):
            rest.append(arg)
            continue
        body = arg[len(FLAG) :]
        if not body.startswith("."):
            raise ValueError(
                f"{arg!r}: expected {FLAG}.<op>=<provider>,<provider>,... (the op name after a dot)"
            )
        body = body[1:]
        if "=" in body:
            op_name, _, value = body.partition("=")
        else:
            if i >= len(argv):
                raise ValueError(f"{arg!r}: missing the list of providers")
            op_name, value = body, argv[i]
            i += 1
        op_name = op_name.strip()
        if op_name in result:
            raise ValueError(f"{arg!r}: priority for {op_name!r} given twice")
        result[op_name] = list(validate_priority(op_name, _providers(value, repr(arg))))
    return result, rest


def parse_priority_args(argv: Sequence[str]) -> dict[str, list[str]]:
    """The priorities given as ``--ir-op-priority.<op>=<p1>,<p2>`` (or ``... <op> <p1>,<p2>`` as
    two arguments) in `argv`; other arguments are ignored. Names are validated."""
    return split_priority_args(argv)[0]


def parse_priority_env(value: str) -> dict[str, list[str]]:
    """Parse the ``IR_OP_PRIORITY`` format ``"<op>=<p1>,<p2>;<op>=..."`` (names validated)."""
    result: dict[str, list[str]] = {}
    for entry in value.split(";"):
        if not entry.strip():
            continue
        op_name, sep, providers = entry.partition("=")
        op_name = op_name.strip()
        if not sep or not op_name:
            raise ValueError(
                f"{ENV}: entry {entry.strip()!r} is not of the form <op>=<provider>,<provider>"
            )
        if op_name in result:
            raise ValueError(f"{ENV}: priority for {op_name!r} given twice")
        origin = f"{ENV} entry {entry.strip()!r}"
        try:
            result[op_name] = list(validate_priority(op_name, _providers(providers, origin)))
        except ValueError as error:
            message = str(error)
            raise ValueError(message if message.startswith(ENV) else f"{ENV}: {message}") from None
    return result
