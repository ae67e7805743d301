"""The ops x providers table printed by ``python -m ir_dispatch``."""

import argparse
import sys
from collections.abc import Iterable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ir_spec import ops

from .cli import FLAG, split_priority_args
from .discovery import provider_loads
from .names import resolve_op
from .platforms import detect_platform, platform_loads, platform_origin
from .selection import Verdict, explain, why_unsupported
from .state import current_mode, priority, read_environment


def providers_table(op_names: Iterable[str] | None = None) -> Table:
    """Each op (those of `op_names`, default all), then its providers: place in the op's
    effective priority list and verdict (the one used, or why not). Three columns, the op
    names' the only wide one, so that the verdicts keep room to wrap in an 80-column
    terminal. An unknown name raises `ValueError` listing the known ops."""
    table = Table(
        title=f"ir ops on {detect_platform().value} ({current_mode()} mode)",
        caption="#: place in the op's effective priority list (-: not in it)",
    )
    table.add_column("op, then its providers", no_wrap=True)
    table.add_column("#", justify="right")
    table.add_column("verdict")
    chosen = list(ops) if op_names is None else [resolve_op(name) for name in op_names]
    for op in sorted(chosen, key=lambda o: o.name):
        explanation = explain(op)
        listed = [v.provider for v in explanation]
        first_eligible = next(
            (v.provider for v in explanation if v.verdict is Verdict.ELIGIBLE), "native"
        )
        table.add_row(Text(op.name, style="bold"), "", "")
        for provider in listed + [p for p in op.impls if p not in listed]:
            impl = op.impls.get(provider)
            verdict = next((v for v in explanation if v.provider == provider), None)
            if verdict is None:
                why = "not listed"
                if impl is not None and not impl.supported:
                    why = f"not supported here ({why_unsupported(impl)}); not listed"
            elif provider == first_eligible:
                why = "used, unless its supports_args rejects the call"
            else:
                why = str(verdict).split(": ", 1)[1]
            position = str(listed.index(provider) + 1) if provider in listed else "-"
            table.add_row(f"  {provider}", position, why)
        table.add_section()
    return table


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ir_dispatch",
        description="Which implementation each ir op would use here, and why: the providers "
        "discovered, then each op's providers with their place in its effective priority list "
        "and their verdict.",
        epilog=f"Priorities: {FLAG}.<op>=<provider>,<provider>,... (any number, shown in "
        "force) and the IR_OP_PRIORITY environment variable, as for any program.",
    )
    parser.add_argument("ops", nargs="*", metavar="OP", help="only these ops (default: all)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Print the providers discovered and the ops x providers table (``-h`` for the options)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        read_environment()  # IR_OP_PRIORITY and the switches: a malformed one is named
        flags, rest = split_priority_args(argv)
        args = parser.parse_args(rest)
        for name in args.ops:
            resolve_op(name)
    except ValueError as error:
        parser.error(str(error))
    console = Console()
    loads = provider_loads()
    if loads:
        for load in loads:
            console.print(
                f"provider entry point {load.name!r} ({load.value}): {load.status}"
                + (f" - {load.error}" if load.error else "")
            )
    else:
        console.print("no ir.providers entry points installed")
    for plugin in platform_loads():
        if plugin.status != "loaded":
            console.print(
                f"platform entry point {plugin.name!r} ({plugin.value}): {plugin.status} - "
                f"{plugin.error}"
            )
    console.print(f"platform: {platform_origin()}")
    with priority(flags):
        console.print(providers_table(args.ops or None))
    return 0
