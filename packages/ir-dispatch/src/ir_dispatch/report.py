"""The ops x providers table printed by ``python -m ir_dispatch``."""

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ir_spec import ops

from .discovery import provider_loads
from .platforms import detect_platform
from .selection import Verdict, explain
from .state import current_mode


def providers_table() -> Table:
    """Each op, then its providers: place in the op's effective priority list and verdict
    (the one used, or why not). Three columns, the op names' the only wide one, so that the
    verdicts keep room to wrap in an 80-column terminal."""
    table = Table(
        title=f"ir ops on {detect_platform().value} ({current_mode()} mode)",
        caption="#: place in the op's effective priority list (-: not in it)",
    )
    table.add_column("op, then its providers", no_wrap=True)
    table.add_column("#", justify="right")
    table.add_column("verdict")
    for op in sorted(ops, key=lambda o: o.name):
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
                    why = "not supported here; not listed"
            elif provider == first_eligible:
                why = "used, unless its supports_args rejects the call"
            else:
                why = str(verdict).split(": ", 1)[1]
            position = str(listed.index(provider) + 1) if provider in listed else "-"
            table.add_row(f"  {provider}", position, why)
        table.add_section()
    return table


def main() -> int:
    """Print the providers discovered and the ops x providers table."""
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
    console.print(providers_table())
    return 0
