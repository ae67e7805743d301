"""In-place semantics of both overloads in eager mode, with the implementation chosen by
priority."""

from collections.abc import Iterator

import pytest
import torch

import ir_dispatch
from ir_spec import ops
from ir_spec.testing import (
    assert_close,
    clone_args,
    fused_add_rms_norm_inplace,
    sample_inputs,
)


@pytest.fixture
def inplace_provider() -> Iterator[None]:
    ops.fused_add_rms_norm.register_impl("t_dispatch_inplace", inplace=True)(
        fused_add_rms_norm_inplace
    )
    ir_dispatch.set_priority(fused_add_rms_norm=["t_dispatch_inplace"])
    yield
    ops.fused_add_rms_norm.unregister_impl("t_dispatch_inplace")


@pytest.mark.usefixtures("inplace_provider")
def test_default_overload_preserves_inputs() -> None:
    args = sample_inputs(ops.fused_add_rms_norm, hidden_size=96)
    before = clone_args(args)
    out = ops.fused_add_rms_norm(*args)
    assert all(torch.equal(a, b) for a, b in zip(args[:2], before[:2], strict=True))
    assert_close(ops.fused_add_rms_norm, out, ops.fused_add_rms_norm.native(*before))


@pytest.mark.usefixtures("inplace_provider")
def test_maybe_inplace_reuses_inputs() -> None:
    x, r, w, eps, _ = sample_inputs(ops.fused_add_rms_norm, hidden_size=96)
    expected = ops.fused_add_rms_norm.native(x, r, w, eps)
    out, residual = ops.fused_add_rms_norm.maybe_inplace(x, r, w, eps)
    assert out is x
    assert residual is r
    assert_close(ops.fused_add_rms_norm, (out, residual), expected)
