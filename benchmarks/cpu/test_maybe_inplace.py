"""What ``fused_add_rms_norm.maybe_inplace`` costs with an in-place provider (a trivial one that
returns its activations), under ``no_grad`` and ``inference_mode``, against the default overload
(which clones the activations first) and a direct call of the provider's function."""

from typing import Any

import pytest
import torch
from torch import Tensor

from ir_spec import ops

FusedArgs = tuple[Tensor, Tensor, Tensor, float]


@pytest.mark.benchmark(group="maybe_inplace")
def test_direct_inplace_provider_call(benchmark: Any, fused_args: FusedArgs) -> None:
    trivial_inplace = ops.fused_add_rms_norm.impls["bench_trivial_inplace"].fn
    out, _ = benchmark(trivial_inplace, *fused_args)
    assert out is fused_args[0]


@pytest.mark.benchmark(group="maybe_inplace")
def test_maybe_inplace_no_grad(benchmark: Any, fused_args: FusedArgs) -> None:
    op = ops.fused_add_rms_norm
    with torch.no_grad():
        out, _ = benchmark(op.maybe_inplace, *fused_args)
    assert out is fused_args[0]  # the provider ran in place: no clone on the way


@pytest.mark.benchmark(group="maybe_inplace")
def test_maybe_inplace_inference_mode(benchmark: Any) -> None:
    op = ops.fused_add_rms_norm
    with torch.inference_mode():
        args = (torch.randn(4, 64), torch.randn(4, 64), torch.randn(64), 1e-6)
        out, _ = benchmark(op.maybe_inplace, *args)
    assert out is args[0]


@pytest.mark.benchmark(group="maybe_inplace")
def test_default_overload_clones_first(benchmark: Any, fused_args: FusedArgs) -> None:
    op = ops.fused_add_rms_norm
    with torch.no_grad():
        out, residual = benchmark(op, *fused_args)
    # never an alias of its inputs, though the provider works in place
    assert out is not fused_args[0]
    torch.testing.assert_close(out, fused_args[0])
    torch.testing.assert_close(residual, fused_args[1])
