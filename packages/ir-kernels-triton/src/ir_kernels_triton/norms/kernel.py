"""The RMS-norm kernel family: optional residual add, optional weight, and no / static /
dynamic fp8 quantization of the output, with its launcher.

A program handles one row. Rows up to `tuning.Rows.max_single_pass` elements are read once and
held in registers; longer rows are processed in chunks (the row is read again from L2 for the
normalization pass). Each row's arithmetic is the same whatever the batch, so results are
batch-invariant. Rows that fill their block go without masks (`rules.full_row_for`); streamed
far beyond the L2, wide rows are read again after their sum instead of held through it
(`rules.reload_for`): neither changes a bit of the result. The plain norm also takes rows of
heads that no single stride addresses (`launch.rows.head_rows`: a packed projection's query
heads, normalized head by head), a program a row.

At decode sizes a wide row is bound by what one SM moves and issues. There `SPLIT` programs
share a row (`rules.split_for`): each loads the whole row for its sum, then reads its own slice
again (from L1) and normalizes, quantizes and stores only that; or the row is spread over the
blocks of a cluster (`rules.cluster_for`, `cluster_kernel`). A dynamic scale needs the row's
largest output, (x * w) / rms at its largest |x * w|: that peak is taken in the same reduction
as the sum (one pass of barriers, not two), its rows are not split, and its outputs are
computed as (x * w) / rms, so the scale is exactly their rounded peak (the plain norms, and
looped rows wider than a single pass, compute x / rms * w, as the reference does; the two
differ in a float32 bit at times).
The sum must run in the same order as in a program that has the row to itself,
and Triton orders it by the row's layout, which it picks from the widest access the row feeds:
the outputs are therefore stored, and the weight loaded, no wider a thread than the row is
loaded (`_as_loaded`), and only rows whose own loads are 16-byte aligned are split
(``tests/test_layouts.py`` compiles both forms and compares the layouts).
"""

import torch
import triton
import triton.language as tl

from ir_spec import row_view

from ..launch import tuning
from ..launch.clusters import CLUSTER_SIZES, sum_by_warps
from ..launch.device import dram_gbps_per_sm
from ..launch.plans import launch_key, launch_plans_enabled, plans_for
from ..launch.programmatic import await_previous_grid, launch_options
from ..launch.rows import (
    footprint_share,
    head_rows,
    next_power_of_2,
    num_rows,
    rows,
    rows_aligned,
    tensor_bytes,
)
from ..quant.fp8 import (
    abs_peak,
    bounded_dynamic_scale,
    exact_rounding,
    max_keeping_nan,
    quantize,
    round_to_dtype,
    sum_and_max,
)
from . import rules
from .cluster_kernel import cluster_norm_kernel, launch_cluster_norm


@triton.jit
def _normalize(x, w_ptr, offs, mask, inv_rms, HAS_WEIGHT: tl.constexpr):
    y = x * inv_rms
    if HAS_WEIGHT:
        w = _load(w_ptr + offs, mask, "").to(tl.float32)
        y = y * w
    return y


@triton.jit
def _load(ptr, mask, POLICY: tl.constexpr):
    """Load, zeros where `mask` is false (None: every lane is in the row), with L2 eviction
    `POLICY` ("", "evict_first" for data read once, "evict_last" for data read again)."""
    if mask is None:
        v = tl.load(ptr, eviction_policy=POLICY)
    else:
        v = tl.load(ptr, mask=mask, other=0.0, eviction_policy=POLICY)
    return v


@triton.jit
def _load_row(ptr, mask, POLICY: tl.constexpr):
    """Load activations as float32 (`_load`)."""
    return _load(ptr, mask, POLICY).to(tl.float32)


@triton.jit
def _read_again(x_row, r_row, offs, mask, POLICY: tl.constexpr, HAS_RESIDUAL: tl.constexpr):
    """Read `offs` of a row loaded before, with the arithmetic of the first read: the input as
    float32 and, with a residual, the sum in the activations' dtype (and as float32)."""
    x = _load_row(x_row + offs, mask, POLICY)
    s = x
    if HAS_RESIDUAL:
        s = (x + _load_row(r_row + offs, mask, POLICY)).to(x_row.dtype.element_ty)
        x = s.to(tl.float32)
    return x, s


@triton.jit
def _as_loaded(start, SIZE: tl.constexpr, VEC: tl.constexpr):
    """Offsets `start` to `start + SIZE` for an access of at most `VEC` elements a thread, a
    row's 16-byte load of activations (a range of its own: the hint marks the op that made
    it). Triton lays a row out by the widest access it feeds (a bf16 weight beside
    fp32 rows, 16 fp8 values a store); held to the load's, the row gets the same layout whether
    a program computes all of its outputs or, sharing it, a slice, so its sum runs in the same
    order (`split_for`)."""
    return start + tl.max_contiguous(tl.arange(0, SIZE), VEC)


@triton.jit
def norm_kernel(
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
    hidden,
    variance_size,
    eps,
    x_heads,
    x_head_stride,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    QUANT: tl.constexpr,
    HAS_UB: tl.constexpr,
    BLOCK: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    EXACT_FP8: tl.constexpr,
    EARLY_WEIGHT: tl.constexpr,
    EVICT_FIRST: tl.constexpr,
    SPLIT: tl.constexpr,
    FULL_ROW: tl.constexpr,
    RELOAD: tl.constexpr,
    PDL: tl.constexpr = False,
):
    await_previous_grid(PDL)
    row = tl.program_id(0).to(tl.int64)
    act_dtype = x_ptr.dtype.element_ty
    # rows of `x` are rows of heads where `x_heads` > 1 (`head_rows`); 1 specializes it away
    x_row = x_ptr + (row // x_heads) * x_stride + (row % x_heads) * x_head_stride
    r_row = r_ptr + row * r_stride
    res_row = res_ptr + row * res_stride
    out_row = out_ptr + row * out_stride
    if SINGLE_PASS:
        offs = tl.arange(0, BLOCK)
        # a row filling the block needs no masks (`FULL_ROW`: hidden == BLOCK == variance_size)
        mask = None if FULL_ROW else offs < hidden
        TAIL: tl.constexpr = BLOCK // SPLIT
        VEC: tl.constexpr = 128 // act_dtype.primitive_bitwidth
        if SPLIT > 1:
            # this program's slice of the outputs, read again below for its own arithmetic
            tail_start = tl.program_id(1) * TAIL
            tail = tail_start + tl.arange(0, TAIL)
            tail_mask = None if FULL_ROW else tail < hidden
        else:
            tail_start = 0
            tail = offs
            tail_mask = mask
        # the slice's offsets for the weight and the fp8 outputs
        narrow = _as_loaded(tail_start, TAIL, VEC)
        # `RELOAD`: the row is read again after the reduction rather than held through it
        FIRST: tl.constexpr = "evict_first" if EVICT_FIRST else "evict_last" if RELOAD else ""
        x = _load_row(x_row + offs, mask, FIRST)
        if QUANT == 1:
            # issued first: nothing moves a load past the reduction's barriers, and after them
            # its latency would be the row's
            scale = tl.load(scale_ptr)
        # a dynamic scale takes its weight before the reduction in every case (below)
        WEIGHT_FIRST: tl.constexpr = EARLY_WEIGHT or QUANT == 2
        if HAS_WEIGHT and WEIGHT_FIRST:
            # issued before the reduction so that its latency overlaps it
            w = _load(w_ptr + narrow, tail_mask, "").to(tl.float32)
            w_row = w
            if QUANT == 2 and SPLIT > 1:
                w_row = _load(w_ptr + _as_loaded(0, BLOCK, VEC), mask, "").to(tl.float32)
        elif QUANT == 2:
            w = 1.0
            w_row = 1.0
        if HAS_RESIDUAL:
            r = _load_row(r_row + offs, mask, FIRST)
            s = (x + r).to(act_dtype)
            x = s.to(tl.float32)
        if not RELOAD:
            if SPLIT > 1:
                # from L1: the whole row was just loaded; the same arithmetic gives the same bits
                x_tail, s_tail = _read_again(x_row, r_row, tail, tail_mask, "", HAS_RESIDUAL)
            else:
                x_tail = x
                if HAS_RESIDUAL:
                    s_tail = s
            if HAS_RESIDUAL:
                tl.store(res_row + tail, s_tail, mask=tail_mask)
        sq = x * x if FULL_ROW else tl.where(offs < variance_size, x * x, 0.0)
        if QUANT == 2:
            # the outputs are (x * w) / rms: the largest is the largest |x * w| over rms (a
            # positive factor), taken in the sum's reduction rather than in a second one
            xw = x * w_row
            if EXACT_FP8:
                # under the interpreter, which runs a custom reduction element by element in
                # Python: two plain reductions (the same values, in its own order)
                total = tl.sum(sq, axis=0)
                peak = abs_peak(xw, 0)
            else:
                total, peak = tl.reduce((sq, tl.abs(xw)), 0, sum_and_max)
        else:
            total = tl.sum(sq, axis=0)
        inv_rms = tl.rsqrt(total / variance_size + eps)
        if RELOAD:
            # from L2 (or L1), after the reduction: the row is not held through it
            x_tail, s_tail = _read_again(x_row, r_row, tail, tail_mask, "evict_first", HAS_RESIDUAL)
            if HAS_RESIDUAL:
                tl.store(res_row + tail, s_tail, mask=tail_mask)
        if QUANT == 2:
            y = (xw if SPLIT == 1 else x_tail * w) * inv_rms
        elif EARLY_WEIGHT:
            y = x_tail * inv_rms
            if HAS_WEIGHT:
                y = y * w
        else:
            y = _normalize(x_tail, w_ptr, narrow, tail_mask, inv_rms, HAS_WEIGHT)
        if QUANT == 0:
            tl.store(out_row + tail, y.to(out_ptr.dtype.element_ty), mask=tail_mask)
        else:
            y = round_to_dtype(y, act_dtype, EXACT_FP8)
            if QUANT == 2:
                # lanes past the row loaded zeros, so they hold zeros here; scaling by a
                # positive factor and rounding keep the order: the largest rounded output
                amax = (peak * inv_rms).to(act_dtype).to(tl.float32)
                scale = bounded_dynamic_scale(amax, scale_ub_ptr, HAS_UB)
                tl.store(scale_out_ptr + row, scale, mask=tl.program_id(1) == 0)
            q = quantize(y, 1.0 / scale, EXACT_FP8)
            tl.store(
                out_row + narrow,
                q.to(out_ptr.dtype.element_ty),
                mask=tail_mask,
            )
    else:
        if QUANT == 1:
            scale = tl.load(scale_ptr)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, hidden, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < hidden
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
            if HAS_RESIDUAL:
                r = tl.load(r_row + offs, mask=mask, other=0.0).to(tl.float32)
                s = (x + r).to(act_dtype)
                tl.store(res_row + offs, s, mask=mask)
                x = s.to(tl.float32)
            acc += tl.where(offs < variance_size, x * x, 0.0)
        inv_rms = tl.rsqrt(tl.sum(acc, axis=0) / variance_size + eps)
        tl.debug_barrier()  # the residual written above is read back below
        src_row = res_row if HAS_RESIDUAL else x_row
        if QUANT == 0:
            scale = 1.0
        if QUANT == 2:
            amax_acc = tl.zeros([BLOCK], dtype=tl.float32)
            for start in range(0, hidden, BLOCK):
                offs = start + tl.arange(0, BLOCK)
                mask = offs < hidden
                x = tl.load(src_row + offs, mask=mask, other=0.0).to(tl.float32)
                y = _normalize(x, w_ptr, offs, mask, inv_rms, HAS_WEIGHT)
                y = round_to_dtype(y, act_dtype, EXACT_FP8)
                amax_acc = max_keeping_nan(amax_acc, tl.where(mask, tl.abs(y), 0.0))
            amax = abs_peak(amax_acc, 0)
            scale = bounded_dynamic_scale(amax, scale_ub_ptr, HAS_UB)
            tl.store(scale_out_ptr + row, scale)
        inv_scale = 1.0 / scale
        for start in range(0, hidden, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < hidden
            x = tl.load(src_row + offs, mask=mask, other=0.0).to(tl.float32)
            y = _normalize(x, w_ptr, offs, mask, inv_rms, HAS_WEIGHT)
            if QUANT == 0:
                tl.store(out_row + offs, y.to(out_ptr.dtype.element_ty), mask=mask)
            else:
                y = round_to_dtype(y, act_dtype, EXACT_FP8)
                q = quantize(y, inv_scale, EXACT_FP8)
                tl.store(out_row + offs, q.to(out_ptr.dtype.element_ty), mask=mask)


#: Plans of `launch_norm` (`launch.plans`), and the positions among `norm_kernel`'s arguments of
#: the values that change between calls of one plan: the eight tensors and epsilon.
_NORM_PLANS = plans_for("norm")
_NORM_SLOTS = (0, 2, 4, 5, 7, 9, 10, 11, 14)
#: The same positions among `cluster_norm_kernel`'s arguments.
_CLUSTER_SLOTS = (0, 2, 4, 5, 7, 9, 10, 11, 13)


def launch_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    variance_size: int | None,
    out: torch.Tensor,
    *,
    residual: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
    quant: int = rules.QUANT_NONE,
    scale: torch.Tensor | None = None,
    scale_out: torch.Tensor | None = None,
    scale_ub: torch.Tensor | None = None,
    single_pass: bool | None = None,
    block: int | None = None,
    num_warps: int | None = None,
    early_weight: bool | None = None,
    evict_first: bool | None = None,
    max_registers: int | None = None,
    split: int | None = None,
    keep_masks: bool = False,
    reload: bool | None = None,
    cluster: int | None = None,
) -> None:
    """Run `norm_kernel` over the rows of `x` (all tensors already validated).

    `single_pass`, `block`, `num_warps`, `early_weight`, `evict_first`, `max_registers`
    (a cap per thread) and `split` (programs per single-pass row, a power of two up to the
    block; more than 1 only for 16-byte aligned single-pass rows of `x`, else a ValueError)
    override the configuration (for tuning sweeps); the default of the first three depends on
    the row width only. A single-pass row with a dynamic scale loads its weight first whatever
    `early_weight` says (its peak is reduced with the sum). `reload` reads a single-pass row
    again after its sum instead of holding it through the reduction (`reload_for`; when set,
    the default is no register cap); `keep_masks` keeps the masks of a row that fills its
    block (`full_row_for`). Neither changes the results. `cluster` (blocks of a cluster a
    row, 1 or one of `CLUSTER_SIZES`) overrides `cluster_for`, which other overrides turn off;
    more than 1 where that rule's conditions but the op's, the rows and programmatic launch do
    not hold is a ValueError. Launches that override nothing are replayed from plans
    (`launch.plans`) after the first of their key."""
    hidden = x.shape[-1]
    n = num_rows(x)
    if n == 0:
        return
    epsilon = float(epsilon)
    values = (
        x,
        x if residual is None else residual,
        x if weight is None else weight,
        out,
        x if residual_out is None else residual_out,
        x if scale is None else scale,
        x if scale_out is None else scale_out,
        x if scale_ub is None else scale_ub,
        epsilon,
    )
    # only launches that override nothing are planned (the overrides are for tuning)
    untuned = (
        single_pass is None
        and block is None
        and num_warps is None
        and early_weight is None
        and evict_first is None
        and max_registers is None
        and split is None
        and reload is None
        and cluster is None
        and not keep_masks
    )
    key = None
    if untuned and launch_plans_enabled():
        key = launch_key(
            (variance_size, quant),
            x,
            weight,
            out,
            residual,
            residual_out,
            scale,
            scale_out,
            scale_ub,
        )
        plan = _NORM_PLANS.get(key)
        # where the rule splits rows, a call whose outputs overlap its inputs has a plan of
        # its own (rows not split), which may be the only one of the key
        if plan is None or plan.detail:
            overlap_plan = _NORM_PLANS.get((key, "overlap"))
            if (plan is not None or overlap_plan is not None) and rules.writes_over_input(
                x, out, residual, residual_out
            ):
                plan = overlap_plan
        if plan is not None:
            plan.launch(values)
            return
    # per-head rows that no single stride addresses (`head_rows`: plain norms of a packed
    # projection's heads) take a program a row: neither split nor spread over a cluster
    x2 = row_view(x)
    heads = None if x2 is not None else head_rows(x)
    if x2 is not None:
        x_stride, x_heads, x_head_stride = x2.stride(0), 1, 0
    elif heads is None:
        raise ValueError(f"x: {tuple(x.shape)} with strides {x.stride()} has no rows to address")
    elif (
        residual is not None
        or quant != rules.QUANT_NONE
        or split not in (None, 1)
        or cluster not in (None, 1)
    ):
        raise ValueError(
            f"x: per-head rows {tuple(x.shape)} with strides {x.stride()} take the plain norm "
            "alone, one program a row (no residual, quantization, split or cluster)"
        )
    else:
        x2 = x
        x_stride, x_heads, x_head_stride = heads
        split, cluster = 1, 1
    out2 = rows(out)
    r2 = rows(residual) if residual is not None else x2
    res2 = rows(residual_out) if residual_out is not None else x2
    table = tuning.COMMON
    single = hidden <= table.rows.max_single_pass if single_pass is None else single_pass
    if block is None:
        block = next_power_of_2(hidden) if single else table.rows.loop_block
    # bytes read and written: x and out, the residual in and out, the dynamic scales
    share = footprint_share(x, tensor_bytes(x, out, residual, residual, scale_out))
    has_residual = residual is not None
    # the card's bandwidth is asked only where the rules read it: even a cached answer costs
    # a visible share of a decode-size launch
    streamed = (
        quant == rules.QUANT_NONE
        and n > table.norms.few_rows
        and share is not None
        and share > (table.norms.reload_l2_share if has_residual else 1.0)
    )
    gbps = dram_gbps_per_sm(x) if streamed else None
    if reload is None:
        reload = single and rules.reload_for(n, quant, block, share, x.element_size(), gbps)
    if max_registers is None and not reload:
        max_registers = rules.max_registers_for(
            n, quant, block, has_residual, share, x.element_size(), gbps
        )
    full_row = not keep_masks and rules.full_row_for(
        hidden,
        variance_size,
        block,
        single,
        same_width=weight is None or weight.element_size() == x.element_size(),
        capped=max_registers is not None,
    )
    if cluster is None:
        clusters = (
            rules.cluster_for(x, weight, out, residual, residual_out, block, quant, full_row)
            if untuned
            else 1
        )
    else:
        clusters = cluster
        if cluster != 1 and (
            cluster not in CLUSTER_SIZES
            or rules.norm_warps(block, quant, has_residual) % cluster
            or not rules.cluster_fits(x, weight, out, residual, residual_out, block, full_row)
        ):
            raise ValueError(
                f"cluster={cluster}: expected 1, or one of {CLUSTER_SIZES} that divides the "
                f"row's warps ({rules.norm_warps(block, quant, has_residual)}) for 16-bit rows of "
                f"{' or '.join(map(str, table.clusters.norm_widths))} elements that fill their "
                "block beside a weight, every tensor 16-byte aligned, on a GPU where clusters "
                "launch "
                f"(x: {tuple(x.shape)} {x.dtype}, block {block}, full row {full_row})"
            )
    # the rows and scales, as both kernels take them (absent ones stand in as x)
    tensor_args = (
        x2,
        x_stride,
        r2,
        r2.stride(0),
        weight if weight is not None else x2,
        out2,
        out2.stride(0),
        res2,
        res2.stride(0),
        scale if scale is not None else x2,
        scale_out if scale_out is not None else x2,
        scale_ub if scale_ub is not None else x2,
    )
    if clusters > 1:
        warps = rules.norm_warps(block, quant, has_residual)
        cluster_args = (*tensor_args, hidden, epsilon)
        cluster_kwargs = dict(
            HAS_RESIDUAL=has_residual,
            QUANT=quant,
            HAS_UB=scale_ub is not None,
            BLOCK=block,
            ROW_WARPS=warps,
            S=clusters,
            num_warps=warps // clusters,
            **sum_by_warps(clusters, warps, block),
        )
        compiled = launch_cluster_norm(n, cluster_args, cluster_kwargs)
        if compiled is not None:
            if key is not None:
                # spread because it writes in place: kept apart as the split's overlap plan
                in_place = rules.spreads_only_in_place(block, quant, has_residual)
                _NORM_PLANS.record(
                    (key, "overlap") if in_place else key,
                    cluster_norm_kernel,
                    compiled,
                    (n,),
                    cluster_args,
                    cluster_kwargs,
                    _CLUSTER_SLOTS,
                )
            return
    # whether the rule splits the rows but for an overlap (a replay checks that again)
    may_split = False
    if split is None:
        split = rules.aligned_split(x, block, quant, single, has_residual)
        may_split = split > 1
        if may_split and rules.writes_over_input(x, out, residual, residual_out):
            split = 1
    elif (
        split < 1
        or split & (split - 1)
        or split > block
        or (split > 1 and (not single or not rows_aligned(x)))
    ):
        raise ValueError(
            f"split={split}: expected a power of two up to the row block ({block}), and 1 "
            f"for looped rows (wider than {table.rows.max_single_pass}) or rows not 16-byte "
            "aligned "
            f"(x: address {x.data_ptr():#x}, row stride {x_stride})"
        )
    warps = rules.norm_warps(block, quant, has_residual) if num_warps is None else num_warps
    variance = hidden if variance_size is None else variance_size
    args = (*tensor_args, hidden, variance, epsilon, x_heads, x_head_stride)
    kwargs = dict(
        HAS_RESIDUAL=residual is not None,
        HAS_WEIGHT=weight is not None,
        QUANT=quant,
        HAS_UB=scale_ub is not None,
        BLOCK=block,
        SINGLE_PASS=single,
        EXACT_FP8=exact_rounding(),
        EARLY_WEIGHT=(
            rules.early_weight_for(n, quant, block, has_residual, share)
            if early_weight is None
            else early_weight
        ),
        num_warps=warps,
        EVICT_FIRST=(
            rules.evict_first_for(share, has_residual) if evict_first is None else evict_first
        ),
        SPLIT=split,
        FULL_ROW=full_row,
        RELOAD=reload and single,
        **({} if max_registers is None else {"maxnreg": max_registers}),
        **launch_options(x2, (n, split), warps),
    )
    compiled = norm_kernel[(n, split)](*args, **kwargs)
    if key is not None:
        overlap = may_split and split == 1
        _NORM_PLANS.record(
            (key, "overlap") if overlap else key,
            norm_kernel,
            compiled,
            (n, split),
            args,
            kwargs,
            _NORM_SLOTS,
            detail=may_split,
        )
