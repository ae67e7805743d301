"""`IrOp` and `register_op`: an operator declared once by its native function."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType, MethodType
from typing import Any, overload

import torch
from torch.library import Library, infer_schema

from . import autograd, fast_path, last_choice, registry
from .dispatch_key import DispatchKey
from .dispatcher import _Hook
from .impl import Impl
from .layout import shares_memory
from .signature import (
    RESERVED_OP_NAMES,
    check_identifier,
    check_same_parameters,
    is_tensor_annotation,
    native_parameters,
    tensor_return_count,
)
from .tolerance import DEFAULT_TOLERANCES, Tolerance

logger = logging.getLogger("ir_spec")

#: The torch library namespace every op lives in: ``torch.ops.ir.<name>``.
NAMESPACE = "ir"
_LIB = Library(NAMESPACE, "FRAGMENT")

#: Provider names no implementation may take.
RESERVED_PROVIDERS = frozenset({"native"})

_is_compiling = torch.compiler.is_compiling
_dispatch_mode_depth = torch._C._len_torch_dispatch_stack

InputGenerator = Callable[..., tuple[Any, ...]]

#: A choice cache holding more entries than this is emptied (keys should not grow with tokens).
MAX_CACHED_CHOICES = 4096


class IrOp:
    """An operator of the IR: its native semantics, its implementations and its torch ops.

    Call it like the native function. In eager mode the call dispatches in Python to the
    implementation the installed dispatcher selects; under `torch.compile` (or any torch dispatch
    mode) it records one ``torch.ops.ir.<name>`` call instead.
    """

    maybe_inplace: Callable[..., Any]
    """Call that lets the implementation overwrite and return its activation inputs
    (only on ops declared with ``allow_inplace=True``). Using a donated input afterwards is the
    caller's error. An in-place implementation bumps the activations' version counters, except
    under inference mode; a call that records a gradient computes out of place."""

    def __init__(
        self,
        name: str,
        native: Callable[..., Any],
        activations: tuple[str, ...],
        allow_inplace: bool,
        mutates: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.native = native
        self.activations = activations
        self.allow_inplace = allow_inplace
        self.mutates = mutates
        """Parameters every call writes (a cache the op stores into), declared in the schema."""
        self.signature = inspect.signature(native)
        params = list(self.signature.parameters.values())
        self._n_params = len(params)
        first_default = next(
            (i for i, p in enumerate(params) if p.default is not inspect.Parameter.empty),
            len(params),
        )
        self._n_required = first_default
        self._default_tail = tuple(p.default for p in params[first_default:])
        names = [p.name for p in params]
        self.activation_indices = tuple(names.index(a) for a in activations)
        self.native_impl = Impl("native", native, batch_invariant=True, op_name=name)
        self._impls: dict[str, Impl] = {"native": self.native_impl}
        self.impls: Mapping[str, Impl] = MappingProxyType(self._impls)
        self._checker: Callable[..., None] | None = None
        self._key: DispatchKey = lambda *args: args  # replaced by _install_fast_path
        self.choices: dict[Any, Impl] = {}
        """Eager choices cached by dispatch key for the process-wide dispatcher state."""
        # (guard, other argument values, impl) of the last eager call: see `last_choice`
        #: (guard, other arguments, choice, whether a tensor argument requires grad)
        self._last_choice: tuple[Any, tuple[Any, ...], Impl, bool] | None = None
        self._last_choice_rebuilds = 0
        self._fake: Callable[..., Any] = native
        self._tolerances: dict[torch.dtype, Tolerance] = dict(DEFAULT_TOLERANCES)
        self.input_generator: InputGenerator | None = None
        self.__doc__ = native.__doc__
        self._custom_key = False

    # ----------------------------------------------------------------- calling
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the op (replaced per op by a generated function of the same behaviour)."""
        if (
            _is_compiling()
            or _dispatch_mode_depth()
            or autograd.requires_grad(*args, *kwargs.values())
        ):
            return self._default_overload(*args, **kwargs)
        return self._execute(args, kwargs, inplace_ok=False)

    def _install_fast_path(self) -> None:
        key, call, maybe_inplace = fast_path.build(self, custom_key=self._custom_key)
        self._key = key
        type(self).__call__ = call  # type: ignore[method-assign]
        if self.allow_inplace:
            self.maybe_inplace = MethodType(maybe_inplace, self)

    def choose(self, args: tuple[Any, ...]) -> Impl:
        """Check normalized `args` and return the implementation to run, cached by dispatch key.

        The first call with a given key runs the argument check and asks the dispatcher; later
        calls with the same key reuse both outcomes.
        """
        dispatcher = _Hook.current
        cache = self.choices if _Hook.op_caches else dispatcher.choice_cache(self)
        if cache is not None:
            try:
                key = self._key(*args)
                impl = cache.get(key)
            except (AttributeError, TypeError, IndexError):  # malformed or unhashable arguments
                cache = None
            else:
                if impl is not None:
                    return impl
        if self._checker is not None:
            self._checker(*args)
        impl = dispatcher.select(self, args)
        if cache is not None:
            if len(cache) >= MAX_CACHED_CHOICES:
                cache.clear()
            cache[key] = impl
        return impl

    def forget_choices(self) -> None:
        """Drop the cached eager choices (after a registration or a policy change)."""
        self.choices.clear()
        self._last_choice = None
        self._last_choice_rebuilds = 0

    def _remember_choice(
        self,
        impl: Impl,
        tensors: tuple[torch.Tensor, ...],
        others: tuple[Any, ...],
        exact: bool,
        grad_args: bool = False,
    ) -> None:
        """Make `impl` the last choice, behind a guard built from this call's tensors (`exact`:
        every size checked, for ops whose own key relates their arguments' shapes); `grad_args`:
        whether one of them requires grad (the guard checks that it still does, or still does
        not)."""
        self._last_choice_rebuilds += 1
        guard = last_choice.guard(tensors, exact=exact)
        self._last_choice = None if guard is None else (guard, others, impl, grad_args)

    def normalize(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
        """Arguments as a positional tuple in declaration order, defaults filled in."""
        if not kwargs and self._n_required <= len(args) <= self._n_params:
            if len(args) == self._n_params:
                return args
            return args + self._default_tail[len(args) - self._n_required :]
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as err:
            raise TypeError(f"ir.{self.name}{self.signature}: {err}") from None
        bound.apply_defaults()
        return bound.args

    def check(self, args: tuple[Any, ...]) -> None:
        """Raise `ValueError` if normalized `args` are outside the op's domain."""
        if self._checker is not None:
            self._checker(*args)

    def _execute(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, inplace_ok: bool
    ) -> Any:
        """Run the chosen implementation (the body of `__call__`, for the torch kernels)."""
        args = self.normalize(args, kwargs)
        impl = self.choose(args)
        if impl.inplace and not inplace_ok:
            cloned = list(args)
            for i in self.activation_indices:
                cloned[i] = args[i].clone()
            return impl.fn(*cloned)
        return impl.fn(*args)

    # -------------------------------------------------------------- torch ops
    @property
    def torch_op(self) -> Any:
        """The overload packet ``torch.ops.ir.<name>``."""
        return getattr(torch.ops.ir, self.name)

    def _define_torch_ops(self) -> None:
        schema = infer_schema(self.native, mutates_args=self.mutates)
        _LIB.define(f"{self.name}{schema}")
        _LIB.impl(self.name, self._torch_default_kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(f"{NAMESPACE}::{self.name}", self._fake_kernel, lib=_LIB)
        if not self.mutates:  # an op that stores into its arguments has no gradient
            autograd.register(self, _LIB, f"{NAMESPACE}::{self.name}")
        self._default_overload = self.torch_op.default
        if self.allow_inplace:
            schema = infer_schema(self.native, mutates_args=self.activations + self.mutates)
            _LIB.define(f"{self.name}.maybe_inplace{schema}")
            _LIB.impl(
                f"{self.name}.maybe_inplace",
                self._torch_maybe_inplace_kernel,
                "CompositeExplicitAutograd",
            )
            torch.library.register_fake(
                f"{NAMESPACE}::{self.name}.maybe_inplace", self._fake_kernel, lib=_LIB
            )
            self._maybe_inplace_overload = self.torch_op.maybe_inplace
            autograd.register_maybe_inplace(
                _LIB,
                f"{self.name}.maybe_inplace",
                self._default_overload,
                self._maybe_inplace_overload,
            )

    def _torch_default_kernel(self, *args: Any, **kwargs: Any) -> Any:
        return self._execute(args, kwargs, inplace_ok=False)

    def _torch_maybe_inplace_kernel(self, *args: Any, **kwargs: Any) -> Any:
        # The schema marks the activations as mutated but its results as fresh tensors (so that
        # stock functionalization can handle the op): an output that is an activation is copied.
        args = self.normalize(args, kwargs)
        result = self._execute(args, {}, inplace_ok=True)
        inputs = [args[i] for i in self.activation_indices]
        outs = result if isinstance(result, tuple) else (result,)
        fixed = tuple(o.clone() if any(shares_memory(o, a) for a in inputs) else o for o in outs)
        return fixed if isinstance(result, tuple) else fixed[0]

    def _fake_kernel(self, *args: Any, **kwargs: Any) -> Any:
        args = self.normalize(args, kwargs)
        self.check(args)
        return self._fake(*args)

    # ---------------------------------------------------------- registration
    def register_impl(
        self,
        provider: str,
        *,
        supported: bool = True,
        supports_args: Callable[..., bool] | None = None,
        inplace: bool = False,
        batch_invariant: bool = False,
        unsupported_reason: str = "",
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering `fn` as provider `provider`'s implementation of this op.

        The function and `supports_args` must take exactly the native function's parameters.
        `inplace=True` (only on ops with ``allow_inplace``) says the function may overwrite its
        activation inputs and return them. With ``supported=False``, `unsupported_reason` says
        why (explanations show it).
        """
        check_identifier("provider", provider)
        if provider in RESERVED_PROVIDERS:
            raise ValueError(
                f"op {self.name!r}: provider name {provider!r} is reserved for the native function"
            )
        if provider in self._impls:
            raise ValueError(
                f"op {self.name!r}: provider {provider!r} already registered an implementation "
                f"({self._impls[provider].fn!r})"
            )
        if not isinstance(supported, bool):
            raise TypeError(
                f"op {self.name!r}, provider {provider!r}: argument 'supported' got "
                f"{supported!r}, expected a bool"
            )
        if inplace and not self.allow_inplace:
            raise ValueError(
                f"op {self.name!r}, provider {provider!r}: inplace=True, but the op was declared "
                "without allow_inplace=True"
            )
        if supports_args is not None:
            if not callable(supports_args):
                raise TypeError(
                    f"op {self.name!r}, provider {provider!r}: argument 'supports_args' got "
                    f"{supports_args!r}, expected a callable"
                )
            check_same_parameters(
                self.name, f"supports_args of {provider!r}", self.native, supports_args
            )

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            if provider in self._impls:
                raise ValueError(
                    f"op {self.name!r}: provider {provider!r} already registered an implementation"
                )
            check_same_parameters(self.name, f"implementation of {provider!r}", self.native, fn)
            self._impls[provider] = Impl(
                provider=provider,
                fn=fn,
                supported=supported,
                supports_args=supports_args,
                inplace=inplace,
                batch_invariant=batch_invariant,
                op_name=self.name,
                unsupported_reason="" if supported else unsupported_reason,
            )
            logger.debug(
                "ir.%s: registered provider %r (supported=%s, inplace=%s, batch_invariant=%s)",
                self.name,
                provider,
                supported,
                inplace,
                batch_invariant,
            )
            self.forget_choices()
            _Hook.current.registration_changed(self)
            return fn

        return decorator

    def unregister_impl(self, provider: str) -> Impl:
        """Remove and return provider `provider`'s implementation (not the native one)."""
        if provider in RESERVED_PROVIDERS:
            raise ValueError(f"op {self.name!r}: the native implementation cannot be removed")
        try:
            impl = self._impls.pop(provider)
        except KeyError:
            raise ValueError(
                f"op {self.name!r}: no provider {provider!r}; registered: {', '.join(self._impls)}"
            ) from None
        self.forget_choices()
        _Hook.current.registration_changed(self)
        return impl

    def register_checker(self, fn: Callable[..., None]) -> Callable[..., None]:
        """Decorator installing the argument check (same parameters as the native function).

        It raises `ValueError` for arguments outside the op's domain. It runs on every eager call
        and once at trace time on fake tensors, so it must only look at metadata.
        """
        check_same_parameters(self.name, "checker", self.native, fn)
        self._checker = fn
        self.forget_choices()
        return fn

    def register_dispatch_key(self, fn: DispatchKey) -> DispatchKey:
        """Decorator replacing the generic dispatch key (see `ir_spec.dispatch_key`).

        The key must capture everything the checker and any `supports_args` read, and must not
        contain the number of tokens.
        """
        check_same_parameters(self.name, "dispatch key", self.native, fn)
        self._key = fn
        self._custom_key = True
        self._install_fast_path()
        self.forget_choices()
        return fn

    def register_fake(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator overriding the fake implementation (default: the native function)."""
        check_same_parameters(self.name, "fake implementation", self.native, fn)
        self._fake = fn
        return fn

    def register_input_generator(self, fn: InputGenerator) -> InputGenerator:
        """Decorator installing the generator of sample inputs (see `ir_spec.testing`)."""
        self.input_generator = fn
        return fn

    # ------------------------------------------------------------- tolerance
    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        """The tolerance for comparing this op's results of dtype `dtype`."""
        try:
            return self._tolerances[dtype]
        except KeyError:
            raise ValueError(
                f"op {self.name!r}: no tolerance for dtype {dtype}; known: "
                f"{', '.join(str(d) for d in self._tolerances)}"
            ) from None

    def set_tolerance(self, dtype: torch.dtype, *, atol: float, rtol: float) -> None:
        """Override the tolerance for results of dtype `dtype`."""
        self._tolerances[dtype] = Tolerance(atol=atol, rtol=rtol)

    # ------------------------------------------------------------------ misc
    def __getattr__(self, name: str) -> Any:
        if name == "maybe_inplace":
            raise AttributeError(
                f"op {self.__dict__.get('name')!r} was declared without allow_inplace=True and "
                "has no maybe_inplace overload"
            )
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self) -> str:
        return f"IrOp({self.name}{self.signature}, providers={list(self._impls)})"


def _declare(
    native: Callable[..., Any],
    name: str | None,
    activations: tuple[str, ...] | list[str] | None,
    allow_inplace: bool,
    mutates: tuple[str, ...] | list[str] = (),
) -> IrOp:
    op_name = check_identifier("op", native.__name__ if name is None else name)
    if op_name in RESERVED_OP_NAMES:
        raise ValueError(f"invalid op name {op_name!r}: reserved")
    if registry.lookup(op_name) is not None or hasattr(torch.ops.ir, op_name):
        raise ValueError(f"duplicate op name {op_name!r}: an op of that name is already declared")
    params = native_parameters(native, op_name)
    by_name = {p.name: p for p in params}
    if activations is None:
        acts = tuple(p.name for p in params if p.name.startswith("x"))
    else:
        if isinstance(activations, str):
            raise TypeError(
                f"op {op_name!r}: argument 'activations' got {activations!r}, "
                "expected a list of parameter names"
            )
        acts = tuple(activations)
    for a in acts:
        if a not in by_name:
            raise ValueError(
                f"op {op_name!r}: activation {a!r} is not a parameter; parameters: "
                f"{', '.join(by_name)}"
            )
        if not is_tensor_annotation(by_name[a].annotation):
            raise TypeError(
                f"op {op_name!r}: activation {a!r} must be annotated Tensor, "
                f"got {by_name[a].annotation!r}"
            )
    written = _check_mutates(op_name, mutates, by_name, acts)
    if allow_inplace:
        n_out = tensor_return_count(native)
        if not acts or n_out != len(acts):
            raise ValueError(
                f"op {op_name!r}: allow_inplace needs as many tensor outputs as activations; "
                f"activations {list(acts)}, return annotation "
                f"{inspect.signature(native).return_annotation!r}"
            )
    # Each op gets its own subclass so that its generated __call__ can live on the type.
    op_type = type(f"IrOp_{op_name}", (IrOp,), {"__module__": IrOp.__module__})
    op: IrOp = op_type(op_name, native, acts, allow_inplace, written)
    try:
        op._define_torch_ops()
        op._install_fast_path()
    except RuntimeError as err:
        raise ValueError(f"op {op_name!r}: torch refused the schema: {err}") from err
    registry.add(op)
    logger.debug("declared ir op %s%s", op_name, op.signature)
    return op


def _check_mutates(
    op_name: str,
    mutates: tuple[str, ...] | list[str],
    by_name: Mapping[str, inspect.Parameter],
    activations: tuple[str, ...],
) -> tuple[str, ...]:
    """The declared mutated parameters, refused unless each is a `Tensor` parameter that is not
    an activation (an activation is written only by ``maybe_inplace``, on request)."""
    if isinstance(mutates, str) or not isinstance(mutates, tuple | list):
        raise TypeError(
            f"op {op_name!r}: argument 'mutates' got {mutates!r}, expected a list of parameter "
            "names"
        )
    for m in mutates:
        if m not in by_name:
            raise ValueError(
                f"op {op_name!r}: mutated parameter {m!r} is not a parameter; parameters: "
                f"{', '.join(by_name)}"
            )
        if not is_tensor_annotation(by_name[m].annotation):
            raise TypeError(
                f"op {op_name!r}: mutated parameter {m!r} must be annotated Tensor, "
                f"got {by_name[m].annotation!r}"
            )
        if m in activations:
            raise ValueError(
                f"op {op_name!r}: parameter {m!r} is both an activation and mutated; an op "
                "writes its activations only through maybe_inplace"
            )
    if len(set(mutates)) != len(mutates):
        raise ValueError(f"op {op_name!r}: argument 'mutates' names a parameter twice: {mutates}")
    return tuple(mutates)


@overload
def register_op(fn: Callable[..., Any], /) -> IrOp: ...


@overload
def register_op(
    *,
    name: str | None = None,
    activations: tuple[str, ...] | list[str] | None = None,
    allow_inplace: bool = False,
    mutates: tuple[str, ...] | list[str] = (),
) -> Callable[[Callable[..., Any]], IrOp]: ...


def register_op(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    activations: tuple[str, ...] | list[str] | None = None,
    allow_inplace: bool = False,
    mutates: tuple[str, ...] | list[str] = (),
) -> IrOp | Callable[[Callable[..., Any]], IrOp]:
    """Declare an op from its native function; usable bare or with keyword arguments.

    Args:
        name: the op's name (default: the function's name).
        activations: parameters an in-place implementation may overwrite (default: those whose
            names start with ``x``).
        allow_inplace: also define the ``maybe_inplace`` overload.
        mutates: parameters every call writes, such as a KV cache the op stores into. The
            schema declares them mutated (so compilers keep the writes and their order); they
            are not activations, and the op has no gradient.
    """
    if fn is not None:
        return _declare(fn, name, activations, allow_inplace, mutates)
    return lambda f: _declare(f, name, activations, allow_inplace, mutates)
