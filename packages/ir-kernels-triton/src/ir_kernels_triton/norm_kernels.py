"""One Triton kernel family for the RMS-norm ops: optional residual add, optional weight, and
no / static / dynamic fp8 quantization of the output.

A program handles one row. Rows up to `MAX_SINGLE_PASS` elements are read once and held in
registers; longer rows are processed in chunks (the row is read again from L2 for the
normalization pass). Each row's arithmetic is the same whatever the batch, so results are
batch-invariant. Rows that fill their block go without masks (`full_row_for`); streamed far
beyond the L2, wide rows are read again after their sum instead of held through it
(`reload_for`): neither changes a bit of the result.

At decode sizes a wide row is bound by what one SM moves and issues. There `SPLIT` programs
share a row (`split_for`): each loads the whole row for its sum, then reads its own slice
again (from L1) and normalizes, quantizes and stores only that. A dynamic scale needs the
row's largest output, (x * w) / rms at its largest |x * w|: that peak is taken in the same
reduction as the sum (one pass of barriers, not two), its rows are not split, and its outputs
are computed as (x * w) / rms, so the scale is exactly their rounded peak (the plain norms,
and looped rows wider than `MAX_SINGLE_PASS`, compute x / rms * w, as the reference does; the
two differ in a float32 bit at times).
The sum must run in the same order as in a program that has the row to itself,
and Triton orders it by the row's layout, which it picks from the widest access the row feeds:
the outputs are therefore stored, and the weight loaded, no wider a thread than the row is
loaded (`_as_loaded`), and only rows whose own loads are 16-byte aligned are split
(`benchmarks/cpu/triton_layouts.py` compiles both forms and compares the layouts).
"""

import torch
import triton
import triton.language as tl

from ir_spec import shares_memory

from .cluster_norm import (
    CLUSTER,
    CLUSTER_BLOCKS,
    CLUSTER_ROWS,
    CLUSTER_SIZES,
    cluster_launches,
    cluster_norm_kernel,
    launch_cluster_norm,
    sum_and_max,
    sum_by_warps,
)
from .fp8 import exact_rounding, quantize, round_to_dtype
from .launch import await_previous_grid, launch_options, programmatic_launch_enabled
from .plans import launch_key, launch_plans_enabled, plans_for
from .platform import (
    LOOP_BLOCK,
    MAX_SINGLE_PASS,
    deep_loads,
    dram_gbps_per_sm,
    footprint_share,
    next_power_of_2,
    num_rows,
    rows,
    rows_aligned,
    sm_count,
    tensor_bytes,
    warps_for,
)

FP8_MAX = 448.0
MIN_SCALE = 1.0 / (448.0 * 512.0)

QUANT_NONE = 0
QUANT_STATIC = 1
QUANT_DYNAMIC = 2


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
    x_row = x_ptr + row * x_stride
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
                peak = tl.max(tl.abs(xw), axis=0)
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
                if HAS_UB:
                    amax = tl.minimum(amax, tl.load(scale_ub_ptr))
                scale = tl.maximum(amax / 448.0, 1.0 / (448.0 * 512.0))
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
                amax_acc = tl.maximum(amax_acc, tl.where(mask, tl.abs(y), 0.0))
            amax = tl.max(amax_acc, axis=0)
            if HAS_UB:
                amax = tl.minimum(amax, tl.load(scale_ub_ptr))
            scale = tl.maximum(amax / 448.0, 1.0 / (448.0 * 512.0))
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


#: Row blocks from which the quantizing variants without a residual take 8 warps (the dynamic
#: one; the static one from `WIDE_STATIC_QUANT_BLOCK`) and load the weight early.
WIDE_QUANT_BLOCK = 8192
WIDE_STATIC_QUANT_BLOCK = 4096


def norm_warps(block: int, quant: int, residual: bool = False) -> int:
    """Warps per row (by the row block only: the reduction order, hence the result, depends on
    it). Sweeps found the quantizing variants fastest with at most 4 warps up to 4096-element
    rows and 8 from 8192 (H200 and H100; 4 warps left a single 8192-element row 0.3-0.5 µs
    slower), except the static one, which takes 8 from 4096 (H100: 1-6 % faster at every batch
    from 1 to 16384 rows), and those with a residual, which run best at 8 warps for
    2048-element rows and 16 from 4096 (H100: 5-15 % faster from 1 to 1024 rows, within 1 %
    above; `benchmarks/results/triton-tuning-H100.log`, `triton-tuning-H200.log`)."""
    warps = warps_for(block)
    if quant == QUANT_NONE:
        return warps
    if residual:
        return min(16, max(4, block // 256))
    wide = WIDE_STATIC_QUANT_BLOCK if quant == QUANT_STATIC else WIDE_QUANT_BLOCK
    return 8 if block >= wide else min(warps, 4)


#: Rows up to which the weight is loaded before the reduction in every variant.
FEW_ROWS = 256


#: Footprint, as a multiple of the L2 size, up to which a plain fused add over more than
#: `FEW_ROWS` rows loads the weight after the reduction.
LATE_WEIGHT_L2_SHARE = 2.0


def early_weight_for(
    rows_: int, quant: int, block: int, residual: bool = False, l2_share: float | None = None
) -> bool:
    """Load the weight before the row reduction (hides its latency, but keeps it live through
    the reduction: a loss for the quantizing variants of narrow rows at large batches, except
    with a residual and its wider warps, and for the plain fused add beyond `FEW_ROWS` rows
    while its footprint is at most twice the L2 size, `l2_share` (H100: 1024 x 4096 13 %
    faster, `triton-tuning-H100.log` section 9)). A dynamic scale always takes it first: its
    peak is taken in the sum's reduction (`norm_kernel` loads it early whatever the flag).
    The arithmetic is the same either way, so the choice may depend on the batch."""
    if quant == QUANT_DYNAMIC:
        return True
    if quant == QUANT_NONE and residual and rows_ > FEW_ROWS:
        return l2_share is None or l2_share > LATE_WEIGHT_L2_SHARE
    return quant == QUANT_NONE or residual or rows_ <= FEW_ROWS or block >= WIDE_QUANT_BLOCK


#: Row blocks from which plain rms_norm streamed from DRAM on a card with deep loads takes the
#: register cap of rows within the L2.
STREAMED_CAP_BLOCK = 8192


def max_registers_for(
    rows_: int,
    quant: int,
    block: int,
    residual: bool,
    l2_share: float | None,
    element_size: int,
    gbps_per_sm: float | None = None,
) -> int | None:
    """A cap on registers per thread for the plain norms of 16-bit rows beyond `FEW_ROWS` rows
    (None: the compiler's choice). More programs fit an SM under the cap: H100, rms_norm
    whose footprint lies between a quarter of the L2 size and the L2 size with 32 (1024 x 8192:
    8.80 to 8.26 µs), fused add of 8192-wide rows streaming from memory with 48 (0.3-0.5 %);
    section 9 of `triton-tuning-H100.log`. On a card of `gbps_per_sm` from
    `DEEP_LOADS_GBPS_PER_SM` (an H200) rms_norm rows of `STREAMED_CAP_BLOCK` take 32 beyond the
    L2 too (4096 x 8192 35.30 to 34.44 µs, 16384 x 8192 131.84 to 130.17; a second run 34.80
    to 34.62 and 131.01 to 130.83; round 3 of `triton-tuning-H200.log`), except where the
    row is read again after its sum (`reload_for`), which runs best uncapped. Registers do
    not change the arithmetic, so the cap may depend on the batch and the card."""
    if quant != QUANT_NONE or rows_ <= FEW_ROWS or element_size != 2 or l2_share is None:
        return None
    if reload_for(rows_, quant, block, l2_share, element_size, gbps_per_sm):
        return None
    if residual:
        return 48 if block >= 8192 and l2_share > LATE_WEIGHT_L2_SHARE else None
    if l2_share > 1.0 and block >= STREAMED_CAP_BLOCK and deep_loads(gbps_per_sm):
        return 32
    return 32 if 0.25 < l2_share <= 1.0 else None


#: Footprint, as a multiple of the L2 size, beyond which the plain norms of rows of
#: `RELOAD_BLOCK` or more read each row again after its sum on a card with deep loads.
RELOAD_L2_SHARE = 4.0
RELOAD_BLOCK = 8192


def reload_for(
    rows_: int,
    quant: int,
    block: int,
    l2_share: float | None,
    element_size: int,
    gbps_per_sm: float | None,
) -> bool:
    """Read a single-pass row again after its sum (from L2, where the first read asked it
    kept) rather than hold it in registers through the reduction, as Inductor's looped
    kernel does: for the plain norms of 16-bit rows of `RELOAD_BLOCK` or more whose footprint
    exceeds `RELOAD_L2_SHARE` times the L2 size, on a card of `DEEP_LOADS_GBPS_PER_SM` or more
    (H200 probe, one process: rms_norm 16384 x 8192 126.8 µs against 129.3 for the fastest
    setting that holds the row, Inductor 127.2; fused add 250.0 against 260.3, Inductor 266.3;
    no gain at 4096 x 8192 or with a residual at 1024 x 8192; grid runs before and after:
    129.88 to 127.00 and 260.57 to 252.62; `triton-tuning-H200.log` round 4; the H100
    was not measured). The row's values and arithmetic are the same, so the choice may depend
    on the batch and the card."""
    return (
        quant == QUANT_NONE
        and rows_ > FEW_ROWS
        and element_size == 2
        and block >= RELOAD_BLOCK
        and l2_share is not None
        and l2_share > RELOAD_L2_SHARE
        and deep_loads(gbps_per_sm)
    )


#: Footprints (bytes the op reads and writes) up to this multiple of the L2 size take the
#: evict-first hint, from just above the L2 size; `EVICT_FIRST_L2_MULTIPLE_RESIDUAL` with a
#: residual.
EVICT_FIRST_L2_MULTIPLE = 1.2
EVICT_FIRST_L2_MULTIPLE_RESIDUAL = 1.3


def evict_first_for(l2_share: float | None, residual: bool = False) -> bool:
    """Mark the activations first out of L2 when the op's footprint, `l2_share` of the L2
    cache, just exceeds it. H100 grid (50 MB L2): fused add + norm + fp8 at 4096 x 2048 and
    1024 x 8192 (56 MB) ran 5-11 % faster with the hint, ahead of Inductor's kernel; ops that
    fit in L2 (1024 x 4096 with a residual, 32 MB) ran up to 34 % slower, as replays no longer
    found their inputs there, and ops streaming from DRAM (16384 rows) 2 % slower. The plain
    fused add of the same shapes (64 MB, 1.28 of the L2) ran 1-3 % faster with it, rms_norm
    at 4096 x 4096 (64 MB) 1.4 % slower (`triton-tuning-H100.log` section 11). A hint only:
    the results do not change, so it may depend on the batch."""
    top = EVICT_FIRST_L2_MULTIPLE_RESIDUAL if residual else EVICT_FIRST_L2_MULTIPLE
    return l2_share is not None and 1.0 < l2_share <= top


#: Programs sharing a decode-size row.
ROW_SPLIT = 4


def split_for(
    rows_: int,
    block: int,
    quant: int,
    single_pass: bool,
    sms: int | None,
    residual: bool = False,
) -> int:
    """Programs per single-pass row. 1 for a dynamic scale (`QUANT_DYNAMIC`): with its peak
    taken in the sum's reduction one program a row ran fastest, H200 (`triton-tuning-H200.log`
    round 7): 1 x 4096 1.70 µs against 1.97 with 4 programs, 16 x 4096 1.81 against 2.10 with
    2, 16 x 8192 2.11 against 2.19 with 4. Otherwise: for blocks of 8192 or more, `ROW_SPLIT`
    up to 16 rows and 2 up to 32; for 4096-element blocks `ROW_SPLIT` up to 4 rows (8 without
    fp8 output) and 2 up to 16, except the static-fp8 norm without a residual, which takes 2
    throughout; halved until every row's programs fit the `sms` SMs at once; else 1. H100, bf16
    (`triton-tuning-H100.log` sections 13 and 14), one program a row against the split:
    static fp8 1 x 8192 2.06 to 1.80 µs, 16 rows 2.16 to 2.00; fused add + static fp8 1 x 8192
    2.24 to 1.99; fused add 16 x 8192 2.41 to 2.15, 32 rows 2.52 to 2.37 (2 programs); dynamic
    fp8, its peak then in a second reduction, 1 x 8192 2.23 to 2.08, 8 x 4096 1.96 to 1.87
    (2); static fp8 1 x 4096 1.69 to 1.63 (2; 4 gave 1.71). From 32 rows of 4096 one program
    a row is as fast or faster. The split does not change the arithmetic, so it may depend on
    the batch."""
    if not single_pass or sms is None or quant == QUANT_DYNAMIC:
        return 1
    if block >= 8192:
        split = ROW_SPLIT if rows_ <= 16 else 2 if rows_ <= 32 else 1
    elif block >= 4096:
        if rows_ > 16:
            split = 1
        elif quant == QUANT_STATIC and not residual:
            split = 2
        else:
            split = ROW_SPLIT if rows_ <= (8 if quant == QUANT_NONE else 4) else 2
    else:
        split = 1
    while split > 1 and rows_ * split > sms:
        split //= 2
    return split


def full_row_for(
    hidden: int,
    variance_size: int | None,
    block: int,
    single_pass: bool,
    *,
    same_width: bool,
    capped: bool,
) -> bool:
    """Whether a single-pass row fills its block, so that its loads and stores need no masks
    and its sum of squares no selection (the variance over the whole row). H200, two grid runs
    before and after (`triton-tuning-H200.log` round 4): rms_norm + dynamic fp8 16384 x 8192
    103.16 to 98.97 µs, 16384 x 2048 27.40 to 24.82, + static fp8 4096 x 2048 6.19 to 5.60;
    no change at decode sizes (probe). Not under a register cap (`capped`: the cap of 32
    spilled without the masks, Triton 3.6; rms_norm 1024 x 8192 6.70 to 7.41 µs), and only
    beside a weight of the row's element width (`same_width`; beside another, the masks
    change the layout Triton gives the row, hence the order of its sum; with equal widths
    `benchmarks/cpu/triton_layouts.py` finds the same layouts either way, so the choice may
    follow the batch, as the cap does)."""
    return (
        single_pass
        and hidden == block
        and variance_size in (None, hidden)
        and same_width
        and not capped
    )


def _writes_over_input(
    x: torch.Tensor,
    out: torch.Tensor,
    residual: torch.Tensor | None,
    residual_out: torch.Tensor | None,
) -> bool:
    """Whether an output shares memory with an input (in place, or any overlap)."""
    inputs = [t for t in (x, residual) if t is not None]
    outputs = [t for t in (out, residual_out) if t is not None]
    return any(shares_memory(o, i) for o in outputs for i in inputs)


def row_split(
    x: torch.Tensor,
    out: torch.Tensor,
    residual: torch.Tensor | None,
    residual_out: torch.Tensor | None,
    block: int,
    quant: int,
    single_pass: bool,
) -> int:
    """`split_for` of this launch, but 1 where the rows of `x` are not 16-byte aligned as Triton
    specializes them (address and row stride multiples of 16; the row's layout follows its
    alignment) or where an output shares memory with an input (in place: a program sharing a
    row reads all of it, possibly after others wrote their slices). The memory check runs only
    where the rule would split (it costs about a microsecond a launch)."""
    split = _aligned_split(x, block, quant, single_pass, residual is not None)
    if split > 1 and _writes_over_input(x, out, residual, residual_out):
        return 1
    return split


def _aligned_split(
    x: torch.Tensor, block: int, quant: int, single_pass: bool, residual: bool
) -> int:
    """`split_for` of a launch on `x`, but 1 where its rows are not 16-byte aligned (whether
    outputs overlap inputs aside: `row_split`)."""
    split = split_for(num_rows(x), block, quant, single_pass, sm_count(x), residual=residual)
    return split if split > 1 and rows_aligned(x) else 1


def _cluster_fits(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    out: torch.Tensor,
    residual: torch.Tensor | None,
    residual_out: torch.Tensor | None,
    block: int,
    full_row: bool,
) -> bool:
    """Whether a launch's rows can be spread over a cluster at all: 16-bit rows of one of
    `CLUSTER_BLOCKS` that fill their block (`full_row`) beside a weight, the weight and every
    tensor of rows 16-byte aligned as Triton specializes them (`rows_aligned`: the one-program
    kernel's layout, hence the order of its sum, follows the alignment), where clusters launch
    (`cluster_norm.cluster_launches`)."""
    return (
        block in CLUSTER_BLOCKS
        and full_row
        and weight is not None
        and x.element_size() == 2
        and cluster_launches(x)
        and weight.data_ptr() % 16 == 0
        and rows_aligned(*(t for t in (x, out, residual, residual_out) if t is not None))
    )


#: The row block whose decode rows take a cluster for the fused adds and the dynamic-fp8 norm;
#: narrower rows of `CLUSTER_BLOCKS` take one only where the split cannot serve them well
#: (`cluster_for`).
WIDE_CLUSTER_BLOCK = 8192


def spreads_only_in_place(block: int, quant: int, residual: bool) -> bool:
    """Whether `cluster_for` spreads this launch's rows only when its outputs overlap its
    inputs: the plain fused add's rows narrower than `WIDE_CLUSTER_BLOCK`, whose split leads
    out of place (a launch plan of its own keeps the two apart)."""
    return (
        residual and quant == QUANT_NONE and block in CLUSTER_BLOCKS and block < WIDE_CLUSTER_BLOCK
    )


def cluster_for(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    out: torch.Tensor,
    residual: torch.Tensor | None,
    residual_out: torch.Tensor | None,
    block: int,
    quant: int,
    full_row: bool,
) -> int:
    """Blocks of a cluster a row (`cluster_norm`), at decode sizes (up to `CLUSTER_ROWS` rows)
    whose rows fit a cluster (`_cluster_fits`), with programmatic launch off: `CLUSTER` for
    rows of `WIDE_CLUSTER_BLOCK` of the fused adds (in place too: each block reads only what
    it writes), the dynamic-fp8 norm and, past `ROW_SPLIT` rows, plain rms_norm; for narrower
    rows, the plain fused add in place
    (`spreads_only_in_place`; the split cannot serve a row written in place) and its
    static-fp8 form past `ROW_SPLIT` rows (where the split takes two programs a row); else 1.
    H200 (`triton-tuning-H200.log` rounds 11, 12, 14 and 17), against the split and, in place,
    one program a row: fused add 16 x 8192 1.82-1.84 against 1.99-2.02 µs at four blocks, in
    place 1.81 against 2.43; dynamic fp8 16 x 8192 1.97-2.02 against 2.09-2.11 at four blocks,
    1.85-1.87 at eight; at 4096 wide the fused add in place 1.64 against 1.74 (16 rows), 1.58
    against 1.64 (1 row), the static-fp8 form 1.66 against 1.73 (16 rows; level with the split
    at 1 and 4 rows). Where a block holds several warps, each sends its own partial
    (`cluster_norm.sum_by_warps`, round 18): plain rms_norm at 8192 wide then runs level with
    the split up to 4 rows and ahead past them (8 x 8192 1.59 against 1.64 µs, 16 x 8192
    1.63-1.67 against 1.69-1.71); the static-fp8 norm (one warp a block there) and rows of
    4096 stay split (16 x 4096 1.62 against 1.52 at eight blocks before)."""
    n = num_rows(x)
    has_residual = residual is not None
    in_place_only = spreads_only_in_place(block, quant, has_residual)
    if block >= WIDE_CLUSTER_BLOCK:
        plain_rows = quant == QUANT_NONE and not has_residual
        wanted = has_residual or quant == QUANT_DYNAMIC or (plain_rows and n > ROW_SPLIT)
    else:
        wanted = in_place_only or (has_residual and quant == QUANT_STATIC and n > ROW_SPLIT)
    spread = (
        wanted
        and n <= CLUSTER_ROWS
        and not programmatic_launch_enabled()
        and _cluster_fits(x, weight, out, residual, residual_out, block, full_row)
        # (the memory check last: it costs about a microsecond)
        and (not in_place_only or _writes_over_input(x, out, residual, residual_out))
    )
    return CLUSTER if spread else 1


#: Plans of `launch_norm` (`plans`), and the positions among `norm_kernel`'s arguments of
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
    quant: int = QUANT_NONE,
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
    override the configuration (for tuning); the default of the first three depends on the row
    width only. A single-pass row with a dynamic scale loads its weight first whatever
    `early_weight` says (its peak is reduced with the sum). `reload` reads a single-pass row
    again after its sum instead of holding it through the reduction (`reload_for`; when set,
    the default is no register cap); `keep_masks` keeps the masks of a row that fills its
    block (`full_row_for`). Neither changes the results. `cluster` (blocks of a cluster a
    row, 1 or one of `CLUSTER_SIZES`) overrides `cluster_for`, which other overrides turn off;
    more than 1 where that rule's conditions but the op's, the rows and programmatic launch do
    not hold is a ValueError. Launches that override nothing are replayed from plans (`plans`)
    after the first of their key."""
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
            if (plan is not None or overlap_plan is not None) and _writes_over_input(
                x, out, residual, residual_out
            ):
                plan = overlap_plan
        if plan is not None:
            plan.launch(values)
            return
    x2 = rows(x)
    out2 = rows(out)
    r2 = rows(residual) if residual is not None else x2
    res2 = rows(residual_out) if residual_out is not None else x2
    single = hidden <= MAX_SINGLE_PASS if single_pass is None else single_pass
    if block is None:
        block = next_power_of_2(hidden) if single else LOOP_BLOCK
    # bytes read and written: x and out, the residual in and out, the dynamic scales
    share = footprint_share(x, tensor_bytes(x, out, residual, residual, scale_out))
    has_residual = residual is not None
    # the card's bandwidth asked only where the rules use it (asked at every launch, it cost
    # decode launches 0.1-0.2 µs of replayed time: `triton-tuning-H200.log`, round 2)
    streamed = (
        quant == QUANT_NONE
        and n > FEW_ROWS
        and share is not None
        and share > (RELOAD_L2_SHARE if has_residual else 1.0)
    )
    gbps = dram_gbps_per_sm(x) if streamed else None
    if reload is None:
        reload = single and reload_for(n, quant, block, share, x.element_size(), gbps)
    if max_registers is None and not reload:
        max_registers = max_registers_for(
            n, quant, block, has_residual, share, x.element_size(), gbps
        )
    full_row = not keep_masks and full_row_for(
        hidden,
        variance_size,
        block,
        single,
        same_width=weight is None or weight.element_size() == x.element_size(),
        capped=max_registers is not None,
    )
    if cluster is None:
        clusters = (
            cluster_for(x, weight, out, residual, residual_out, block, quant, full_row)
            if untuned
            else 1
        )
    else:
        clusters = cluster
        if cluster != 1 and (
            cluster not in CLUSTER_SIZES
            or norm_warps(block, quant, has_residual) % cluster
            or not _cluster_fits(x, weight, out, residual, residual_out, block, full_row)
        ):
            raise ValueError(
                f"cluster={cluster}: expected 1, or one of {CLUSTER_SIZES} that divides the "
                f"row's warps ({norm_warps(block, quant, has_residual)}) for 16-bit rows of "
                f"{' or '.join(map(str, CLUSTER_BLOCKS))} elements that fill their block beside "
                "a weight, every tensor 16-byte aligned, on a GPU where clusters launch "
                f"(x: {tuple(x.shape)} {x.dtype}, block {block}, full row {full_row})"
            )
    # the rows and scales, as both kernels take them (absent ones stand in as x)
    tensor_args = (
        x2,
        x2.stride(0),
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
        warps = norm_warps(block, quant, has_residual)
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
                in_place = spreads_only_in_place(block, quant, has_residual)
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
        split = _aligned_split(x, block, quant, single, has_residual)
        may_split = split > 1
        if may_split and _writes_over_input(x, out, residual, residual_out):
            split = 1
    elif (
        split < 1
        or split & (split - 1)
        or split > block
        or (split > 1 and (not single or not rows_aligned(x)))
    ):
        raise ValueError(
            f"split={split}: expected a power of two up to the row block ({block}), and 1 "
            "for rows wider than MAX_SINGLE_PASS or not 16-byte aligned "
            f"(x: address {x.data_ptr():#x}, row stride {x2.stride(0)})"
        )
    warps = norm_warps(block, quant, has_residual) if num_warps is None else num_warps
    args = (*tensor_args, hidden, hidden if variance_size is None else variance_size, epsilon)
    kwargs = dict(
        HAS_RESIDUAL=residual is not None,
        HAS_WEIGHT=weight is not None,
        QUANT=quant,
        HAS_UB=scale_ub is not None,
        BLOCK=block,
        SINGLE_PASS=single,
        EXACT_FP8=exact_rounding(),
        EARLY_WEIGHT=(
            early_weight_for(n, quant, block, has_residual, share)
            if early_weight is None
            else early_weight
        ),
        num_warps=warps,
        EVICT_FIRST=(evict_first_for(share, has_residual) if evict_first is None else evict_first),
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
