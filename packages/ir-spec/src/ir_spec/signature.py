"""Signature rules shared by ops, implementations and `supports_args` predicates."""

from __future__ import annotations

import inspect
import keyword
import re
import typing
from collections.abc import Callable
from typing import Any

import torch

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: Overload names torch reserves or that ir-spec uses itself; an op may not be called this.
RESERVED_OP_NAMES = frozenset({"default", "maybe_inplace", "ops"})


def is_reserved_parameter(name: str) -> bool:
    """Whether an op may not take a parameter of this name: ``self`` and names that start and
    end with ``_``, which the generated entry points (`fast_path`) use for themselves."""
    return name == "self" or (len(name) > 2 and name.startswith("_") and name.endswith("_"))


def check_identifier(kind: str, name: object) -> str:
    """Return `name` if it is a valid identifier, else raise `ValueError` naming `kind`."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name) or keyword.iskeyword(name):
        raise ValueError(
            f"invalid {kind} name {name!r}: expected a Python identifier "
            "(letters, digits and '_', not starting with a digit, not a keyword)"
        )
    return name


def native_parameters(fn: Callable[..., Any], op_name: str) -> list[inspect.Parameter]:
    """The parameters of a native function, refusing what the op schema cannot express."""
    try:
        sig = inspect.signature(fn, eval_str=True)
    except (TypeError, ValueError) as err:
        raise TypeError(f"op {op_name!r}: cannot read the signature of {fn!r}: {err}") from err
    params = list(sig.parameters.values())
    for p in params:
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(
                f"op {op_name!r}: parameter '{p.name}' is keyword-only; "
                "ops take positional-or-keyword parameters only"
            )
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise TypeError(f"op {op_name!r}: variadic parameter '{p.name}' is not allowed")
        if p.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise TypeError(
                f"op {op_name!r}: parameter '{p.name}' is positional-only; "
                "ops take positional-or-keyword parameters only"
            )
        if p.annotation is inspect.Parameter.empty:
            raise TypeError(f"op {op_name!r}: parameter '{p.name}' has no type annotation")
        if is_reserved_parameter(p.name):
            raise ValueError(
                f"op {op_name!r}: parameter name '{p.name}' is reserved (the op's generated entry "
                "points use it); rename the parameter"
            )
    if sig.return_annotation is inspect.Signature.empty:
        raise TypeError(f"op {op_name!r}: the native function has no return annotation")
    return params


def _shape(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    sig = inspect.signature(fn, eval_str=True)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def check_same_parameters(
    op_name: str, what: str, native: Callable[..., Any], other: Callable[..., Any]
) -> None:
    """Refuse `other` unless its parameters match `native`: names, order, kinds and defaults."""
    expected, got = _shape(native), _shape(other)
    if expected == got:
        return

    def fmt(shape: list[tuple[str, Any, Any]]) -> str:
        items = []
        for name, kind, default in shape:
            item = name if default is inspect.Parameter.empty else f"{name}={default!r}"
            if kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:
                item += f" [{kind.description}]"
            items.append(item)
        return "(" + ", ".join(items) + ")"

    raise TypeError(
        f"op {op_name!r}: {what} has parameters {fmt(got)}, "
        f"expected the native function's {fmt(expected)} (same names, order and defaults)"
    )


def is_tensor_annotation(annotation: Any) -> bool:
    """True for `Tensor` exactly (not `Tensor | None`)."""
    return annotation is torch.Tensor


def tensor_return_count(fn: Callable[..., Any]) -> int | None:
    """Number of tensors the function returns per its annotation, or None if not all tensors."""
    ret = inspect.signature(fn, eval_str=True).return_annotation
    if ret is torch.Tensor:
        return 1
    if typing.get_origin(ret) is tuple:
        items = typing.get_args(ret)
        if items and all(a is torch.Tensor for a in items):
            return len(items)
    return None
