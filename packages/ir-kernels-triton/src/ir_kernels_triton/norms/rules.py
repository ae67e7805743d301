"""Launch-configuration rules of the RMS-norm kernels (`norms.kernel`, `norms.cluster_kernel`):
warps, when the weight is loaded, register caps, reloads, cache hints, how many programs or
cluster blocks share a decode-size row, and when a row needs no masks. The values are entries
of the launch table (`launch.tuning`); each rule says what it decides and whether the choice
may follow the batch: a rule that changes the order of a row's sum (the warps) depends on the
row block alone, so results stay batch-invariant.
"""

import torch

from ir_spec import shares_memory

from ..launch import tuning
from ..launch.clusters import cluster_launches
from ..launch.device import sm_count
from ..launch.programmatic import programmatic_launch_enabled
from ..launch.rows import num_rows, rows_aligned, warps_for

#: What a norm does with its output: nothing, static or dynamic fp8 quantization (the
#: kernels' ``QUANT`` argument).
QUANT_NONE = 0
QUANT_STATIC = 1
QUANT_DYNAMIC = 2


def norm_warps(block: int, quant: int, residual: bool = False) -> int:
    """Warps per row, by the row block only: the reduction order, hence the result, depends on
    it. The plain norms take `launch.rows.warps_for`; with a residual a row takes more warps
    (its two loads and store a row keep more in flight); the quantizing variants without one
    take few warps below their wide block (the fp8 epilogue runs on fewer values a warp) and
    more from it (a wide row needs more loads in flight than a few warps issue)."""
    warps = warps_for(block)
    if quant == QUANT_NONE:
        return warps
    table = tuning.COMMON
    if residual:
        return min(
            table.rows.max_warps,
            max(table.norms.residual_min_warps, block // table.norms.residual_elements_per_warp),
        )
    norms = table.norms
    wide = norms.wide_static_quant_block if quant == QUANT_STATIC else norms.wide_quant_block
    return norms.wide_quant_warps if block >= wide else min(warps, norms.quant_warps)


def early_weight_for(
    rows_: int, quant: int, block: int, residual: bool = False, l2_share: float | None = None
) -> bool:
    """Load the weight before the row reduction. That hides the weight's latency behind the
    reduction but keeps it live through it, which costs the quantizing variants of narrow rows
    at large batches registers they need (except with a residual and its wider warps), and the
    plain fused add past `tuning.Norms.few_rows` rows while its footprint stays within
    `tuning.Norms.late_weight_l2_share` L2 sizes (`l2_share`), where the weight's load is
    quick. A dynamic scale always takes it first: its peak is taken in the sum's reduction
    (`norms.kernel.norm_kernel` loads it early whatever the flag). The arithmetic is the same
    either way, so the choice may depend on the batch."""
    norms = tuning.COMMON.norms
    if quant == QUANT_DYNAMIC:
        return True
    if quant == QUANT_NONE and residual and rows_ > norms.few_rows:
        return l2_share is None or l2_share > norms.late_weight_l2_share
    return (
        quant == QUANT_NONE
        or residual
        or rows_ <= norms.few_rows
        or block >= norms.wide_quant_block
    )


def max_registers_for(
    rows_: int,
    quant: int,
    block: int,
    residual: bool,
    l2_share: float | None,
    element_size: int,
    gbps_per_sm: float | None = None,
) -> int | None:
    """A cap on registers per thread for the plain norms of 16-bit rows past
    `tuning.Norms.few_rows` rows (None: the compiler's choice), so that more programs fit an
    SM and more loads are in flight: rms_norm whose footprint lies between
    `tuning.Norms.registers_l2_share` and one L2 size, the fused add of wide rows streamed
    from memory, and, on a card whose class sets `tuning.DeviceClass.streamed_norm_cap_block`
    (`gbps_per_sm`), rms_norm of wide rows past the L2. A row read again after its sum
    (`reload_for`) holds less and runs best uncapped. Registers do not change the arithmetic,
    so the cap may depend on the batch and the card."""
    norms = tuning.COMMON.norms
    if quant != QUANT_NONE or rows_ <= norms.few_rows or element_size != 2 or l2_share is None:
        return None
    if reload_for(rows_, quant, block, l2_share, element_size, gbps_per_sm):
        return None
    if residual:
        wide = block >= norms.residual_registers_block
        streamed = l2_share > norms.residual_registers_l2_share
        return norms.residual_registers if wide and streamed else None
    cap_block = tuning.device_class(gbps_per_sm).streamed_norm_cap_block
    if l2_share > 1.0 and cap_block is not None and block >= cap_block:
        return norms.registers
    return norms.registers if norms.registers_l2_share < l2_share <= 1.0 else None


def reload_for(
    rows_: int,
    quant: int,
    block: int,
    l2_share: float | None,
    element_size: int,
    gbps_per_sm: float | None,
) -> bool:
    """Read a single-pass row again after its sum (from L2, where the first read asked it
    kept) rather than hold it in registers through the reduction, as Inductor's looped kernel
    does: for the plain norms of 16-bit rows past `tuning.Norms.few_rows` rows whose footprint
    exceeds `tuning.Norms.reload_l2_share` L2 sizes, on a card whose class
    (`gbps_per_sm`) reads rows of its `tuning.DeviceClass.reload_block` or wider again. Such a
    card needs more loads in flight than a row held through the reduction leaves room for. The
    row's values and arithmetic are the same, so the choice may depend on the batch and the
    card."""
    norms = tuning.COMMON.norms
    reload_block = tuning.device_class(gbps_per_sm).reload_block
    return (
        quant == QUANT_NONE
        and rows_ > norms.few_rows
        and element_size == 2
        and reload_block is not None
        and block >= reload_block
        and l2_share is not None
        and l2_share > norms.reload_l2_share
    )


def evict_first_for(l2_share: float | None, residual: bool = False) -> bool:
    """Mark the activations first out of L2 when the op's footprint, `l2_share` of the L2
    size, just exceeds it (up to `tuning.Norms.evict_first_l2_share`, with a residual
    `evict_first_l2_share_residual`): the outputs then stay in the L2 for the next op. Ops that
    fit in L2 would lose their inputs between calls, and ops streaming from DRAM gain nothing.
    A hint only: the results do not change, so it may depend on the batch."""
    norms = tuning.COMMON.norms
    top = norms.evict_first_l2_share_residual if residual else norms.evict_first_l2_share
    return l2_share is not None and 1.0 < l2_share <= top


def split_for(
    rows_: int,
    block: int,
    quant: int,
    single_pass: bool,
    sms: int | None,
    residual: bool = False,
) -> int:
    """Programs per single-pass row. A wide decode-size row is bound by what one SM moves and
    issues, so a few rows are split over programs to keep every SM busy: `tuning.Norms.
    row_split` programs a row of `wide_split_block` or more up to `wide_split_rows` rows and two
    up to `wide_half_split_rows`; a row of `split_block` up to `split_rows` rows
    (`split_rows_fp8` with fp8 output) and two up to `half_split_rows`, except the static-fp8
    norm without a residual, which takes `static_split` throughout; halved until every row's
    programs fit the `sms` SMs at once; else 1. A dynamic scale (`QUANT_DYNAMIC`) takes one
    program a row: its peak is taken in the sum's reduction, which a split would repeat in
    every program. The split depends on the row block and the batch, not on the data: each
    program sums the whole row in the one-program order, so the results stay batch-invariant."""
    if not single_pass or sms is None or quant == QUANT_DYNAMIC:
        return 1
    norms = tuning.COMMON.norms
    if block >= norms.wide_split_block:
        if rows_ <= norms.wide_split_rows:
            split = norms.row_split
        else:
            split = 2 if rows_ <= norms.wide_half_split_rows else 1
    elif block >= norms.split_block:
        if rows_ > norms.half_split_rows:
            split = 1
        elif quant == QUANT_STATIC and not residual:
            split = norms.static_split
        else:
            full_rows = norms.split_rows if quant == QUANT_NONE else norms.split_rows_fp8
            split = norms.row_split if rows_ <= full_rows else 2
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
    and its sum of squares no selection (the variance over the whole row): fewer instructions
    an element where rows stream at large batches. Not under a register cap (`capped`: the cap
    spills without the masks), and only beside a weight of the row's element width
    (`same_width`; beside another, the masks change the layout Triton gives the row, hence the
    order of its sum; with equal widths the layouts are the same either way, which
    ``tests/test_layouts.py`` checks, so the choice may follow the batch, as the cap does)."""
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
    where the rule would split: its cost is a visible share of a decode-size launch."""
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
    `tuning.Clusters.norm_widths` that fill their block (`full_row`) beside a weight, the
    weight and every tensor of rows 16-byte aligned as Triton specializes them
    (`rows_aligned`: the one-program kernel's layout, hence the order of its sum, follows the
    alignment), where clusters launch (`launch.clusters.cluster_launches`)."""
    return (
        block in tuning.COMMON.clusters.norm_widths
        and full_row
        and weight is not None
        and x.element_size() == 2
        and cluster_launches(x)
        and weight.data_ptr() % 16 == 0
        and rows_aligned(*(t for t in (x, out, residual, residual_out) if t is not None))
    )


def spreads_only_in_place(block: int, quant: int, residual: bool) -> bool:
    """Whether `cluster_for` spreads this launch's rows only when its outputs overlap its
    inputs: the plain fused add's rows of `tuning.Clusters.norm_widths` narrower than
    `wide_norm_width`, where the split leads out of place (a launch plan of its own keeps the
    two apart)."""
    clusters = tuning.COMMON.clusters
    return (
        residual
        and quant == QUANT_NONE
        and block in clusters.norm_widths
        and block < clusters.wide_norm_width
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
    """Blocks of a cluster a row (`norms.cluster_kernel`), at decode sizes (up to
    `tuning.Clusters.max_rows` rows) whose rows fit a cluster (`cluster_fits`), with
    programmatic launch off: `tuning.Clusters.norm_blocks` for rows of `wide_norm_width` of
    the fused adds (in place too: each block reads only what it writes), the dynamic-fp8 norm
    and, past `plain_norm_past_rows` rows, plain rms_norm (where a block holds several warps,
    each sends its own partial: `launch.clusters.sum_by_warps`); for narrower rows, the plain
    fused add in place (`spreads_only_in_place`: the split cannot serve a row written in place)
    and its static-fp8 form past `tuning.Norms.split_rows_fp8` rows (where the split takes two
    programs a row); else 1. Elsewhere the split serves the rows as well or better, and the
    static-fp8 norm keeps it. The blocks keep the one-program kernel's bits, so the choice may
    depend on the batch."""
    n = num_rows(x)
    has_residual = residual is not None
    table = tuning.COMMON
    clusters = table.clusters
    in_place_only = spreads_only_in_place(block, quant, has_residual)
    if block >= clusters.wide_norm_width:
        plain_rows = quant == QUANT_NONE and not has_residual
        wanted = (
            has_residual
            or quant == QUANT_DYNAMIC
            or (plain_rows and n > clusters.plain_norm_past_rows)
        )
    else:
        static_residual = has_residual and quant == QUANT_STATIC
        wanted = in_place_only or (static_residual and n > table.norms.split_rows_fp8)
    spread = (
        wanted
        and n <= clusters.max_rows
        and not programmatic_launch_enabled()
        and cluster_fits(x, weight, out, residual, residual_out, block, full_row)
        # (the memory check last: its cost is a visible share of a decode-size launch)
        and (not in_place_only or writes_over_input(x, out, residual, residual_out))
    )
    return clusters.norm_blocks if spread else 1
