"""Fixtures for ir-spec's tests: a dispatcher that prefers one provider, temporary impls."""

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ir_spec
from ir_spec import Impl, IrOp


class PreferDispatcher(ir_spec.NativeDispatcher):
    """Selects `provider` wherever it is registered and accepts the arguments, else native."""

    def __init__(self, provider: str) -> None:
        self.provider = provider

    def select(self, op: IrOp, args: tuple[Any, ...]) -> Impl:
        impl = op.impls.get(self.provider)
        if impl is not None and impl.supported and impl.accepts(args):
            return impl
        return op.native_impl


@pytest.fixture
def prefer() -> Iterator[Callable[[str], None]]:
    """Install a `PreferDispatcher` for the test; restore the previous dispatcher after."""
    previous = ir_spec.get_dispatcher()
    yield lambda provider: ir_spec.set_dispatcher(PreferDispatcher(provider))
    ir_spec.set_dispatcher(previous)


@pytest.fixture
def temporary_impls() -> Iterator[list[tuple[IrOp, str]]]:
    """Append (op, provider) pairs; they are unregistered after the test."""
    registered: list[tuple[IrOp, str]] = []
    yield registered
    for op, provider in registered:
        if provider in op.impls:
            op.unregister_impl(provider)
