"""H100 probe: our norm kernel against `norm_variants_h100.var_kernel` writing the same
outputs, with and without the evict-first hint, timed in both orders
(`benchmarks/results/triton-tuning-H100.log`, section 5). Run from the repository root.
"""

import sys
from collections.abc import Callable
from functools import partial
from typing import Any

sys.path.insert(0, "benchmarks/kernels")
from norm_variants_h100 import launch_variant, make_case, us

from ir_kernels_triton import norm_kernels as nk
from ir_kernels_triton import norm_rules as nr
from ir_stack.bench import kernels as bk

CASES = [
    ("fused_add_rms_norm_static_quant_fp8", 4096, 2048),
    ("fused_add_rms_norm_static_quant_fp8", 1024, 8192),
    ("fused_add_rms_norm_static_quant_fp8", 16384, 2048),
    ("fused_add_rms_norm_static_quant_fp8", 16384, 8192),
    ("fused_add_rms_norm_static_quant_fp8", 128, 4096),
    ("rms_norm", 1024, 8192),
    ("rms_norm", 1024, 4096),
    ("fused_add_rms_norm", 1024, 8192),
]


def main() -> None:
    for name, t, h in CASES:
        case = make_case(name, t, h)
        ind = bk.anchors(case.op, case.args)["inductor"]
        ind()
        kw: dict[str, Any] = {"residual": case.r, "residual_out": case.res} if case.has_res else {}
        if case.quant:
            kw.update(quant=nr.QUANT_STATIC, scale=case.scale)
        ours = partial(nk.launch_norm, case.x, case.w, 1e-6, None, case.out, **kw)
        fns: dict[str, Callable[[], Any]] = {
            "inductor": ind,
            "ours impl": partial(case.op.impls["triton"].fn, *case.args),
            "ours prealloc": ours,
            "ours prealloc first": partial(ours, evict_first=True),
            "ours w8 first": partial(ours, evict_first=True, num_warps=8),
            "var w8": partial(launch_variant, case),
            "var w8 alloc": partial(launch_variant, case, alloc=True),
            "var w8 first": partial(launch_variant, case, evict="evict_first"),
        }
        for f in fns.values():
            f()
        forward = list(fns.items())
        runs = [
            " ".join(f"{k}={us(f):.2f}" for k, f in order) for order in (forward, forward[::-1])
        ]
        print(f"{name} t={t} h={h}: " + " || ".join(runs), flush=True)


if __name__ == "__main__":
    main()
