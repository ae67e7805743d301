"""Gradients through the ops are the native functions' gradients, whatever ran the forward.

The provider `detached` stands in for a kernel: it computes the native result with no
autograd history, as a Triton or CUDA kernel does.
"""

import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from ir_spec import IrOp, ops
from ir_spec.autograd import DIFFERENTIABLE_DTYPES
from ir_spec.testing import (
    fused_add_rms_norm_inplace,
    grad_leaves,
    sample_inputs,
    single_process_ops,
    weighted_sum,
)

PROVIDER = "detached"


def _detached(op: IrOp) -> Callable[..., Any]:
    def forward(*args: Any) -> Any:
        with torch.no_grad():
            return op.native(*args)

    forward.__signature__ = inspect.signature(op.native)  # type: ignore[attr-defined]
    return forward


@pytest.fixture
def kernels(prefer: Callable[[str], None], temporary_impls: list[Any]) -> None:
    """Every op runs the `detached` provider."""
    for op in single_process_ops():
        op.register_impl(PROVIDER)(_detached(op))
        temporary_impls.append((op, PROVIDER))
    prefer(PROVIDER)


def _loss(result: Any) -> Tensor | None:
    """A weighted sum of every differentiable output with a gradient path; None where no
    output has one."""
    outputs = result if isinstance(result, tuple) else (result,)
    kept = [o for o in outputs if o.requires_grad and o.dtype in DIFFERENTIABLE_DTYPES]
    return weighted_sum(*kept) if kept else None


def _native_gradients(op: IrOp, args: tuple[Any, ...]) -> list[Tensor | None] | None:
    native_args, leaves = grad_leaves(args)
    loss = _loss(op.native(*native_args))
    if loss is None:
        return None
    return list(torch.autograd.grad(loss, leaves, allow_unused=True))


def _assert_same_gradients(got: list[Tensor | None], want: list[Tensor | None]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if w is None:
            assert g is None or not g.any()
        else:
            assert g is not None
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "op", [op for op in single_process_ops() if not op.mutates], ids=lambda op: op.name
)
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_eager_gradients_are_the_native_ones(kernels: None, op: IrOp, layout: str) -> None:
    strided = layout == "strided"
    args = sample_inputs(op, hidden_size=40 if strided else 64, row_padding=3 if strided else 0)
    want = _native_gradients(op, args)
    call_args, leaves = grad_leaves(args)
    result = op(*call_args)
    loss = _loss(result)
    if want is None:  # only fp8 outputs: no gradient flows, as through a cast to fp8
        assert loss is None
        return
    assert loss is not None, "the kernel's outputs lost the native function's gradient"
    _assert_same_gradients(list(torch.autograd.grad(loss, leaves, allow_unused=True)), want)


@pytest.mark.parametrize(
    "op", [ops.fused_add_rms_norm, ops.silu_and_mul, ops.rotary_embedding], ids=lambda op: op.name
)
def test_compiled_gradients_are_the_native_ones(kernels: None, op: IrOp) -> None:
    torch._dynamo.reset()
    args = sample_inputs(op, hidden_size=64)
    want = _native_gradients(op, args)
    assert want is not None
    call_args, leaves = grad_leaves(args)
    result = torch.compile(op.__call__, backend="aot_eager", fullgraph=True)(*call_args)
    loss = _loss(result)
    assert loss is not None
    _assert_same_gradients(list(torch.autograd.grad(loss, leaves, allow_unused=True)), want)


@pytest.mark.parametrize(
    "op", [ops.fused_add_rms_norm, ops.rotary_embedding], ids=lambda op: op.name
)
@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("entry", ["method", "torch_op"])
def test_maybe_inplace_is_functional_when_training(
    kernels: None, op: IrOp, mode: str, entry: str
) -> None:
    """`op.maybe_inplace` and ``torch.ops.ir.<name>.maybe_inplace`` both compute out of place
    when a gradient is needed, compiled too (the method records the functional overload). The
    in-place overload had left the inputs' gradients None under torch.compile, and called
    directly, torch's fallback had backpropagated through its arguments as if it returned
    them unchanged."""
    torch._dynamo.reset()
    args = sample_inputs(op, hidden_size=64)
    want = _native_gradients(op, args)
    assert want is not None
    call_args, leaves = grad_leaves(args)
    # Activations that are not leaves, as in a model (a leaf that requires grad cannot be
    # written in place, so it would not show the fallback's wrong gradient).
    call_args = tuple(a * 1 if i in op.activation_indices else a for i, a in enumerate(call_args))
    activations = [call_args[i].detach().clone() for i in op.activation_indices]
    call = op.maybe_inplace if entry == "method" else op.torch_op.maybe_inplace
    if mode == "compiled":
        call = torch.compile(call, backend="aot_eager", fullgraph=True)
    loss = _loss(call(*call_args))
    assert loss is not None
    _assert_same_gradients(list(torch.autograd.grad(loss, leaves, allow_unused=True)), want)
    for i, before in zip(op.activation_indices, activations, strict=True):
        assert torch.equal(call_args[i], before)


@pytest.fixture
def writes_in_place(prefer: Callable[[str], None], temporary_impls: list[Any]) -> None:
    """fused_add_rms_norm runs provider `writes_in_place`, an in-place implementation that
    writes as a kernel does, without bumping a version counter (``.data`` has its own)."""
    op = ops.fused_add_rms_norm

    @op.register_impl("writes_in_place", inplace=True)
    def fused_add(
        x: Tensor,
        x_residual: Tensor,
        weight: Tensor | None,
        epsilon: float,
        variance_size: int | None = None,
    ) -> Any:
        fused_add_rms_norm_inplace(x.data, x_residual.data, weight, epsilon, variance_size)
        return x, x_residual

    temporary_impls.append((op, "writes_in_place"))
    prefer("writes_in_place")


@pytest.mark.usefixtures("writes_in_place")
def test_the_inplace_torch_overload_writes_in_place_for_inference() -> None:
    """Where no gradient is needed, the in-place overload still runs an in-place kernel."""
    op = ops.fused_add_rms_norm
    x, residual, *rest = sample_inputs(op, hidden_size=64)
    want = op.native(x, residual, *rest)
    x = x.requires_grad_(True) * 1  # requires grad, but no gradient is recorded:
    with torch.no_grad():
        got = op.torch_op.maybe_inplace(x, residual, *rest)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x, want[0])  # the activation was overwritten


@pytest.mark.usefixtures("writes_in_place")
@pytest.mark.parametrize("entry", ["method", "torch_op"])
@pytest.mark.parametrize("written", ["x", "x_residual"])
def test_maybe_inplace_bumps_the_versions_it_may_write(entry: str, written: str) -> None:
    """A gradient saved from an activation before an in-place kernel wrote it fails loudly in
    backward instead of using the overwritten values, through either entry point. The eager
    method had skipped the bump."""
    op = ops.fused_add_rms_norm
    x, residual, *rest = sample_inputs(op, hidden_size=64)
    leaf = x.detach().clone().requires_grad_(True)
    activation = leaf * 2
    saved_it = activation.sin()
    args = (activation, residual) if written == "x" else (residual, activation)
    call = op.maybe_inplace if entry == "method" else op.torch_op.maybe_inplace
    with torch.no_grad():
        call(*args, *rest)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved_it.sum().backward()


@pytest.mark.usefixtures("writes_in_place")
def test_maybe_inplace_under_inference_mode_writes_without_bumping() -> None:
    """Inference tensors have no version counter; the eager call skips the bump there and
    still writes in place."""
    op = ops.fused_add_rms_norm
    with torch.inference_mode():
        x, residual, *rest = sample_inputs(op, hidden_size=64)
        want = op.native(x, residual, *rest)
        out, new_residual = op.maybe_inplace(x, residual, *rest)
    assert out is x
    assert new_residual is residual
    torch.testing.assert_close((out, new_residual), want)


def test_inference_calls_keep_the_direct_path(
    kernels: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without grad mode, or without an argument that requires grad, a call never goes
    through the torch op (its dispatch would cost every inference call)."""
    op = ops.rms_norm

    def through_torch_op(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("took the torch op")

    monkeypatch.setattr(op, "_default_overload", through_torch_op)
    x, weight, epsilon, variance_size = sample_inputs(op, hidden_size=64)
    op(x, weight, epsilon, variance_size)  # nothing requires grad
    with torch.no_grad():
        out = op(x.requires_grad_(True), weight, epsilon, variance_size)
    assert not out.requires_grad
    with torch.inference_mode():
        op(x, weight, epsilon, variance_size)
