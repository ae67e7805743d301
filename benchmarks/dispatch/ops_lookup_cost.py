"""Eager cost of reaching an op through ``ir_spec.ops`` as model code writes it
(``ops.rms_norm(x, w, eps)``), beside the attribute lookup alone and a call of the op bound
beforehand, with a trivial rms_norm provider selected by priority: the fastest of 15 rounds of
20000 calls each, in one process. Run it on two trees to compare
(``benchmarks/results/dispatch-ops-lookup-cpu.txt``)."""

from grad_check_cost import W, X, fastest_ns, trivial  # benchmarks/dispatch/grad_check_cost.py

import ir_dispatch
from ir_spec import ops


def main() -> None:
    ops.rms_norm.register_impl("bench_trivial")(trivial)
    ir_dispatch.set_priority(rms_norm=["bench_trivial"])
    bound = ops.rms_norm
    assert ops.rms_norm(X, W, 1e-6) is X
    lookup = fastest_ns(lambda: ops.rms_norm)
    through_namespace = fastest_ns(lambda: ops.rms_norm(X, W, 1e-6))
    through_bound = fastest_ns(lambda: bound(X, W, 1e-6))
    print(
        f"ops.rms_norm lookup {lookup:.0f} ns; ops.rms_norm(...) {through_namespace:.0f} ns; "
        f"bound op(...) {through_bound:.0f} ns"
    )


if __name__ == "__main__":
    main()
