"""The dispatcher hook: ir-spec asks one dispatcher object which implementation runs.

Protocol (for ir-dispatch and any other selection policy):

* ``select(op, args) -> Impl`` receives the `IrOp` and its arguments normalized to a positional
  tuple with defaults filled in. It runs for every eager call (real tensors) and may be called by
  compilers with fake tensors, so it must not read tensor values. It must return one of
  ``op.impls.values()``.
* ``choice_cache(op) -> dict | None`` returns the dictionary in which the op caches eager choices
  (keyed by the op's dispatch key) for the dispatcher's current state, or None to disable caching.
  A dispatcher whose state is process-wide returns ``op.choices`` and calls
  ``op.forget_choices()`` (or `forget_all_choices`) whenever its policy changes; one with scoped
  state returns a dictionary owned by that scope.
* `use_op_choice_caches` lets a dispatcher say that ``choice_cache(op)`` is ``op.choices`` in
  every context right now, so eager calls skip asking (`set_dispatcher` turns it off for any
  dispatcher but the native one).
* A dispatcher whose state can be scoped to a context sets `choice_scope` there to an object that
  stands for the scoped state (None: its process-wide state) and calls ``use_choice_scope(True)``
  once installed: eager calls then remember their last choice per scope object, as they do
  outside scopes (`set_dispatcher` turns it off). The state an object stands for must not
  change while the object is set, except through `forget_all_choices`.
* ``registration_changed(op)`` is called after an implementation is registered or removed (the
  op's own ``choices`` are already cleared).

With nothing installed, `NativeDispatcher` always picks the native implementation.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .impl import Impl
    from .op import IrOp

logger = logging.getLogger("ir_spec")


@runtime_checkable
class Dispatcher(Protocol):
    """Chooses the implementation an op call runs."""

    def select(self, op: IrOp, args: tuple[Any, ...]) -> Impl:
        """Return the implementation of `op` to run for these normalized arguments."""
        ...

    def choice_cache(self, op: IrOp) -> dict[Any, Impl] | None:
        """The cache of eager choices for `op` in the current state, or None."""
        ...

    def registration_changed(self, op: IrOp) -> None:
        """Hear that `op`'s implementations changed."""
        ...


class NativeDispatcher:
    """The default dispatcher: always the native implementation."""

    def select(self, op: IrOp, args: tuple[Any, ...]) -> Impl:
        """Return ``op.impls["native"]``."""
        return op.native_impl

    def choice_cache(self, op: IrOp) -> dict[Any, Impl]:
        """The op's process-wide cache: the choice never changes."""
        return op.choices

    def registration_changed(self, op: IrOp) -> None:
        """Nothing of its own is cached, so nothing to do."""

    def __repr__(self) -> str:
        return "NativeDispatcher()"


#: The dispatcher's scoped state in force in this context (see the protocol above).
choice_scope: ContextVar[object | None] = ContextVar("ir_spec_choice_scope", default=None)
#: Tag of a last choice made while ``op.choices`` served every context (outside all scopes).
GLOBAL_SCOPE = object()
#: Stands for the scope of a context whose last choice may not be remembered.
NO_MEMO = object()


class _Hook:
    """Holds the installed dispatcher; module-level state kept in one place."""

    current: Dispatcher = NativeDispatcher()
    #: While true, eager calls use ``op.choices`` without asking ``choice_cache`` (fast path).
    op_caches: bool = True
    #: While true, the dispatcher's choices in a context depend only on `choice_scope` there.
    scoped_memos: bool = False


def use_op_choice_caches(enabled: bool) -> None:
    """Tell ir-spec whether ``choice_cache(op)`` is ``op.choices`` everywhere right now.

    A dispatcher whose state can be scoped turns this off while any scope is active (in any
    thread) and on again after, sparing unscoped eager calls the ``choice_cache`` call.
    """
    _Hook.op_caches = bool(enabled)


def use_choice_scope(enabled: bool) -> None:
    """Tell ir-spec that the installed dispatcher's choices in a context are fixed by the value
    of `choice_scope` there (until `forget_all_choices`), so that eager calls inside a scope may
    remember their last choice for that scope."""
    _Hook.scoped_memos = bool(enabled)
    forget_all_choices()


def forget_all_choices() -> None:
    """Clear every op's cached eager choices."""
    from .registry import ops

    for op in ops:
        op.forget_choices()


def get_dispatcher() -> Dispatcher:
    """The dispatcher in use."""
    return _Hook.current


def set_dispatcher(dispatcher: Dispatcher | None) -> Dispatcher:
    """Install `dispatcher` (None restores the native one); return the previous one."""
    if dispatcher is None:
        dispatcher = NativeDispatcher()
    if not isinstance(dispatcher, Dispatcher):
        raise TypeError(
            f"set_dispatcher: argument 'dispatcher' got {dispatcher!r}, expected an object with "
            "select(op, args), choice_cache(op) and registration_changed(op) methods"
        )
    previous, _Hook.current = _Hook.current, dispatcher
    _Hook.op_caches = isinstance(dispatcher, NativeDispatcher)
    _Hook.scoped_memos = False
    forget_all_choices()
    logger.debug("ir_spec dispatcher: %r -> %r", previous, dispatcher)
    return previous
