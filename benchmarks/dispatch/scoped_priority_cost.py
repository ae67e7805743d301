"""Eager cost of an IR op call inside a scoped ``ir_dispatch.priority(...)`` block beside the
same call under ``ir_dispatch.set_priority``: a trivial rms_norm provider (it returns its input)
selected either way, the fastest of 15 rounds of 20000 calls each, with the provider function
called directly as the floor. Run it on two trees to see what a change to the scoped path costs;
the machine is shared, so run it several times and take the median of the printed figures."""

import torch
from grad_check_cost import fastest_ns  # benchmarks/dispatch/grad_check_cost.py
from torch import Tensor

import ir_dispatch
from ir_spec import ops

X = torch.randn(4, 64)
W = torch.ones(64)


def trivial(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    return x


def main() -> None:
    op = ops.rms_norm
    op.register_impl("bench_trivial")(trivial)
    ir_dispatch.set_priority(rms_norm=["bench_trivial"])
    assert op(X, W, 1e-6) is X
    with torch.no_grad():
        global_ = fastest_ns(lambda: op(X, W, 1e-6))
        ir_dispatch.set_priority()
        with ir_dispatch.priority(rms_norm=["bench_trivial"]):
            assert op(X, W, 1e-6) is X
            scoped = fastest_ns(lambda: op(X, W, 1e-6))
        direct = fastest_ns(lambda: trivial(X, W, 1e-6))
    print(
        f"set_priority {global_:.0f} ns (overhead {global_ - direct:.0f}), "
        f"scoped priority {scoped:.0f} ns (overhead {scoped - direct:.0f}), direct {direct:.0f} ns"
    )


if __name__ == "__main__":
    main()
