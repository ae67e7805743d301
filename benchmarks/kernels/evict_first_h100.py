# ruff: noqa: B023  (each lambda is timed before the loop moves on)
"""H100 probe: our norm kernel against `norm_variants_h100.var_kernel` writing the same
outputs, with and without the evict-first hint, timed in both orders
(`benchmarks/results/triton-tuning-H100.log`, section 5). Run from the repository root.
"""

import sys

sys.path.insert(0, "benchmarks/kernels")
import torch
import triton
from norm_variants_h100 import us, var_kernel

from ir_kernels_triton import norm_kernels as nk
from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs
from ir_stack.bench import kernels as bk

FP8 = torch.float8_e4m3fn
cases = [
    ("fused_add_rms_norm_static_quant_fp8", 4096, 2048),
    ("fused_add_rms_norm_static_quant_fp8", 1024, 8192),
    ("fused_add_rms_norm_static_quant_fp8", 16384, 2048),
    ("fused_add_rms_norm_static_quant_fp8", 16384, 8192),
    ("fused_add_rms_norm_static_quant_fp8", 128, 4096),
    ("rms_norm", 1024, 8192),
    ("rms_norm", 1024, 4096),
    ("fused_add_rms_norm", 1024, 8192),
]
for name, t, h in cases:
    op = getattr(ops, name)
    args = sample_inputs(
        op,
        SampleSpec(
            batch_shape=(t,), hidden_size=h, dtype=torch.bfloat16, device="cuda", seed=t + h
        ),
    )
    has_res = name.startswith("fused")
    quant = name.endswith("fp8")
    x = args[0]
    r = args[1] if has_res else x
    w = args[2] if has_res else args[1]
    scale = args[4] if quant else x
    out = torch.empty(t, h, device="cuda", dtype=FP8 if quant else torch.bfloat16)
    res = torch.empty_like(x)
    ind = bk.anchors(op, args)["inductor"]
    ind()
    kw = dict(residual=r, residual_out=res) if has_res else {}
    if quant:
        kw.update(quant=nk.QUANT_STATIC, scale=scale)
    block = triton.next_power_of_2(h)

    def var(ev, warps, alloc):
        def run():
            o = torch.empty_like(out) if alloc else out
            rr = torch.empty_like(res) if alloc else res
            var_kernel[(t,)](
                x,
                r,
                w,
                o,
                rr,
                scale,
                t,
                h,
                1e-6,
                HAS_RES=has_res,
                QUANT=quant,
                BLOCK=block,
                ROWS=1,
                EVICT_IN=ev,
                LOOP=False,
                RBLOCK=1,
                num_warps=warps,
            )

        return run

    fns = {
        "inductor": ind,
        "ours impl": lambda: op.impls["triton"].fn(*args),
        "ours prealloc": lambda: nk.launch_norm(x, w, 1e-6, None, out, **kw),
        "ours prealloc first": lambda: nk.launch_norm(
            x, w, 1e-6, None, out, evict_first=True, **kw
        ),
        "ours w8 first": lambda: nk.launch_norm(
            x, w, 1e-6, None, out, evict_first=True, num_warps=8, **kw
        ),
        "var w8": var("", 8, False),
        "var w8 alloc": var("", 8, True),
        "var w8 first": var("evict_first", 8, False),
    }
    for f in fns.values():
        f()
    line = []
    for rnd in range(2):
        line.append(
            " ".join(
                f"{k}={us(f):.2f}"
                for k, f in (list(fns.items()) if rnd == 0 else list(fns.items())[::-1])
            )
        )
    print(f"{name} t={t} h={h}: " + " || ".join(line), flush=True)
