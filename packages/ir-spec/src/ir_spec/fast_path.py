"""Generated eager entry points: an op's ``__call__`` and ``maybe_inplace`` with its own signature.

Generating them per op lets Python itself bind positional and keyword arguments and fill in
defaults, and inlines the dispatch key, so a cached call costs a few attribute reads and one
dictionary lookup on top of the implementation. The logic is the same as
`IrOp._execute`: trace through the torch op when compiling or under a dispatch mode; else look
the (argument-checked) choice up by dispatch key, asking `IrOp.choose` on a miss.
"""

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from .dispatcher import _Hook

if TYPE_CHECKING:
    from .op import IrOp

_TEMPLATE = """
def key({names}):
    return {key}

def __call__(self, {params}):
    if _is_compiling() or _depth():
        return self._default_overload({names})
    try:
        impl = (self.choices if _hook.op_caches else _hook.current.choice_cache(self))[{key}]
    except Exception:
        impl = self.choose(({names},))
    if impl.inplace:
        return impl.fn({cloned})
    return impl.fn({names})

def maybe_inplace(self, {params}):
    if _is_compiling() or _depth():
        return self._maybe_inplace_overload({names})
    try:
        impl = (self.choices if _hook.op_caches else _hook.current.choice_cache(self))[{key}]
    except Exception:
        impl = self.choose(({names},))
    return impl.fn({names})
"""


def _tensor_key(name: str) -> str:
    return f"{name}.dtype, {name}.device, {name}.dim(), {name}.shape[-1], {name}.is_contiguous()"


# A required tensor's summary is spliced into the key tuple (one flat tuple hashes faster than
# nested ones); an optional tensor's stays a nested tuple, or None.


def generic_key_expression(native: Callable[..., Any]) -> str:
    """The generic dispatch key: per tensor its dtype, device, rank, last size and contiguity;
    every other argument as it is."""
    parts = []
    for p in inspect.signature(native, eval_str=True).parameters.values():
        if p.annotation is torch.Tensor:
            parts.append(_tensor_key(p.name))
        elif p.annotation == (torch.Tensor | None):
            parts.append(f"(None if {p.name} is None else ({_tensor_key(p.name)}))")
        else:
            parts.append(p.name)
    return f"({', '.join(parts)},)"


def build(
    op: "IrOp", *, custom_key: bool
) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """Generate ``(key, __call__, maybe_inplace)`` for `op`.

    `key` is the generic dispatch key (or a call of ``op._key`` when the op registered its own);
    the other two are unbound functions taking ``self``.
    """
    params = list(op.signature.parameters.values())
    names = [p.name for p in params]
    namespace: dict[str, Any] = {
        "_is_compiling": torch.compiler.is_compiling,
        "_depth": torch._C._len_torch_dispatch_stack,
        "_hook": _Hook,
    }
    declared = []
    for i, p in enumerate(params):
        if p.default is inspect.Parameter.empty:
            declared.append(p.name)
        else:
            namespace[f"_default_{i}"] = p.default
            declared.append(f"{p.name}=_default_{i}")
    joined = ", ".join(names)
    key = generic_key_expression(op.native)
    if custom_key:
        namespace["_custom_key"] = op._key
        key = f"_custom_key({joined})"
    cloned = ", ".join(f"{n}.clone()" if n in op.activations else n for n in names)
    source = _TEMPLATE.format(params=", ".join(declared), names=joined, key=key, cloned=cloned)
    exec(compile(source, f"<ir_spec fast path for {op.name}>", "exec"), namespace)
    return namespace["key"], namespace["__call__"], namespace["maybe_inplace"]
