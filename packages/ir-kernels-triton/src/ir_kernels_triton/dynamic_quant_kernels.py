"""Triton kernels for the fp8 quantizers that reduce before they scale: dynamic per-token
quantization reads a row once when it fits in registers, and at decode sizes spreads 8192-wide
rows over a thread-block cluster (`quant_cluster_for`); group quantization handles several
whole groups per program.
"""

import torch
import triton
import triton.language as tl

from .cluster_norm import (
    CLUSTER_ROWS,
    CLUSTER_SIZES,
    cluster_launches,
    cluster_quant_kernel,
    launch_cluster_quant,
)
from .fp8 import (
    abs_peak,
    bounded_dynamic_scale,
    dynamic_scale,
    exact_rounding,
    max_keeping_nan,
    quantize,
)
from .launch import await_previous_grid, launch_options, programmatic_launch_enabled
from .plans import launch_key, launch_plans_enabled, plans_for
from .platform import (
    LOOP_BLOCK,
    MAX_SINGLE_PASS,
    deep_loads,
    dram_gbps_per_sm,
    next_power_of_2,
    num_rows,
    rows,
    rows_aligned,
    streams_from_dram,
    tensor_bytes,
    warps_for,
)

#: Plans of `launch_dynamic_quant` and `launch_group_quant` (`plans`).
_DYNAMIC_QUANT_PLANS = plans_for("dynamic_quant")
_GROUP_QUANT_PLANS = plans_for("group_quant")


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


#: Row widths whose decode-size rows of dynamic quantization take a cluster
#: (`quant_cluster_for`), and its blocks and each block's warps.
QUANT_CLUSTER_WIDTHS = frozenset({8192})
QUANT_CLUSTER = 8
QUANT_CLUSTER_WARPS = 1


def _quant_cluster_fits(x2: torch.Tensor, q2: torch.Tensor) -> bool:
    """Whether rows of dynamic quantization can be spread over a cluster at all: 16-bit rows of
    a power-of-two width, `x2` and `q2` 16-byte aligned (`rows_aligned`), where clusters
    launch (`cluster_norm.cluster_launches`)."""
    width = x2.shape[-1]
    return (
        width == next_power_of_2(width)
        and x2.element_size() == 2
        and rows_aligned(x2, q2)
        and cluster_launches(x2)
    )


def quant_cluster_for(x2: torch.Tensor, q2: torch.Tensor) -> int:
    """Blocks of a cluster a row of dynamic quantization (`cluster_norm.cluster_quant_kernel`):
    `QUANT_CLUSTER` for 16-bit rows of one of `QUANT_CLUSTER_WIDTHS` at decode sizes (up to
    `CLUSTER_ROWS` rows) that fit a cluster (`_quant_cluster_fits`) while programmatic launch
    is off; else 1 (one program a row). A row's peak is exact in any order, so the choice may
    depend on the batch. H200 (`triton-tuning-H200.log` round 16; medians of 5 rotated rounds
    of CUDA-graph replays): 1, 4 and 16 x 8192 1.55-1.62 µs on eight blocks of one warp against
    1.63-1.75 in one program a row of 16 warps (four blocks of two warps level with eight);
    2048- and 4096-wide rows ran 0.1-0.2 µs slower on any cluster than in one program."""
    spread = (
        x2.shape[-1] in QUANT_CLUSTER_WIDTHS
        and x2.shape[0] <= CLUSTER_ROWS
        and not programmatic_launch_enabled()
        and _quant_cluster_fits(x2, q2)
    )
    return QUANT_CLUSTER if spread else 1


def launch_dynamic_quant(
    x: torch.Tensor,
    scale_ub: torch.Tensor | None,
    q: torch.Tensor,
    scale: torch.Tensor,
    *,
    cluster: int | None = None,
    num_warps: int | None = None,
) -> None:
    """Per-row absmax scale into `scale` (contiguous, one per row) and `q`. Probes may set
    `cluster` (blocks a row: 1, or one of `CLUSTER_SIZES` where `quant_cluster_for` could
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
            num_warps=QUANT_CLUSTER_WARPS if num_warps is None else num_warps,
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
    single = hidden <= MAX_SINGLE_PASS
    block = next_power_of_2(hidden) if single else LOOP_BLOCK
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


@triton.jit
def group_quant_kernel(
    x_ptr,
    x_stride,
    q_ptr,
    q_stride,
    scale_ptr,
    scale_row_stride,
    scale_group_stride,
    hidden,
    group_size,
    groups,
    GROUPS_PER_PROGRAM: tl.constexpr,
    GROUP_BLOCK: tl.constexpr,
    EXACT_FP8: tl.constexpr,
    PDL: tl.constexpr = False,
):
    await_previous_grid(PDL)
    # one flat grid, a row's group blocks on consecutive programs: consecutive programs read
    # consecutive memory (a 2-D grid ran the first block of every row first; 2-3 % slower)
    pid = tl.program_id(0)
    blocks_per_row = tl.cdiv(groups, GROUPS_PER_PROGRAM)
    row = (pid // blocks_per_row).to(tl.int64)
    g = (pid % blocks_per_row) * GROUPS_PER_PROGRAM + tl.arange(0, GROUPS_PER_PROGRAM)
    c = tl.arange(0, GROUP_BLOCK)
    col = g[:, None] * group_size + c[None, :]
    mask = (g[:, None] < groups) & (c[None, :] < group_size)
    x = tl.load(x_ptr + row * x_stride + col, mask=mask, other=0.0).to(tl.float32)
    # a float maximum keeping NaN (`abs_peak`'s integers lost 4-6 % here; this form costs 2-3 %
    # against the NaN-dropping `tl.max` at 128-1024 rows, level elsewhere)
    scale = dynamic_scale(tl.reduce(tl.abs(x), 1, max_keeping_nan))
    tl.store(scale_ptr + row * scale_row_stride + g * scale_group_stride, scale, mask=g < groups)
    q = quantize(x, (1.0 / scale)[:, None], EXACT_FP8)
    tl.store(q_ptr + row * q_stride + col, q.to(q_ptr.dtype.element_ty), mask=mask)


def launch_group_quant(
    x: torch.Tensor,
    group_size: int,
    q: torch.Tensor,
    scale: torch.Tensor,
    per_program: int | None = None,
    num_warps: int | None = None,
) -> None:
    """Per-(row, group) scales into `scale` (any strides) and `q`. `per_program` (groups per
    program, a power of two) and `num_warps` override the configuration (tuning)."""
    hidden = x.shape[-1]
    n = num_rows(x)
    if n == 0:
        return
    groups = hidden // group_size
    scale2 = scale.reshape(n, groups) if scale.dim() != 2 else scale
    values = (x, q, scale2)
    key = None
    if per_program is None and num_warps is None and launch_plans_enabled():
        key = launch_key((group_size,), x, q, scale2)
        if _GROUP_QUANT_PLANS.replay(key, values):
            return
    x2, q2 = rows(x), rows(q)
    group_block = next_power_of_2(group_size)
    default_per_program, default_warps = default_group_quant_config(x, group_size, q, scale)
    per_program = per_program or default_per_program
    warps = num_warps or default_warps
    grid = (n * triton.cdiv(groups, per_program),)
    args = (
        x2,
        x2.stride(0),
        q2,
        q2.stride(0),
        scale2,
        scale2.stride(0),
        scale2.stride(1),
        hidden,
        group_size,
        groups,
    )
    kwargs = dict(
        GROUPS_PER_PROGRAM=per_program,
        GROUP_BLOCK=group_block,
        EXACT_FP8=exact_rounding(),
        num_warps=warps,
        **launch_options(x2, grid, warps),
    )
    compiled = group_quant_kernel[grid](*args, **kwargs)
    if key is not None:
        _GROUP_QUANT_PLANS.record(key, group_quant_kernel, compiled, grid, args, kwargs, (0, 2, 4))


def default_group_quant_config(
    x: torch.Tensor, group_size: int, q: torch.Tensor, scale: torch.Tensor
) -> tuple[int, int]:
    """The (groups per program, warps) `launch_group_quant` takes for these tensors unless
    told otherwise: `group_quant_config` of their batch, their footprint against the L2 and the
    card's bandwidth per SM."""
    streamed = streams_from_dram(x, tensor_bytes(x, q, scale))
    return group_quant_config(
        num_rows(x),
        x.shape[-1] // group_size,
        next_power_of_2(group_size),
        streamed,
        # only where the rule reads it (see `launch_gated`)
        dram_gbps_per_sm(x) if streamed else None,
    )


def group_quant_config(
    rows_: int,
    groups: int,
    group_block: int,
    streamed: bool = False,
    gbps_per_sm: float | None = None,
) -> tuple[int, int]:
    """(groups per program, warps) of `group_quant_kernel`. A group's result is exact whatever
    the configuration (max and one division), so it may follow the batch and the card.

    Sweeps of groups of 128 over 2048-8192 wide rows (`benchmarks/results/triton-tuning-H100.log`
    sections 11 and 18): 8 groups over 4 warps (one 16-byte vector a thread) are best up to 16
    rows, 16 over 2 warps up to 1024 (10 % faster than 32 over 8 at 1024 rows). Past that,
    rows within the L2 take 4096-element programs over 8 warps, except rows of up to 16 groups,
    which keep 8 over 4 (16384 x 2048 on an H100: 35.5 against 36.1 µs). Rows streamed from
    DRAM (`streamed`) depend on the card's bandwidth per SM, `gbps_per_sm`: an H100 is fastest
    on 8 groups over 4 warps at every width (0.5-1 %), while an H200, with half as much again
    to keep in flight, is 8-10 % slower so and fastest on one row a program (up to 8192
    elements)."""
    if rows_ <= 16:
        per_program, warps = 8, 4
    elif rows_ <= 1024:
        per_program, warps = 16, 2
    elif streamed and deep_loads(gbps_per_sm):
        per_program = max(1, min(next_power_of_2(groups), 8192 // group_block))
        warps = warps_for(per_program * group_block)
    elif (streamed and gbps_per_sm is not None) or groups <= 16:
        per_program, warps = 8, 4
    else:
        per_program = max(1, 4096 // group_block)
        warps = warps_for(per_program * group_block)
    return max(1, min(per_program, next_power_of_2(groups))), warps
