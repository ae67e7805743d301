"""What an eager op call costs beyond its implementation: the op call against a direct call of
the provider's function (a trivial provider, so the difference is the dispatch alone) and
against a direct call of the native function (the op with ``native`` selected)."""

from typing import Any

import pytest
import torch
from torch import Tensor

import ir_dispatch
from ir_spec import ops

#: the trivial provider the conftest registers
TRIVIAL = "bench_trivial"

NormArgs = tuple[Tensor, Tensor, float]


@pytest.mark.benchmark(group="eager dispatch, trivial provider")
def test_direct_provider_call(benchmark: Any, norm_args: NormArgs) -> None:
    trivial = ops.rms_norm.impls[TRIVIAL].fn
    assert benchmark(trivial, *norm_args) is norm_args[0]


@pytest.mark.benchmark(group="eager dispatch, trivial provider")
def test_op_call(benchmark: Any, norm_args: NormArgs) -> None:
    assert ir_dispatch.select("rms_norm", *norm_args).provider == TRIVIAL
    op = ops.rms_norm
    assert benchmark(op, *norm_args) is norm_args[0]


@pytest.mark.benchmark(group="eager dispatch, trivial provider")
def test_op_call_no_grad(benchmark: Any, norm_args: NormArgs) -> None:
    op = ops.rms_norm
    with torch.no_grad():
        assert benchmark(op, *norm_args) is norm_args[0]


@pytest.mark.benchmark(group="eager dispatch, trivial provider")
def test_op_lookup_and_call(benchmark: Any, norm_args: NormArgs) -> None:
    """``ops.rms_norm(...)`` as model code writes it: the attribute lookup, then the call."""
    x, weight, eps = norm_args
    assert benchmark(lambda: ops.rms_norm(x, weight, eps)) is x


@pytest.mark.benchmark(group="eager dispatch, native")
def test_direct_native_call(benchmark: Any, norm_args: NormArgs) -> None:
    out = benchmark(ops.rms_norm.native, *norm_args)
    assert out.shape == norm_args[0].shape


@pytest.mark.benchmark(group="eager dispatch, native")
def test_op_call_native_selected(benchmark: Any, norm_args: NormArgs) -> None:
    previous = ir_dispatch.user_priority()
    ir_dispatch.set_priority({**previous, "rms_norm": ["native"]})
    try:
        op = ops.rms_norm
        out = benchmark(op, *norm_args)
    finally:
        ir_dispatch.set_priority(previous)
    torch.testing.assert_close(out, ops.rms_norm.native(*norm_args))
