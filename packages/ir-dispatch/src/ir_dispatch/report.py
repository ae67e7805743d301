"""The ops x providers table printed by ``python -m ir_dispatch``."""

from rich.console import Console
from rich.table import Table

from ir_spec import ops

from .discovery import provider_loads
from .platforms import detect_platform
from .selection import Verdict, explain
from .state import current_mode


def providers_table() -> Table:
    """One row per (op, provider): registered, supported here, priority position, verdict."""
    table = Table(title=f"ir ops on {detect_platform().value} ({current_mode()} mode)")
    table.add_column("op", no_wrap=True)
    table.add_column("provider", no_wrap=True)
    for column in ("registered", "supported here", "position", "why (not)"):
        table.add_column(column)
    for op in sorted(ops, key=lambda o: o.name):
        explanation = explain(op)
        listed = [v.provider for v in explanation]
        first_eligible = next(
            (v.provider for v in explanation if v.verdict is Verdict.ELIGIBLE), "native"
        )
        names = listed + [p for p in op.impls if p not in listed]
        for i, provider in enumerate(names):
            impl = op.impls.get(provider)
            verdict = next((v for v in explanation if v.provider == provider), None)
            if verdict is None:
                why = "not in the priority list"
                if impl is not None and not impl.supported:
                    why = "not supported on this platform; not in the priority list"
            elif provider == first_eligible:
                why = "used (unless its supports_args rejects the call)"
            else:
                why = str(verdict).split(": ", 1)[1]
            table.add_row(
                op.name if i == 0 else "",
                provider,
                "yes" if impl is not None else "no",
                "-" if impl is None else ("yes" if impl.supported else "no"),
                str(listed.index(provider) + 1) if provider in listed else "-",
                why,
            )
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
