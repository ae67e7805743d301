"""Fixtures of the CPU benchmarks: trivial providers, so that an op call's time is the
dispatch's alone, selected through the process-wide priority (what a model's eager calls
usually run under, rather than a scoped `ir_dispatch.priority` block), and fresh random
inputs."""

from collections.abc import Iterator

import pytest
import torch
from torch import Tensor

import ir_dispatch
from ir_spec import ops

TRIVIAL = "bench_trivial"
TRIVIAL_INPLACE = "bench_trivial_inplace"


def trivial(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    """An ``rms_norm`` provider that does nothing."""
    return x


def trivial_inplace(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """A ``fused_add_rms_norm`` in-place provider that returns its activations."""
    return x, x_residual


@pytest.fixture(scope="session", autouse=True)
def trivial_providers() -> Iterator[None]:
    """The trivial providers registered and first in their ops' priority for the session."""
    ops.rms_norm.register_impl(TRIVIAL)(trivial)
    ops.fused_add_rms_norm.register_impl(TRIVIAL_INPLACE, inplace=True)(trivial_inplace)
    ir_dispatch.set_priority(rms_norm=[TRIVIAL], fused_add_rms_norm=[TRIVIAL_INPLACE])
    yield
    ir_dispatch.set_priority()
    ops.rms_norm.unregister_impl(TRIVIAL)
    ops.fused_add_rms_norm.unregister_impl(TRIVIAL_INPLACE)


@pytest.fixture
def norm_args() -> tuple[Tensor, Tensor, float]:
    """``rms_norm`` arguments of a decode step's size on the CPU: 4 rows of 64."""
    return torch.randn(4, 64), torch.randn(64), 1e-6


@pytest.fixture
def fused_args() -> tuple[Tensor, Tensor, Tensor, float]:
    """``fused_add_rms_norm`` arguments: 4 rows of 64, a residual and a weight."""
    return torch.randn(4, 64), torch.randn(4, 64), torch.randn(64), 1e-6
