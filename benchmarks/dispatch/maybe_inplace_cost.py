"""Eager cost of ``fused_add_rms_norm.maybe_inplace`` with a trivial in-place provider selected
by priority (it returns its activations), under ``no_grad`` and ``inference_mode``, and with x
and the residual as the two column halves of one buffer (the layout that takes the full
aliasing analysis), beside a plain call of the op and the provider function called directly:
the fastest of 15 rounds of 20000 calls each, in one process. Run it on two trees to see what
a change to the eager path costs (``benchmarks/results/dispatch-maybe-inplace-cpu.txt``)."""

import torch
from grad_check_cost import fastest_ns  # benchmarks/dispatch/grad_check_cost.py
from torch import Tensor

import ir_dispatch
from ir_spec import ops


def trivial_inplace(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    return x, x_residual


def main() -> None:
    op = ops.fused_add_rms_norm
    op.register_impl("bench_trivial_inplace", inplace=True)(trivial_inplace)
    ir_dispatch.set_priority(fused_add_rms_norm=["bench_trivial_inplace"])
    x, residual, weight = torch.randn(4, 64), torch.randn(4, 64), torch.ones(64)
    args = (x, residual, weight, 1e-6)
    with torch.no_grad():
        assert op.maybe_inplace(*args)[0] is x
        no_grad = fastest_ns(lambda: op.maybe_inplace(*args))
        call = fastest_ns(lambda: op(*args))  # clones both activations first
        # x and residual as the two halves of one buffer's rows: not contiguous
        halves = torch.randn(4, 128)
        views = (halves[:, :64], halves[:, 64:], weight, 1e-6)
        strided = fastest_ns(lambda: op.maybe_inplace(*views))
    with torch.inference_mode():
        inference_args = tuple(a.clone() if isinstance(a, Tensor) else a for a in args)
        inference = fastest_ns(lambda: op.maybe_inplace(*inference_args))
    direct = fastest_ns(lambda: trivial_inplace(*args))
    print(
        f"maybe_inplace: no_grad {no_grad:.0f} ns, inference_mode {inference:.0f} ns, "
        f"views of one buffer (no_grad) {strided:.0f} ns; op call (no_grad) {call:.0f} ns; "
        f"direct {direct:.0f} ns"
    )


if __name__ == "__main__":
    main()
