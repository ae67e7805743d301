"""Launch-configuration rules of the RMS-norm kernels (`norm_kernels`): warps, when the weight
is loaded, register caps, reloads, cache hints, how many programs or cluster blocks share a
decode-size row, and when a row needs no masks. Each rule's docstring gives the measurements
it rests on and says whether the choice may follow the batch: a rule that changes the order of
a row's sum (the warps) depends on the row block alone, so results stay batch-invariant.
"""

import torch

from ir_spec import shares_memory

from .cluster_norm import CLUSTER, CLUSTER_BLOCKS, CLUSTER_ROWS, cluster_launches
from .launch import programmatic_launch_enabled
from .platform import deep_loads, num_rows, rows_aligned, sm_count, warps_for

#: What a norm does with its output: nothing, static or dynamic fp8 quantization (the
#: kernels' ``QUANT`` argument).
QUANT_NONE = 0
QUANT_STATIC = 1
QUANT_DYNAMIC = 2


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


def writes_over_input(
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
    split = aligned_split(x, block, quant, single_pass, residual is not None)
    if split > 1 and writes_over_input(x, out, residual, residual_out):
        return 1
    return split


def aligned_split(
    x: torch.Tensor, block: int, quant: int, single_pass: bool, residual: bool
) -> int:
    """`split_for` of a launch on `x`, but 1 where its rows are not 16-byte aligned (whether
    outputs overlap inputs aside: `row_split`)."""
    split = split_for(num_rows(x), block, quant, single_pass, sm_count(x), residual=residual)
    return split if split > 1 and rows_aligned(x) else 1


def cluster_fits(
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
    whose rows fit a cluster (`cluster_fits`), with programmatic launch off: `CLUSTER` for
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
        and cluster_fits(x, weight, out, residual, residual_out, block, full_row)
        # (the memory check last: it costs about a microsecond)
        and (not in_place_only or writes_over_input(x, out, residual, residual_out))
    )
    return CLUSTER if spread else 1
