"""Dynamic per-token fp8 quantization: a row's scale from its peak, then the row scaled.

A row that fits in registers is read once (`tuning.Rows.max_single_pass`); wider rows are read
twice, in chunks. At decode sizes, rows of the widths in `tuning.Clusters.quant_widths` are
spread over the blocks of a thread-block cluster (`quant_cluster_for`, `cluster_quant_kernel`):
each block loads and quantizes its own slice and the blocks exchange their peaks. A peak is a
maximum, exact in any order, so every choice here leaves the results' bits as they are.
"""

from typing import Any

import torch
import triton
import triton.language as tl

from ..launch import tuning
from ..launch.clusters import (
    CLUSTER_SIZES,
    _begin_exchange,
    _row_peak,
    cluster_launches,
    launch_on_clusters,
)
from ..launch.plans import launch_key, launch_plans_enabled, plans_for
from ..launch.programmatic import (
    await_previous_grid,
    launch_options,
    programmatic_launch_enabled,
)
from ..launch.rows import next_power_of_2, num_rows, rows, rows_aligned, warps_for
from .fp8 import (
    abs_peak,
    bounded_dynamic_scale,
    dynamic_scale,
    exact_rounding,
    max_keeping_nan,
    min_keeping_nan,
    quantize,
)

#: Plans of `launch_dynamic_quant` (`launch.plans`).
_DYNAMIC_QUANT_PLANS = plans_for("dynamic_quant")


@triton.jit
def dynamic_quant_kernel(
    x_ptr,
    x_stride,
    q_ptr,
    q_stride,
    scale_ptr,
    ub_ptr,
    hidden,
    HAS_UB: tl.constexpr,
    BLOCK: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    EXACT_FP8: tl.constexpr,
    PDL: tl.constexpr = False,
):
    await_previous_grid(PDL)
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    q_row = q_ptr + row * q_stride
    if SINGLE_PASS:
        offs = tl.arange(0, BLOCK)
        mask = offs < hidden
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        amax = abs_peak(x, 0)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, hidden, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc = max_keeping_nan(
                acc, tl.abs(tl.load(x_row + offs, mask=offs < hidden, other=0.0).to(tl.float32))
            )
        amax = abs_peak(acc, 0)
    scale = bounded_dynamic_scale(amax, ub_ptr, HAS_UB)
    tl.store(scale_ptr + row, scale)
    if SINGLE_PASS:
        offs = tl.arange(0, BLOCK)
        q = quantize(x, 1.0 / scale, EXACT_FP8)
        tl.store(q_row + offs, q.to(q_ptr.dtype.element_ty), mask=offs < hidden)
    else:
        for start in range(0, hidden, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < hidden
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
            q = quantize(x, 1.0 / scale, EXACT_FP8)
            tl.store(q_row + offs, q.to(q_ptr.dtype.element_ty), mask=mask)


@triton.jit
def cluster_quant_kernel(
    x_ptr,
    x_stride,
    q_ptr,
    q_stride,
    scale_ptr,
    ub_ptr,
    HAS_UB: tl.constexpr,
    BLOCK: tl.constexpr,
    S: tl.constexpr,
):
    """`dynamic_quant_kernel`'s rows of exactly `BLOCK` elements, each spread over `S` blocks of
    a cluster (launched by `launch_cluster_quant`): block ``pid % S`` of row ``pid // S``
    quantizes the row's ``pid % S``-th slice of ``BLOCK / S`` elements. The row's peak is a
    maximum, exact in any order, so the bits are the one-program kernel's whatever the
    slices."""
    pid = tl.program_id(0)
    row = (pid // S).to(tl.int64)
    rank = pid % S
    if HAS_UB:
        ub = tl.load(ub_ptr)  # before the exchange, which the compiler does not move loads past
    _begin_exchange(pid)
    PART: tl.constexpr = BLOCK // S
    offs = rank * PART + tl.arange(0, PART)
    x = tl.load(x_ptr + row * x_stride + offs).to(tl.float32)
    amax = _row_peak(abs_peak(x, 0), S)
    if HAS_UB:  # (`bounded_dynamic_scale` would load the bound here, after the exchange)
        amax = min_keeping_nan(amax, ub)
    scale = dynamic_scale(amax)
    tl.store(scale_ptr + row, scale, mask=rank == 0)
    q = quantize(x, 1.0 / scale, False)
    tl.store(q_ptr + row * q_stride + offs, q.to(q_ptr.dtype.element_ty))


def launch_cluster_quant(rows: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any | None:
    """`launch.clusters.launch_on_clusters` of `cluster_quant_kernel`."""
    return launch_on_clusters(cluster_quant_kernel, rows, args, kwargs)


def _quant_cluster_fits(x2: torch.Tensor, q2: torch.Tensor) -> bool:
    """Whether rows of dynamic quantization can be spread over a cluster at all: 16-bit rows of
    a power-of-two width, `x2` and `q2` 16-byte aligned (`rows_aligned`), where clusters
    launch (`launch.clusters.cluster_launches`)."""
    width = x2.shape[-1]
    return (
        width == next_power_of_2(width)
        and x2.element_size() == 2
        and rows_aligned(x2, q2)
        and cluster_launches(x2)
    )


def quant_cluster_for(x2: torch.Tensor, q2: torch.Tensor) -> int:
    """Blocks of a cluster a row of dynamic quantization (`cluster_quant_kernel`):
    `tuning.Clusters.quant_blocks` for 16-bit rows of one of `quant_widths` at decode sizes (up
    to `max_rows` rows) that fit a cluster (`_quant_cluster_fits`) while programmatic launch
    is off; else 1 (one program a row). A wide decode-size row is bound by what one SM moves;
    spread over a cluster, every block moves a slice of it. A row's peak is exact in any order,
    so the choice may depend on the batch."""
    clusters = tuning.COMMON.clusters
    spread = (
        x2.shape[-1] in clusters.quant_widths
        and x2.shape[0] <= clusters.max_rows
        and not programmatic_launch_enabled()
        and _quant_cluster_fits(x2, q2)
    )
    return clusters.quant_blocks if spread else 1


def launch_dynamic_quant(
    x: torch.Tensor,
    scale_ub: torch.Tensor | None,
    q: torch.Tensor,
    scale: torch.Tensor,
    *,
    cluster: int | None = None,
    num_warps: int | None = None,
) -> None:
    """Per-row absmax scale into `scale` (contiguous, one per row) and `q`. Tuning sweeps may
    set `cluster` (blocks a row: 1, or one of `CLUSTER_SIZES` where `quant_cluster_for` could
    spread the rows at all) and `num_warps` (a block's); either turns launch plans off. Neither
    changes a bit of the result."""
    hidden = x.shape[-1]
    n = num_rows(x)
    if n == 0:
        return
    values = (x, q, scale, scale if scale_ub is None else scale_ub)
    key = None
    tuned = cluster is not None or num_warps is not None
    if launch_plans_enabled() and not tuned:
        key = launch_key((), x, scale_ub, q, scale)
        if _DYNAMIC_QUANT_PLANS.replay(key, values):
            return
    x2, q2 = rows(x), rows(q)
    if cluster is None:
        cluster = quant_cluster_for(x2, q2)
    elif cluster != 1 and (cluster not in CLUSTER_SIZES or not _quant_cluster_fits(x2, q2)):
        raise ValueError(
            f"cluster={cluster}: expected 1, or one of {CLUSTER_SIZES} for 16-bit rows of a "
            "power-of-two width, 16-byte aligned, on a GPU where clusters launch "
            f"(x: {tuple(x.shape)} {x.dtype}, row stride {x2.stride(0)})"
        )
    if cluster > 1:
        ub = scale_ub if scale_ub is not None else scale
        cluster_args = (x2, x2.stride(0), q2, q2.stride(0), scale, ub)
        cluster_kwargs = dict(
            HAS_UB=scale_ub is not None,
            BLOCK=hidden,
            S=cluster,
            num_warps=(
                tuning.COMMON.clusters.quant_block_warps if num_warps is None else num_warps
            ),
        )
        compiled = launch_cluster_quant(n, cluster_args, cluster_kwargs)
        if compiled is not None:
            if key is not None:
                _DYNAMIC_QUANT_PLANS.record(
                    key,
                    cluster_quant_kernel,
                    compiled,
                    (n,),
                    cluster_args,
                    cluster_kwargs,
                    (0, 2, 4, 5),
                )
            return
    single = hidden <= tuning.COMMON.rows.max_single_pass
    block = next_power_of_2(hidden) if single else tuning.COMMON.rows.loop_block
    warps = warps_for(block) if num_warps is None else num_warps
    args = (
        x2,
        x2.stride(0),
        q2,
        q2.stride(0),
        scale,
        scale_ub if scale_ub is not None else scale,
        hidden,
    )
    kwargs = dict(
        HAS_UB=scale_ub is not None,
        BLOCK=block,
        SINGLE_PASS=single,
        EXACT_FP8=exact_rounding(),
        num_warps=warps,
        **launch_options(x2, (n,), warps),
    )
    compiled = dynamic_quant_kernel[(n,)](*args, **kwargs)
    if key is not None:
        _DYNAMIC_QUANT_PLANS.record(
            key, dynamic_quant_kernel, compiled, (n,), args, kwargs, (0, 2, 4, 5)
        )
