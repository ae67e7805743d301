# ruff: noqa: B023  (each lambda is timed before the loop moves on)
"""H100 probe of norm variants where Inductor still won (L2-sized shapes): eviction hints on
the activation loads, several rows per program, an Inductor-style two-pass loop
(`benchmarks/results/triton-tuning-H100.log`, section 4). ``python norm_variants_h100.py``.
"""

import torch
import triton
import triton.language as tl
from triton.testing import do_bench_cudagraph

import ir_kernels_triton  # noqa
from ir_kernels_triton.fp8 import saturate_fp8
from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs
from ir_stack.bench import kernels as bk

for option in (
    "recompile_limit",
    "cache_size_limit",
    "accumulated_recompile_limit",
    "accumulated_cache_size_limit",
):
    if hasattr(torch._dynamo.config, option):
        setattr(torch._dynamo.config, option, 100000)
FP8 = torch.float8_e4m3fn


@triton.jit
def var_kernel(
    x_ptr,
    r_ptr,
    w_ptr,
    out_ptr,
    res_ptr,
    scale_ptr,
    n_rows,
    hidden,
    eps,
    HAS_RES: tl.constexpr,
    QUANT: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    EVICT_IN: tl.constexpr,
    LOOP: tl.constexpr,
    RBLOCK: tl.constexpr,
):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    rmask = rows < n_rows
    base = rows.to(tl.int64) * hidden
    if LOOP:
        acc = tl.zeros([ROWS, RBLOCK], tl.float32)
        for start in range(0, hidden, RBLOCK):
            c = start + tl.arange(0, RBLOCK)[None, :]
            m = rmask & (c < hidden)
            x = tl.load(x_ptr + base + c, mask=m, other=0.0, eviction_policy="evict_last").to(
                tl.float32
            )
            if HAS_RES:
                x = (
                    (
                        x
                        + tl.load(
                            r_ptr + base + c, mask=m, other=0.0, eviction_policy="evict_last"
                        ).to(tl.float32)
                    )
                    .to(x_ptr.dtype.element_ty)
                    .to(tl.float32)
                )
            acc += x * x
        inv = tl.rsqrt(tl.sum(acc, axis=1)[:, None] / hidden + eps)
        for start in range(0, hidden, RBLOCK):
            c = start + tl.arange(0, RBLOCK)[None, :]
            m = rmask & (c < hidden)
            x = tl.load(x_ptr + base + c, mask=m, other=0.0, eviction_policy="evict_first").to(
                tl.float32
            )
            if HAS_RES:
                s = (
                    x
                    + tl.load(
                        r_ptr + base + c, mask=m, other=0.0, eviction_policy="evict_first"
                    ).to(tl.float32)
                ).to(x_ptr.dtype.element_ty)
                tl.store(res_ptr + base + c, s, mask=m)
                x = s.to(tl.float32)
            w = tl.load(w_ptr + c, mask=c < hidden, other=0.0).to(tl.float32)
            y = x * inv * w
            if QUANT:
                y = saturate_fp8(
                    y.to(x_ptr.dtype.element_ty).to(tl.float32) / tl.load(scale_ptr), False
                )
            tl.store(out_ptr + base + c, y.to(out_ptr.dtype.element_ty), mask=m)
    else:
        c = tl.arange(0, BLOCK)[None, :]
        m = rmask & (c < hidden)
        x = tl.load(x_ptr + base + c, mask=m, other=0.0, eviction_policy=EVICT_IN).to(tl.float32)
        w = tl.load(w_ptr + c, mask=c < hidden, other=0.0).to(tl.float32)
        if HAS_RES:
            s = (
                x
                + tl.load(r_ptr + base + c, mask=m, other=0.0, eviction_policy=EVICT_IN).to(
                    tl.float32
                )
            ).to(x_ptr.dtype.element_ty)
            tl.store(res_ptr + base + c, s, mask=m)
            x = s.to(tl.float32)
        inv = tl.rsqrt(tl.sum(x * x, axis=1)[:, None] / hidden + eps)
        y = x * inv * w
        if QUANT:
            y = saturate_fp8(
                y.to(x_ptr.dtype.element_ty).to(tl.float32) / tl.load(scale_ptr), False
            )
        tl.store(out_ptr + base + c, y.to(out_ptr.dtype.element_ty), mask=m)


def us(fn, rep=20):
    fn()
    torch.cuda.synchronize()
    return float(do_bench_cudagraph(fn, rep=rep)) * 1e3


CASES = [
    ("rms_norm", 1024, 4096),
    ("rms_norm", 1024, 8192),
    ("rms_norm", 4096, 4096),
    ("rms_norm", 16384, 8192),
    ("fused_add_rms_norm_static_quant_fp8", 4096, 2048),
    ("fused_add_rms_norm_static_quant_fp8", 1024, 8192),
    ("fused_add_rms_norm_static_quant_fp8", 16384, 2048),
    ("fused_add_rms_norm_static_quant_fp8", 128, 4096),
]


def main() -> None:
    for name, t, h in CASES:
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

        def mine() -> None:
            op.impls["triton"].fn(*args)

        ind()
        mine()
        results = [(us(ind), "inductor"), (us(mine), "ours")]
        block = triton.next_power_of_2(h)
        for rows in (1, 2, 4):
            for warps in (4, 8, 16):
                for ev in ("", "evict_first", "evict_last"):
                    results.append(
                        (
                            us(
                                lambda: var_kernel[(triton.cdiv(t, rows),)](
                                    x,
                                    r,
                                    w,
                                    out,
                                    res,
                                    scale,
                                    t,
                                    h,
                                    1e-6,
                                    HAS_RES=has_res,
                                    QUANT=quant,
                                    BLOCK=block,
                                    ROWS=rows,
                                    EVICT_IN=ev,
                                    LOOP=False,
                                    RBLOCK=1,
                                    num_warps=warps,
                                )
                            ),
                            f"r{rows}w{warps}{ev[6:]}",
                        )
                    )
                for rb in (1024, 2048):
                    if rb * rows > 8192:
                        continue
                    results.append(
                        (
                            us(
                                lambda: var_kernel[(triton.cdiv(t, rows),)](
                                    x,
                                    r,
                                    w,
                                    out,
                                    res,
                                    scale,
                                    t,
                                    h,
                                    1e-6,
                                    HAS_RES=has_res,
                                    QUANT=quant,
                                    BLOCK=block,
                                    ROWS=rows,
                                    EVICT_IN="",
                                    LOOP=True,
                                    RBLOCK=rb,
                                    num_warps=warps,
                                )
                            ),
                            f"loop r{rows}w{warps}b{rb}",
                        )
                    )
        results.sort()
        times = dict((n, u) for u, n in results)
        top = " ".join(f"{u:.2f}:{n}" for u, n in results[:8])
        print(f"{name} t={t} h={h} (ind {times['inductor']:.2f} ours {times['ours']:.2f}): {top}")


if __name__ == "__main__":
    main()
