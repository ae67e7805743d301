"""The op registry and the `ir_spec.ops` namespace."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .op import IrOp


def add(op: IrOp) -> None:
    """Record a newly declared op (the caller has checked the name is free)."""
    _OPS[op.name] = op


def lookup(name: str) -> IrOp | None:
    """The op called `name`, or None."""
    return _OPS.get(name)


class OpNamespace:
    """`ir_spec.ops`: attribute access and iteration over every declared op."""

    def __getattr__(self, name: str) -> IrOp:
        # Reached only for a name that is not an op: the ops are the instance's attributes.
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"ir_spec.ops has no op {name!r}; known ops: {', '.join(sorted(_OPS)) or '(none)'}"
        )

    def __iter__(self) -> Iterator[IrOp]:
        return iter(list(_OPS.values()))

    def __len__(self) -> int:
        return len(_OPS)

    def __contains__(self, name: object) -> bool:
        return name in _OPS

    def __dir__(self) -> list[str]:
        return sorted(_OPS)

    def __repr__(self) -> str:
        return f"<ir_spec.ops: {', '.join(sorted(_OPS))}>"

    def __reduce__(self) -> str:
        # the one namespace, pickled by reference (as ``ir_spec.registry.ops``)
        return "ops"


ops = OpNamespace()
#: The declared ops by name. It is `ops`' own attribute dictionary, so that ``ops.<name>`` in a
#: model's forward is a plain lookup (`OpNamespace.__getattr__` would run only after a failed
#: normal lookup, which costs more than the lookup itself).
_OPS: dict[str, IrOp] = vars(ops)
