"""Generated eager entry points: an op's ``__call__`` and ``maybe_inplace`` with its own signature.

Generating them per op lets Python itself bind positional and keyword arguments and fill in
defaults, and inlines the dispatch key, so a cached call costs a few attribute reads and one
dictionary lookup on top of the implementation. The logic is the same as
`IrOp._execute`: trace through the torch op when compiling or under a dispatch mode; else look
the (argument-checked) choice up by dispatch key, asking `IrOp.choose` on a miss, and run it,
unless grad mode is on and a tensor argument requires grad: that call takes the torch op, which
carries the gradient (`autograd`). Both entry points first try the op's last choice behind a
tensor guard (`last_choice`), which spares building the key when the arguments look like the
previous call's. Before an in-place implementation runs, ``maybe_inplace`` makes sure that no
activation shares memory with another tensor argument (`aliasing`: a few address comparisons
where every tensor argument is contiguous, the full analysis otherwise) and bumps the written
arguments' version counters, as torch's in-place ops do, except under inference mode; an op
that declares mutated parameters (a cache it stores into) bumps theirs on every call.
"""

import inspect
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from . import aliasing, last_choice
from .dispatch_key import CONTIGUOUS, strided_row_layout
from .dispatcher import GLOBAL_SCOPE, NO_MEMO, _Hook, choice_scope

if TYPE_CHECKING:
    from .op import IrOp

# The lookup runs outside the `except` clause, so that an error of `choose` (a refused
# argument, a failing provider plugin) is not chained to the cache's KeyError.
_LOOKUP = """
    try:
        _impl_ = _cache_[{key}]
    except Exception:  # a miss, no cache, or arguments the key cannot summarize
        _impl_ = None
    if _impl_ is None:
        _impl_ = self.choose(({names},))"""

_CHOOSE_BY_KEY = (
    """
    _cache_ = self.choices if _hook.op_caches else _hook.current.choice_cache(self)"""
    + _LOOKUP
)

# The same, after asking the last choice's guard; a miss remembers the new choice (bounded).
# Both set `_grad_args_`, whether a tensor argument requires grad, and `_dense_`, True where
# every tensor argument is known to be contiguous: the guard checks each tensor's requires_grad
# and strides, so a hit reuses what was remembered with the choice. While a dispatcher scope
# is active anywhere, a memo of the scoped slot counts only in the context of the scope it was
# made in (`dispatcher.choice_scope`), and only for a dispatcher that keys its scoped state so
# (`dispatcher.use_choice_scope`). `_epoch_` is read before the lookup: a memo made from a choice
# the op has forgotten since is dropped (`IrOp._remember_choice`).
# The generated functions' own names start and end with "_" (`signature.is_reserved_parameter`),
# so that no parameter of an op (a `cache` it stores into, say) shadows them.
_CHOOSE_BY_LAST_OR_KEY = (
    """
    _impl_ = None
    _dense_ = False
    if _hook.op_caches:
        _memo_ = self._last_choice
        _scope_ = _global
    else:
        _memo_ = self._scoped_choice
        _scope_ = _scope_get() if _hook.scoped_memos else _no_memo
        if _memo_ is not None and _memo_[4] is not _scope_:
            _memo_ = None
    if _memo_ is not None:
        try:
            if _memo_[1] == ({others}) and _memo_[0].check({guarded}):
                _impl_, _grad_args_, _dense_ = _memo_[2], _memo_[3], _memo_[5]
        except Exception:
            pass
    if _impl_ is None:
        _epoch_ = self._epoch
        _cache_ = self.choices if _scope_ is _global else _hook.current.choice_cache(self)"""
    + textwrap.indent(_LOOKUP, "    ")
    + """
        _grad_args_ = {needs_grad}
        _dense_ = False
        if _cache_ is not None and self._last_choice_rebuilds < _max_rebuilds:
            self._remember_choice(
                _impl_, ({guarded},), ({others}), {exact}, _grad_args_, _scope_, _epoch_
            )"""
)

_TEMPLATE = """
def key({names}):
    return {key}

def __call__(self, {params}):
    if _is_compiling() or _depth():
        return self._default_overload({names})
{choose}
    if _grad_args_ and _grad_enabled():
        return self._default_overload({names})
{bump_mutated}    if _impl_.inplace:
        return _impl_.fn({cloned})
    return _impl_.fn({names})

def maybe_inplace(self, {params}):
    if _is_compiling() or _depth():
        if _grad_enabled() and ({traced_needs_grad}):
            return self._default_overload({names})
        return self._maybe_inplace_overload({names})
{choose}
    if _grad_args_ and _grad_enabled():
        return self._default_overload({names})
{bump_mutated}    if _impl_.inplace:
{apart}
        if not _apart_:
            _copied_ = _check_inplace(self, ({names},), _impl_.provider)
            if _copied_:
                return self._run_on_copies(_impl_, ({names},), _copied_)
        if not _inference_mode():
            _increment_version(({written}))
    return _impl_.fn({names})
"""


#: What `parameter_kinds` says of a native function's parameter.
TENSOR, OPTIONAL_TENSOR, OTHER = "tensor", "optional tensor", "other"


def parameter_kinds(native: Callable[..., Any]) -> list[tuple[str, str]]:
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
    for name, kind in parameter_kinds(native):
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


def _other_types(native: Callable[..., Any]) -> list[str]:
    """``type(<name>)`` of each non-tensor argument: values that compare equal across types
    (``1e-6`` and ``torch.tensor(1e-6)``, ``64`` and ``64.0``, ``False`` and ``0``) can pass
    or fail an argument check differently, so a cached choice may stand for one type only."""
    return [f"type({name})" for name, kind in parameter_kinds(native) if kind == OTHER]


def generic_key_expression(native: Callable[..., Any]) -> str:
    """The generic dispatch key: per tensor its dtype, device, rank, last size and row layout;
    every other argument as it is, and its type."""
    parts = []
    for name, kind in parameter_kinds(native):
        if kind == TENSOR:
            parts.append(_tensor_key(name))
        elif kind == OPTIONAL_TENSOR:
            parts.append(f"(None if {name} is None else ({_tensor_key(name)}))")
        else:
            parts.append(name)
    return f"({', '.join(parts + _other_types(native))},)"


def custom_key_expression(native: Callable[..., Any]) -> str:
    """An op's own dispatch key (``_custom_key``), with the types of its non-tensor arguments."""
    names = ", ".join(name for name, _ in parameter_kinds(native))
    return f"(_custom_key({names}), {''.join(t + ', ' for t in _other_types(native))})"


def apart_statements(native: Callable[..., Any], activations: tuple[str, ...]) -> str:
    """Statements setting ``_apart_``: whether every tensor argument is contiguous (``_dense_``, or
    asked) and no activation's bytes meet another tensor argument's, so that they share no
    memory. False sends the call to the full analysis (`aliasing`), which decides the layouts
    this test does not cover."""
    tensors = [(name, kind) for name, kind in parameter_kinds(native) if kind != OTHER]
    lines, contiguous = [], []
    for i, (name, kind) in enumerate(tensors):
        fetch = f"_p{i}_ = {name}.data_ptr(); _e{i}_ = _p{i}_ + {name}.nbytes"
        if kind == TENSOR:
            lines.append(fetch)
            contiguous.append(f"{name}.is_contiguous()")
        else:  # an optional tensor passed as None occupies no bytes
            lines.append(f"if {name} is None: _p{i}_ = _e{i}_ = 0")
            lines.append(f"else: {fetch}")
            contiguous.append(f"({name} is None or {name}.is_contiguous())")
    disjoint = [
        f"(_e{i}_ <= _p{j}_ or _e{j}_ <= _p{i}_)"
        for i, (a, _) in enumerate(tensors)
        for j, (b, _) in enumerate(tensors)
        if i < j and (a in activations or b in activations)
    ]
    lines.append(f"_apart_ = (_dense_ or ({' and '.join(contiguous) or 'True'}))")
    if disjoint:
        lines.append(f"_apart_ = _apart_ and {' and '.join(disjoint)}")
    return textwrap.indent("\n".join(lines), " " * 8)


def _guarded_arguments(native: Callable[..., Any]) -> tuple[list[str], list[str]] | None:
    """For the last-choice guard: the tensor arguments (an optional one as a stand-in when
    None) and the other values compared (the type of every non-tensor argument, then its value,
    then whether each optional tensor is None; a type that differs fails the comparison before
    any value is compared); None for an op without tensor arguments."""
    tensors: list[str] = []
    others: list[str] = []
    optional: list[str] = []
    for name, kind in parameter_kinds(native):
        if kind == TENSOR:
            tensors.append(name)
        elif kind == OPTIONAL_TENSOR:
            tensors.append(f"(_none_tensor if {name} is None else {name})")
            optional.append(f"{name} is None")
        else:
            others.append(name)
    if not tensors:
        return None
    return tensors, _other_types(native) + others + optional


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
        "_scope_get": choice_scope.get,
        "_global": GLOBAL_SCOPE,
        "_no_memo": NO_MEMO,
        "_check_inplace": aliasing.check_inplace_args,
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
        key = custom_key_expression(op.native)
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
        choose += f"\n    _grad_args_ = {needs_grad}\n    _dense_ = False"
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
        apart=apart_statements(op.native, op.activations),
        written="".join(f"{a}, " for a in op.activations),
        needs_grad=needs_grad,
        traced_needs_grad="False"
        if op.mutates
        else needs_grad_expression(op.native, checked=False),
        bump_mutated=bump_mutated,
    )
    exec(compile(source, f"<ir_spec fast path for {op.name}>", "exec"), namespace)
    # Python names a function by its qualified name when a call binds no arguments ("missing 1
    # required positional argument"), and tracebacks by its code's: the op's name, not
    # "__call__".
    call = _named(namespace["__call__"], f"ir.{op.name}")
    maybe_inplace = _named(namespace["maybe_inplace"], f"ir.{op.name}.maybe_inplace")
    return namespace["key"], call, maybe_inplace


def _named(fn: Any, qualname: str) -> Any:
    fn.__qualname__ = qualname
    fn.__code__ = fn.__code__.replace(co_qualname=qualname)
    return fn
