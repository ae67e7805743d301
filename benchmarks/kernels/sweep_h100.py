"""H100 sweeps behind the flat elementwise kernels (`benchmarks/results/triton-tuning-H100.log`).

``python sweep_h100.py flat``: gated activations (also with fp8 output) and static fp8 quant,
the row-block kernel against a flat-indexed one, over block sizes and warps, at 1-16384 rows.
``python sweep_h100.py norm``: rms_norm where the benchmark grid's Liger column won: our kernel
by warps, a variant without the variance mask (one or two rows per program) and Liger's
``rms_norm_forward``, side by side. Prints microseconds of CUDA-graph replays, fastest first.
"""

import sys
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
from triton.testing import do_bench_cudagraph

from ir_kernels_triton import norm_kernels as nk
from ir_kernels_triton import pointwise_kernels as pk
from ir_kernels_triton.fp8 import exact_rounding

BLOCKS_AND_WARPS = [(b, w) for b in (256, 512, 1024, 2048) for w in (1, 2, 4, 8) if b >= 32 * w]


@triton.jit
def two_row_norm(x_ptr, w_ptr, out_ptr, hidden, eps, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    """rms_norm of `ROWS` contiguous rows per program, no variance mask (experiment only)."""
    first = tl.program_id(0).to(tl.int64) * ROWS
    for r in tl.static_range(ROWS):
        offs = tl.arange(0, BLOCK)
        mask = offs < hidden
        base = (first + r) * hidden
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        inv = tl.rsqrt(tl.sum(x * x, axis=0) / hidden + eps)
        y = (x * inv * w).to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + base + offs, y, mask=mask)


def time_us(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    return float(do_bench_cudagraph(lambda: fn(*args, **kwargs), rep=20)) * 1e3


def show(label: str, results: list[tuple[float, str]], top: int = 5) -> None:
    results.sort()
    best = " ".join(f"{us:.2f}:{name}" for us, name in results[:top])
    print(f"{label}: {best}", flush=True)


def sweep_flat() -> None:
    ones = torch.ones(1, device="cuda")
    exact = exact_rounding()
    gates = (("gelu", pk.ACT_GELU, False), ("silu", pk.ACT_SILU, False))
    for name, act, quant in (*gates, ("silu_static", pk.ACT_SILU, True)):
        for t in (1, 16, 128, 1024):
            for d in (5632, 14336, 28672):
                x = torch.randn(t, 2 * d, device="cuda", dtype=torch.bfloat16)
                dtype = torch.float8_e4m3fn if quant else torch.bfloat16
                out = torch.empty(t, d, device="cuda", dtype=dtype)
                scale = ones if quant else None
                results = [(time_us(pk.launch_gated, x, out, act, scale), "default")]
                for b, w in BLOCKS_AND_WARPS:
                    row = time_us(pk.launch_gated, x, out, act, scale, block=b, num_warps=w)
                    results.append((row, f"row b{b} w{w}"))
                    flat = time_us(
                        pk.flat_gated_kernel[(triton.cdiv(t * d, b),)],
                        x, out, ones, t * d, D=d, ACT=act, QUANT=quant, BLOCK=b,
                        EVEN=t * d % b == 0, INTERPRETED=exact, num_warps=w,
                    )  # fmt: skip
                    results.append((flat, f"flat b{b} w{w}"))
                show(f"{name} t={t} d={d}", results)
    for t in (1, 16, 128, 4096, 16384):
        for h in (2048, 4096, 8192):
            x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
            q = torch.empty(t, h, device="cuda", dtype=torch.float8_e4m3fn)
            results = []
            for b, w in BLOCKS_AND_WARPS:
                flat = time_us(
                    pk.flat_static_quant_kernel[(triton.cdiv(t * h, b),)],
                    x, q, ones, t * h, BLOCK=b, EVEN=t * h % b == 0, EXACT_FP8=exact,
                    num_warps=w,
                )  # fmt: skip
                results.append((flat, f"flat b{b} w{w}"))
            show(f"static_quant t={t} h={h}", results)


def sweep_norm() -> None:
    from liger_kernel.ops.rms_norm import rms_norm_forward

    for t, h in ((1024, 4096), (1024, 8192), (4096, 4096), (4096, 8192), (16384, 2048)):
        x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(h, device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(x)
        block = triton.next_power_of_2(h)
        results = [
            (time_us(rms_norm_forward, x, w, 1e-6, 0.0, "llama", False), "liger"),
            (time_us(nk.launch_norm, x, w, 1e-6, None, out), "ours default"),
        ]
        for warps in (2, 4, 8, 16):
            ours = time_us(nk.launch_norm, x, w, 1e-6, None, out, num_warps=warps)
            results.append((ours, f"ours w{warps}"))
            for rows in (1, 2):
                variant = time_us(
                    two_row_norm[(t // rows,)],
                    x, w, out, h, 1e-6, BLOCK=block, ROWS=rows, num_warps=warps,
                )  # fmt: skip
                results.append((variant, f"nomask {rows}row w{warps}"))
        show(f"rms_norm t={t} h={h}", results, top=8)


if __name__ == "__main__":
    {"flat": sweep_flat, "norm": sweep_norm}[sys.argv[1] if len(sys.argv) > 1 else "flat"]()
