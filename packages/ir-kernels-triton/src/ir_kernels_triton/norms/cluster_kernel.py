"""Decode-size norm rows spread over the blocks of a thread-block cluster, with the bits of
one program a row (`rules.cluster_for` says when; `launch.clusters` launches the kernel and
holds the exchange of partials between the blocks).

Each block loads only its part of the row, so a row written in place can be spread too (each
block reads only what it writes), and no block loads what another does, as the split's
programs do. The parts keep the one-program kernel's bits. That kernel
(`kernel.norm_kernel`, one program of ``ROW_WARPS`` warps a row) sums in its layout's order:
each thread's elements in a chain, then a butterfly over the lanes, then one over the warps,
which adds warp ``w``'s partial to warp ``w ^ d``'s for d halving down to 1. Block ``c`` of a
cluster of ``S`` takes what warps ``c, c + S, c + 2S, ...`` hold (the same elements a thread,
in the same register order), so its own reduction computes a node of that tree; the blocks'
partials are then added in the tree's last steps, ``(p0 + p2) + (p1 + p3)`` for four blocks,
``((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7))`` for eight. A dynamic scale's peak (a
maximum) is exact in any order. With eight blocks, the dynamic-fp8 norm's row of 8 warps takes
one warp a block, which reduces with shuffles alone, no shared memory or block barrier. Where a
block holds several warps (the 16-warp rows of the fused adds and rms_norm), each warp sends its
own partial instead (`launch.clusters.warp_sum_asm`): the block's part of the tree, the thread
chain and the lane butterfly, is written in the exchange's PTX, so no block reduction runs, and
the blocks add one slot a warp.
"""

from typing import Any

import triton
import triton.language as tl

from ..launch.clusters import _begin_exchange, _row_sum, _row_sum_and_peak, launch_on_clusters
from ..quant.fp8 import bounded_dynamic_scale, quantize, round_to_dtype, sum_and_max


@triton.jit
def cluster_norm_kernel(
    x_ptr,
    x_stride,
    r_ptr,
    r_stride,
    w_ptr,
    out_ptr,
    out_stride,
    res_ptr,
    res_stride,
    scale_ptr,
    scale_out_ptr,
    scale_ub_ptr,
    variance_size,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    QUANT: tl.constexpr,
    HAS_UB: tl.constexpr,
    BLOCK: tl.constexpr,
    ROW_WARPS: tl.constexpr,
    S: tl.constexpr,
    SUM_ASM: tl.constexpr = "",
    SUM_CONSTRAINTS: tl.constexpr = "",
):
    """`norms.kernel.norm_kernel`'s single-pass rows that fill their block, with a weight of
    their width, each spread over `S` blocks of a cluster (launched by `launch_cluster_norm`):
    block ``pid % S`` of row ``pid // S``. `SUM_ASM` (from `launch.clusters.sum_by_warps`):
    each warp sends its partial sum itself, and the inverse RMS comes back in every element."""
    pid = tl.program_id(0)
    row = (pid // S).to(tl.int64)
    rank = pid % S
    _begin_exchange(pid)
    act_dtype = x_ptr.dtype.element_ty
    VEC: tl.constexpr = 128 // act_dtype.primitive_bitwidth
    SPAN: tl.constexpr = 32 * VEC  # a warp's elements in one 16-byte access a thread
    LOCAL: tl.constexpr = ROW_WARPS // S
    i = tl.arange(0, BLOCK // S)
    # this block's warp v, repeat k, holds what warp rank + S * v holds in one program a row
    warp = rank + S * ((i // SPAN) % LOCAL)
    offs = (i // (SPAN * LOCAL)) * (SPAN * ROW_WARPS) + warp * SPAN
    offs = tl.max_contiguous(tl.multiple_of(offs + i % SPAN, VEC), VEC)
    x = tl.load(x_ptr + row * x_stride + offs).to(tl.float32)
    if QUANT == 1:
        scale = tl.load(scale_ptr)
    w = tl.load(w_ptr + offs).to(tl.float32)
    if HAS_RESIDUAL:
        s = (x + tl.load(r_ptr + row * r_stride + offs).to(tl.float32)).to(act_dtype)
        tl.store(res_ptr + row * res_stride + offs, s)
        x = s.to(tl.float32)
    sq = x * x
    if QUANT == 2:
        xw = x * w
        partial, partial_peak = tl.reduce((sq, tl.abs(xw)), 0, sum_and_max)
        total, peak = _row_sum_and_peak(partial, partial_peak, S)
        inv_rms = tl.rsqrt(total / variance_size + eps)
    elif SUM_ASM != "":
        PACK: tl.constexpr = BLOCK // (32 * ROW_WARPS)  # a thread's elements
        n = variance_size.to(tl.float32)
        inv_rms = tl.inline_asm_elementwise(
            SUM_ASM, SUM_CONSTRAINTS, [x, n, eps], dtype=tl.float32, is_pure=False, pack=PACK
        )
    else:
        total = _row_sum(tl.sum(sq, axis=0), S)
        inv_rms = tl.rsqrt(total / variance_size + eps)
    if QUANT == 2:
        y = xw * inv_rms
    else:
        y = x * inv_rms
        y = y * w
    if QUANT == 0:
        tl.store(out_ptr + row * out_stride + offs, y.to(out_ptr.dtype.element_ty))
    else:
        y = round_to_dtype(y, act_dtype, False)
        if QUANT == 2:
            amax = (peak * inv_rms).to(act_dtype).to(tl.float32)
            scale = bounded_dynamic_scale(amax, scale_ub_ptr, HAS_UB)
            tl.store(scale_out_ptr + row, scale, mask=rank == 0)
        q = quantize(y, 1.0 / scale, False)
        tl.store(out_ptr + row * out_stride + offs, q.to(out_ptr.dtype.element_ty))


def launch_cluster_norm(rows: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any | None:
    """`launch.clusters.launch_on_clusters` of `cluster_norm_kernel`."""
    return launch_on_clusters(cluster_norm_kernel, rows, args, kwargs)
