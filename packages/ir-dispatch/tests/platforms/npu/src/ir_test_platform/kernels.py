"""The ``test_npu`` kernels: stand-ins for a device library's, computing what the native
functions compute (the tests check which one runs, not how fast)."""

from torch import Tensor

from ir_spec import ops


@ops.rms_norm.register_impl("test_npu", batch_invariant=True)
def rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    return ops.rms_norm.native(x, weight, epsilon, variance_size)


@ops.silu_and_mul.register_impl("test_npu")
def silu_and_mul(x: Tensor) -> Tensor:
    return ops.silu_and_mul.native(x)
