"""Training through the kernel providers: gradients through an op whose forward ran a Triton or
CUDA kernel are the native function's, eagerly and compiled with the IR passes (which lower the
op to the kernel's torch op). On CPU the Triton kernels run in the interpreter; the cuda
provider needs a GPU."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from torch import Tensor

import ir_dispatch
import ir_kernels_triton  # noqa: F401
import ir_passes
from ir_spec import IrOp, ops
from ir_spec.testing import grad_leaves, sample_inputs, weighted_sum

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OPS = [ops.rms_norm, ops.fused_add_rms_norm, ops.silu_and_mul, ops.rotary_embedding]


@pytest.fixture(params=["triton", "cuda"])
def provider(request: pytest.FixtureRequest) -> Iterator[str]:
    name: str = request.param
    if name == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("the cuda provider needs a GPU")
        # registers the provider (and builds it) where entry points are not read: run from source
        import ir_kernels_cuda.impls  # noqa: F401
    yield name
    ir_dispatch.set_priority()


def _gradients(fn: Callable[..., Any], args: tuple[Any, ...]) -> list[Tensor | None]:
    call_args, leaves = grad_leaves(args)
    result = fn(*call_args)
    loss = weighted_sum(*(result if isinstance(result, tuple) else (result,)))
    assert loss.requires_grad
    return list(torch.autograd.grad(loss, leaves, allow_unused=True))


def _runs(op: IrOp, provider: str, args: tuple[Any, ...]) -> None:
    impl = op.impls.get(provider)
    if impl is None or not impl.supported or not impl.accepts(args):
        pytest.skip(f"{provider} does not run {op.name} here")


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_gradients_through_a_kernel_are_the_native_ones(provider: str, op: IrOp, mode: str) -> None:
    args = sample_inputs(op, hidden_size=64, dtype=torch.float32, device=DEVICE)
    _runs(op, provider, args)
    want = _gradients(op.native, args)
    ir_dispatch.set_priority(**{op.name: [provider]})
    if mode == "eager":
        got = _gradients(op, args)
    else:
        torch._dynamo.reset()
        with torch._inductor.config.patch(fx_graph_cache=False):
            got = _gradients(ir_passes.compile(op.__call__), args)
        report = ir_passes.last_report()
        assert report is not None
        assert set(report.selected_impls[op.name].values()) == {provider}
    for g, w in zip(got, want, strict=True):
        assert (g is None) == (w is None)
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
