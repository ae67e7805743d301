"""Validation of op and provider names against what is declared and registered."""

from collections.abc import Iterable

from ir_spec import IrOp, ops

from .defaults import default_provider_names
from .discovery import ensure_providers_loaded
from .installation import require_installed


def resolve_op(op: IrOp | str) -> IrOp:
    """The `IrOp` for an op or its name; unknown names raise `ValueError` listing the ops."""
    require_installed()
    if isinstance(op, IrOp):
        return op
    if isinstance(op, str) and op in ops:
        return getattr(ops, op)  # type: ignore[no-any-return]
    known = ", ".join(sorted(o.name for o in ops))
    raise ValueError(f"unknown op {op!r}; known ops: {known}")


def known_providers() -> set[str]:
    """Every provider name: registered for some op, or named by a platform default."""
    ensure_providers_loaded()
    names = {"native"}
    for op in ops:
        names.update(op.impls)
    names.update(default_provider_names())
    return names


def validate_priority(op_name: str, providers: Iterable[str]) -> tuple[str, ...]:
    """Check one op's list: a known op, known providers, no repeats, not empty."""
    resolve_op(op_name)
    if isinstance(providers, str):
        raise ValueError(
            f"priority for {op_name!r}: got the string {providers!r}, expected a list of "
            "provider names"
        )
    names = tuple(providers)
    if not names:
        raise ValueError(f"priority for {op_name!r}: the list of providers is empty")
    known = known_providers()
    for name in names:
        if not isinstance(name, str) or name not in known:
            raise ValueError(
                f"priority for {op_name!r}: unknown provider {name!r}; known providers: "
                f"{', '.join(sorted(known))}"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"priority for {op_name!r}: provider listed twice in {list(names)}")
    return names
