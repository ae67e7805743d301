"""Eager call overhead of an IR op: ``ops.rms_norm(...)`` with a trivial provider selected,
minus calling that provider function directly. Beside it, when vLLM is importable, the same
measurement for ``vllm.ir.ops.rms_norm`` in its default mode (through the torch op) and with
torch wrapping disabled.

Run with ``python benchmarks/dispatch/run.py`` (writes benchmarks/results/), or directly with
pytest and ``--benchmark-json``.
"""

import importlib.util
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

import ir_dispatch
from ir_spec import ops

ITERATIONS = 2000
ROUNDS = 300
X = torch.randn(4, 64)
W = torch.ones(64)


def trivial(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    return x


def measure(benchmark: Any, fn: Callable[[], Any]) -> None:
    benchmark.pedantic(fn, iterations=ITERATIONS, rounds=ROUNDS, warmup_rounds=20)


@pytest.fixture(scope="module")
def ir_trivial() -> Any:
    ops.rms_norm.register_impl("bench_trivial")(trivial)
    ir_dispatch.set_priority(rms_norm=["bench_trivial"])
    assert ops.rms_norm(X, W, 1e-6) is X
    yield
    ir_dispatch.set_priority()
    ops.rms_norm.unregister_impl("bench_trivial")


@pytest.mark.benchmark(group="eager-overhead")
def test_direct_provider_call(benchmark: Any) -> None:
    measure(benchmark, lambda: trivial(X, W, 1e-6))


@pytest.mark.benchmark(group="eager-overhead")
@pytest.mark.usefixtures("ir_trivial")
def test_ir_spec_op_call(benchmark: Any) -> None:
    op = ops.rms_norm
    measure(benchmark, lambda: op(X, W, 1e-6))


HAVE_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.fixture(scope="module")
def vllm_trivial() -> Any:
    import vllm.ir

    op = vllm.ir.ops.rms_norm
    if "bench_trivial" not in op.impls:
        op.register_impl("bench_trivial")(trivial)
    op.set_default(["bench_trivial"])
    assert op(X, W, 1e-6).data_ptr() == X.data_ptr()
    return op


@pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not importable")
@pytest.mark.benchmark(group="eager-overhead")
def test_vllm_ir_op_call_default_mode(benchmark: Any, vllm_trivial: Any) -> None:
    measure(benchmark, lambda: vllm_trivial(X, W, 1e-6))


@pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not importable")
@pytest.mark.benchmark(group="eager-overhead")
def test_vllm_ir_op_call_unwrapped(benchmark: Any, vllm_trivial: Any) -> None:
    import vllm.ir

    vllm.ir.set_default_torch_wrap(False)
    try:
        measure(benchmark, lambda: vllm_trivial(X, W, 1e-6))
    finally:
        vllm.ir.set_default_torch_wrap(True)
