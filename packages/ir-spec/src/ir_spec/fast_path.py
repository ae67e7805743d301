"""Generated eager entry points: an op's ``__call__`` and ``maybe_inplace`` with its own signature.

Generating them per op lets Python itself bind positional and keyword arguments and fill in
defaults, and inlines the dispatch key, so a cached call costs a few attribute reads and one
dictionary lookup on top of the implementation. The logic is the same as
`IrOp._execute`: trace through the torch op when compiling or under a dispatch mode; else look
the (argument-checked) choice up by dispatch key, asking `IrOp.choose` on a miss, and run it,
unless grad mode is on and a tensor argument requires grad: that call takes the torch op, which
carries the gradient (`autograd`). Both entry points first try the op's last choice behind a
tensor guard (`last_choice`), which spares building the key when the arguments look like the
previous call's. ``maybe_inplace`` bumps the written arguments' version counters before an
in-place implementation runs, as torch's in-place ops do, except under inference mode; an op
that declares mutated parameters (a cache it stores into) bumps theirs on every call.
"""

import inspect
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from . import last_choice
from .dispatch_key import CONTIGUOUS, strided_row_layout
from .dispatcher import _Hook

if TYPE_CHECKING:
    from .op import IrOp

_CHOOSE_BY_KEY = """
    try:
        impl = (self.choices if _hook.op_caches else _hook.current.choice_cache(self))[{key}]
    except Exception:
        impl = self.choose(({names},))"""

# The same, after asking the last choice's guard; a miss remembers the new choice (bounded).
# Both set `grad_args`, whether a tensor argument requires grad: the guard checks each tensor's
# requires_grad, so a hit reuses the flag remembered with the choice.
_CHOOSE_BY_LAST_OR_KEY = (
    """
    impl = None
    memo = self._last_choice
    if memo is not None and _hook.op_caches:
        try:
            if memo[1] == ({others}) and memo[0].check({guarded}):
                impl, grad_args = memo[2], memo[3]
        except Exception:
            pass
    if impl is None:"""
    + textwrap.indent(_CHOOSE_BY_KEY, "    ")
    + """
        grad_args = {needs_grad}
        if _hook.op_caches and self._last_choice_rebuilds < _max_rebuilds:
            self._remember_choice(impl, ({guarded},), ({others}), {exact}, grad_args)"""
)

_TEMPLATE = """
def key({names}):
    return {key}

def __call__(self, {params}):
    if _is_compiling() or _depth():
        return self._default_overload({names})
{choose}
    if grad_args and _grad_enabled():
        return self._default_overload({names})
{bump_mutated}    if impl.inplace:
        return impl.fn({cloned})
    return impl.fn({names})

def maybe_inplace(self, {params}):
    if _is_compiling() or _depth():
        if _grad_enabled() and ({traced_needs_grad}):
            return self._default_overload({names})
        return self._maybe_inplace_overload({names})
{choose}
    if grad_args and _grad_enabled():
        return self._default_overload({names})
    if impl.inplace and not _inference_mode():
        _increment_version(({written}))
{bump_mutated}    return impl.fn({names})
"""


#: What `_parameters` says of a native function's parameter.
TENSOR, OPTIONAL_TENSOR, OTHER = "tensor", "optional tensor", "other"


def _parameters(native: Callable[..., Any]) -> list[tuple[str, str]]:
    """Each parameter's name and kind (`TENSOR`, `OPTIONAL_TENSOR` or `OTHER`), in order."""
    kinds = []
    for p in inspect.signature(native, eval_str=True).parameters.values():
        if p.annotation is torch.Tensor:
            kinds.append((p.name, TENSOR))
        elif p.annotation == (torch.Tensor | None):
            kinds.append((p.name, OPTIONAL_TENSOR))
        else:
            kinds.append((p.name, OTHER))
    return kinds


def needs_grad_expression(native: Callable[..., Any], *, checked: bool = True) -> str:
    """Whether any tensor argument requires grad (an optional one only when given), so that a
    training call takes the torch op and its gradient (`autograd`); "False" for an op without
    tensor arguments. Evaluated only with grad mode on: `checked`, after the choice, whose
    argument check has made sure the tensors are tensors; else (while tracing, where the check
    runs later, on the torch op) tolerating any value."""
    parts = []
    for name, kind in _parameters(native):
        if kind == OTHER:
            continue
        if not checked:
            parts.append(f"getattr({name}, 'requires_grad', False)")
        elif kind == TENSOR:
            parts.append(f"{name}.requires_grad")
        else:
            parts.append(f"({name} is not None and {name}.requires_grad)")
    return " or ".join(parts) or "False"


def _tensor_key(name: str) -> str:
    # `dispatch_key.row_layout`, its common case inline
    layout = f"({CONTIGUOUS} if {name}.is_contiguous() else _strided_row_layout({name}))"
    return f"{name}.dtype, {name}.device, {name}.dim(), {name}.shape[-1], {layout}"


# A required tensor's summary is spliced into the key tuple (one flat tuple hashes faster than
# nested ones); an optional tensor's stays a nested tuple, or None.


def generic_key_expression(native: Callable[..., Any]) -> str:
    """The generic dispatch key: per tensor its dtype, device, rank, last size and row layout;
    every other argument as it is."""
    parts = []
    for name, kind in _parameters(native):
        if kind == TENSOR:
            parts.append(_tensor_key(name))
        elif kind == OPTIONAL_TENSOR:
            parts.append(f"(None if {name} is None else ({_tensor_key(name)}))")
        else:
            parts.append(name)
    return f"({', '.join(parts)},)"


def _guarded_arguments(native: Callable[..., Any]) -> tuple[list[str], list[str]] | None:
    """For the last-choice guard: the tensor arguments (an optional one as a stand-in when
    None) and the other values compared (every non-tensor argument, then whether each optional
    tensor is None); None for an op without tensor arguments."""
    tensors: list[str] = []
    others: list[str] = []
    optional: list[str] = []
    for name, kind in _parameters(native):
        if kind == TENSOR:
            tensors.append(name)
        elif kind == OPTIONAL_TENSOR:
            tensors.append(f"(_none_tensor if {name} is None else {name})")
            optional.append(f"{name} is None")
        else:
            others.append(name)
    if not tensors:
        return None
    return tensors, others + optional


def build(
    op: "IrOp", *, custom_key: bool
) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    """Generate ``(key, __call__, maybe_inplace)`` for `op`.

    `key` is the generic dispatch key (or a call of ``op._key`` when the op registered its own);
    the other two are unbound functions taking ``self``. ``__call__`` tries the last choice first
    where the op has a tensor argument (`last_choice`; with every size exact where the op has
    its own key).
    """
    params = list(op.signature.parameters.values())
    names = [p.name for p in params]
    namespace: dict[str, Any] = {
        "_is_compiling": torch.compiler.is_compiling,
        "_grad_enabled": torch._C.is_grad_enabled,
        "_inference_mode": torch.is_inference_mode_enabled,
        "_increment_version": torch._C._increment_version,
        "_depth": torch._C._len_torch_dispatch_stack,
        "_hook": _Hook,
        "_strided_row_layout": strided_row_layout,
        "_none_tensor": last_choice.NONE_TENSOR,
        "_max_rebuilds": last_choice.MAX_REBUILDS,
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
    guarded = _guarded_arguments(op.native) if last_choice.available() else None
    # an op that stores into arguments (`IrOp.mutates`) has no gradient: always the direct path
    needs_grad = "False" if op.mutates else needs_grad_expression(op.native)
    bump_mutated = (
        f"    if not _inference_mode():\n        _increment_version(({', '.join(op.mutates)},))\n"
        if op.mutates
        else ""
    )
    if guarded is None:
        choose = _CHOOSE_BY_KEY.format(key=key, names=joined)
        choose += f"\n    grad_args = {needs_grad}"
    else:
        tensors, others = guarded
        choose = _CHOOSE_BY_LAST_OR_KEY.format(
            key=key,
            names=joined,
            guarded=", ".join(tensors),
            others="".join(f"{o}, " for o in others),
            exact=custom_key,
            needs_grad=needs_grad,
        )
    source = _TEMPLATE.format(
        params=", ".join(declared),
        names=joined,
        key=key,
        cloned=cloned,
        choose=choose,
        written="".join(f"{a}, " for a in op.activations),
        needs_grad=needs_grad,
        traced_needs_grad="False"
        if op.mutates
        else needs_grad_expression(op.native, checked=False),
        bump_mutated=bump_mutated,
    )
    exec(compile(source, f"<ir_spec fast path for {op.name}>", "exec"), namespace)
    return namespace["key"], namespace["__call__"], namespace["maybe_inplace"]
