"""Eager cost of an IR op call with grad mode on and under ``no_grad``, beside the provider
function called directly, in one process: a trivial rms_norm provider selected by priority,
the fastest of 15 rounds of 20000 calls each. Run it on two trees to see what a change to the
eager path costs (``benchmarks/results/dispatch-grad-check-cpu.txt``)."""

import timeit
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

import ir_dispatch
from ir_spec import ops

X = torch.randn(4, 64)
W = torch.ones(64)


def trivial(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    return x


def fastest_ns(call: Callable[[], Any], number: int = 20000, rounds: int = 15) -> float:
    return min(timeit.repeat(call, number=number, repeat=rounds)) / number * 1e9


def main() -> None:
    ops.rms_norm.register_impl("bench_trivial")(trivial)
    ir_dispatch.set_priority(rms_norm=["bench_trivial"])
    op = ops.rms_norm
    assert op(X, W, 1e-6) is X
    grad_on = fastest_ns(lambda: op(X, W, 1e-6))
    with torch.no_grad():
        no_grad = fastest_ns(lambda: op(X, W, 1e-6))
    direct = fastest_ns(lambda: trivial(X, W, 1e-6))
    print(f"grad on {grad_on:.0f} ns, no_grad {no_grad:.0f} ns, direct {direct:.0f} ns")


if __name__ == "__main__":
    main()
