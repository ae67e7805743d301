"""H100 probe of norm variants where Inductor still won (L2-sized shapes): eviction hints on
the activation loads, several rows per program, an Inductor-style two-pass loop
(`benchmarks/results/triton-tuning-H100.log`, section 4). ``python norm_variants_h100.py``.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import triton
import triton.language as tl
from triton.testing import do_bench_cudagraph

import ir_kernels_triton  # noqa
from ir_kernels_triton.fp8 import saturate_fp8
from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs
from ir_stack.bench import kernels as bk

bk.lift_recompile_limits()
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


def us(fn: Callable[[], Any], rep: int = 20) -> float:
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


@dataclass
class Case:
    """One norm op at one shape: its arguments, the activations and preallocated outputs."""

    op: Any
    args: tuple[Any, ...]
    tokens: int
    hidden: int
    has_res: bool
    quant: bool
    x: torch.Tensor
    r: torch.Tensor
    w: torch.Tensor
    scale: torch.Tensor
    out: torch.Tensor
    res: torch.Tensor


def make_case(name: str, t: int, h: int) -> Case:
    """bf16 inputs of op `name` (rms_norm or a fused-add variant) at `t` x `h`."""
    op = getattr(ops, name)
    spec = SampleSpec(
        batch_shape=(t,), hidden_size=h, dtype=torch.bfloat16, device="cuda", seed=t + h
    )
    args = sample_inputs(op, spec)
    has_res = name.startswith("fused")
    quant = name.endswith("fp8")
    x = args[0]
    return Case(
        op=op,
        args=args,
        tokens=t,
        hidden=h,
        has_res=has_res,
        quant=quant,
        x=x,
        r=args[1] if has_res else x,
        w=args[2] if has_res else args[1],
        scale=args[4] if quant else x,
        out=torch.empty(t, h, device="cuda", dtype=FP8 if quant else torch.bfloat16),
        res=torch.empty_like(x),
    )


def launch_variant(
    case: Case,
    *,
    rows: int = 1,
    warps: int = 8,
    evict: str = "",
    loop: bool = False,
    rblock: int = 1,
    alloc: bool = False,
) -> None:
    """`var_kernel` over `case` (into fresh outputs with `alloc`, else the preallocated ones)."""
    out = torch.empty_like(case.out) if alloc else case.out
    res = torch.empty_like(case.res) if alloc else case.res
    var_kernel[(triton.cdiv(case.tokens, rows),)](
        case.x,
        case.r,
        case.w,
        out,
        res,
        case.scale,
        case.tokens,
        case.hidden,
        1e-6,
        HAS_RES=case.has_res,
        QUANT=case.quant,
        BLOCK=triton.next_power_of_2(case.hidden),
        ROWS=rows,
        EVICT_IN=evict,
        LOOP=loop,
        RBLOCK=rblock,
        num_warps=warps,
    )


def main() -> None:
    for name, t, h in CASES:
        case = make_case(name, t, h)
        ind = bk.anchors(case.op, case.args)["inductor"]
        mine = partial(case.op.impls["triton"].fn, *case.args)
        ind()
        mine()
        results = [(us(ind), "inductor"), (us(mine), "ours")]
        for rows in (1, 2, 4):
            for warps in (4, 8, 16):
                for ev in ("", "evict_first", "evict_last"):
                    v = partial(launch_variant, case, rows=rows, warps=warps, evict=ev)
                    results.append((us(v), f"r{rows}w{warps}{ev[6:]}"))
                for rb in (1024, 2048):
                    if rb * rows > 8192:
                        continue
                    v = partial(launch_variant, case, rows=rows, warps=warps, loop=True, rblock=rb)
                    results.append((us(v), f"loop r{rows}w{warps}b{rb}"))
        results.sort()
        times = {n: u for u, n in results}
        top = " ".join(f"{u:.2f}:{n}" for u, n in results[:8])
        print(f"{name} t={t} h={h} (ind {times['inductor']:.2f} ours {times['ours']:.2f}): {top}")


if __name__ == "__main__":
    main()
