"""`Impl`: one provider's implementation of an op."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Impl:
    """An implementation of an op by one provider.

    Attributes:
        provider: the provider's name (``"native"`` for the op's own semantics).
        fn: the function; its parameters are exactly the native function's.
        supported: whether it can run on this platform at all (decided once, at registration).
        supports_args: optional predicate over the call's arguments (same parameters as the op);
            it must decide on dtypes, layouts and static sizes only, never on the number of tokens.
        inplace: the function may overwrite its activation inputs and return them.
        batch_invariant: a row's result never depends on the other rows of the batch.
        op_name: the op this implements.
        unsupported_reason: why ``supported`` is False (no GPU, no toolkit, a failed build),
            shown by the dispatcher's explanations.
    """

    provider: str
    fn: Callable[..., Any]
    supported: bool = True
    supports_args: Callable[..., bool] | None = None
    inplace: bool = False
    batch_invariant: bool = False
    op_name: str = ""
    unsupported_reason: str = ""

    def accepts(self, args: tuple[Any, ...]) -> bool:
        """Whether `supports_args` (if any) accepts these normalized positional arguments."""
        return self.supports_args is None or bool(self.supports_args(*args))
