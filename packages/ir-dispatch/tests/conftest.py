"""Fixtures: test providers on catalog ops, and a clean selection state around every test."""

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import Tensor

import ir_dispatch
from ir_dispatch.platforms import detect_platform
from ir_spec import ops


def _marker(value: float) -> Any:
    def impl(
        x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> Tensor:
        return torch.full_like(x, value)

    return impl


def fp16_only(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    return x.dtype == torch.float16


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # the tests spell out effective lists: pin the platform whatever machine runs them
    monkeypatch.setenv("IR_PLATFORM", "cpu")
    detect_platform.cache_clear()
    ir_dispatch.install()
    ir_dispatch.set_priority()
    ir_dispatch.set_batch_invariant(False)
    ir_dispatch.collect_stats(False)
    yield
    ir_dispatch.install()
    ir_dispatch.set_priority()
    ir_dispatch.set_batch_invariant(False)
    ir_dispatch.collect_stats(False)
    detect_platform.cache_clear()


@pytest.fixture
def markers() -> Iterator[None]:
    """rms_norm providers returning constants: t_one=1, t_two=2 (batch-invariant),
    t_off=3 (supported=False), t_fp16=4 (fp16 only)."""
    op = ops.rms_norm
    op.register_impl("t_one")(_marker(1.0))
    op.register_impl("t_two", batch_invariant=True)(_marker(2.0))
    op.register_impl("t_off", supported=False)(_marker(3.0))
    op.register_impl("t_fp16", supports_args=fp16_only)(_marker(4.0))
    yield
    for provider in ("t_one", "t_two", "t_off", "t_fp16"):
        op.unregister_impl(provider)
