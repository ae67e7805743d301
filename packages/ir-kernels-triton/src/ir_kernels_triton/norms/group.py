"""The RMS norm quantized per token group (`rms_norm_group_quant_fp8`, and with a residual add
`fused_add_rms_norm_group_quant_fp8`), with its launcher.

A program handles one row as a tile of its groups, ``[groups, group_size]`` (each padded to a
power of two): the row's sum of squares over the whole tile, then each element normalized,
weighted and rounded to the activations' dtype (as `rms_norm` hands its output on), each
group's peak taken along its tile row and its elements quantized with the group's scale. Rows
whose tile fits `tuning.Rows.max_single_pass` elements are read once and held in registers;
wider ones are read in chunks of whole groups, twice (the second time from L2, after the sum).

The norm's epilogue is `quant.group`'s: the scale from a peak that keeps a NaN
(`quant.fp8.max_keeping_nan`) and the quantization by the scale's reciprocal. The order of a
row's sum follows its tile's shape and warps, which depend on the row width and group size
alone, so the results are batch-invariant.
"""

import torch
import triton
import triton.language as tl

from ..launch import tuning
from ..launch.plans import launch_key, launch_plans_enabled, plans_for
from ..launch.programmatic import await_previous_grid, launch_options
from ..launch.rows import next_power_of_2, num_rows, rows
from ..quant.fp8 import dynamic_scale, exact_rounding, max_keeping_nan, quantize, round_to_dtype
from . import rules

#: Plans of `launch_group_norm` (`launch.plans`), and the positions among `group_norm_kernel`'s
#: arguments of the values that change between calls of one plan: the tensors and epsilon.
_GROUP_NORM_PLANS = plans_for("group_norm")
_GROUP_NORM_SLOTS = (0, 2, 4, 5, 7, 9, 15)


@triton.jit
def _read_groups(x_row, r_row, res_row, col, mask, HAS_RESIDUAL: tl.constexpr):
    """The tile `col` of a row as float32 (zeros where not `mask`); with a residual, the sum
    rounded to the activations' dtype, which is also stored as the residual output."""
    x = tl.load(x_row + col, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(r_row + col, mask=mask, other=0.0).to(tl.float32)
        s = (x + r).to(x_row.dtype.element_ty)
        tl.store(res_row + col, s, mask=mask)
        x = s.to(tl.float32)
    return x


@triton.jit
def _quantize_groups(
    x,
    inv_rms,
    w_ptr,
    col,
    mask,
    group,
    groups,
    q_row,
    scale_row,
    scale_group_stride,
    HAS_WEIGHT: tl.constexpr,
    EXACT_FP8: tl.constexpr,
    dtype: tl.constexpr,
):
    """Normalize the tile `x` of groups `group` (``[GROUPS_BLOCK]``), round it to `dtype`, and
    store each group's scale and its quantized elements."""
    y = x * inv_rms
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + col, mask=mask, other=0.0).to(tl.float32)
    y = round_to_dtype(y, dtype, EXACT_FP8)
    # lanes outside the row hold zeros, below every peak
    scale = dynamic_scale(tl.reduce(tl.abs(y), 1, max_keeping_nan))
    tl.store(scale_row + group * scale_group_stride, scale, mask=group < groups)
    q = quantize(y, (1.0 / scale)[:, None], EXACT_FP8)
    tl.store(q_row + col, q.to(q_row.dtype.element_ty), mask=mask)


@triton.jit
def group_norm_kernel(
    x_ptr,
    x_stride,
    r_ptr,
    r_stride,
    w_ptr,
    q_ptr,
    q_stride,
    res_ptr,
    res_stride,
    scale_ptr,
    scale_row_stride,
    scale_group_stride,
    hidden,
    group_size,
    groups,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    GROUPS_BLOCK: tl.constexpr,
    GROUP_BLOCK: tl.constexpr,
    SINGLE_PASS: tl.constexpr,
    EXACT_FP8: tl.constexpr,
    PDL: tl.constexpr = False,
):
    await_previous_grid(PDL)
    row = tl.program_id(0).to(tl.int64)
    dtype = x_ptr.dtype.element_ty
    x_row = x_ptr + row * x_stride
    r_row = r_ptr + row * r_stride
    res_row = res_ptr + row * res_stride
    q_row = q_ptr + row * q_stride
    scale_row = scale_ptr + row * scale_row_stride
    g = tl.arange(0, GROUPS_BLOCK)
    c = tl.arange(0, GROUP_BLOCK)[None, :]
    if SINGLE_PASS:
        col = g[:, None] * group_size + c
        mask = (g[:, None] < groups) & (c < group_size)
        x = _read_groups(x_row, r_row, res_row, col, mask, HAS_RESIDUAL)
        inv_rms = tl.rsqrt(tl.sum(x * x) / hidden + eps)
        _quantize_groups(
            x,
            inv_rms,
            w_ptr,
            col,
            mask,
            g,
            groups,
            q_row,
            scale_row,
            scale_group_stride,
            HAS_WEIGHT,
            EXACT_FP8,
            dtype,
        )
    else:
        acc = tl.zeros([GROUPS_BLOCK, GROUP_BLOCK], dtype=tl.float32)
        for first in range(0, groups, GROUPS_BLOCK):
            group = first + g
            col = group[:, None] * group_size + c
            mask = (group[:, None] < groups) & (c < group_size)
            x = _read_groups(x_row, r_row, res_row, col, mask, HAS_RESIDUAL)
            acc += x * x
        inv_rms = tl.rsqrt(tl.sum(acc) / hidden + eps)
        tl.debug_barrier()  # the residual written above is read back below
        src_row = res_row if HAS_RESIDUAL else x_row
        for first in range(0, groups, GROUPS_BLOCK):
            group = first + g
            col = group[:, None] * group_size + c
            mask = (group[:, None] < groups) & (c < group_size)
            x = tl.load(src_row + col, mask=mask, other=0.0).to(tl.float32)
            _quantize_groups(
                x,
                inv_rms,
                w_ptr,
                col,
                mask,
                group,
                groups,
                q_row,
                scale_row,
                scale_group_stride,
                HAS_WEIGHT,
                EXACT_FP8,
                dtype,
            )


def group_norm_config(hidden: int, group_size: int) -> tuple[int, int, bool]:
    """(groups a tile, padded group, single pass) of a row of `hidden` elements in groups of
    `group_size`: the whole row as one tile where it fits `tuning.Rows.max_single_pass`
    elements, else chunks of whole groups of about `tuning.Rows.loop_block` elements. It
    depends on the row's width and group size alone: the tile orders the row's sum."""
    table = tuning.COMMON.rows
    group_block = next_power_of_2(group_size)
    groups_block = next_power_of_2(hidden // group_size)
    if groups_block * group_block <= table.max_single_pass:
        return groups_block, group_block, True
    return max(1, table.loop_block // group_block), group_block, False


def launch_group_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
    group_size: int,
    q: torch.Tensor,
    scale: torch.Tensor,
    *,
    residual: torch.Tensor | None = None,
    residual_out: torch.Tensor | None = None,
) -> None:
    """``group_quant_fp8(rms_norm(x (+ residual), weight, epsilon), group_size)`` into `q` and
    `scale` (``[*x.shape[:-1], groups]``, any strides), and the sum into `residual_out`. The
    warps are the dynamic-fp8 norm's for the tile (`rules.norm_warps`), which the width alone
    sets."""
    hidden = x.shape[-1]
    n = num_rows(x)
    if n == 0:
        return
    epsilon = float(epsilon)
    groups = hidden // group_size
    scale2 = scale.reshape(n, groups) if scale.dim() != 2 else scale
    values = (
        x,
        x if residual is None else residual,
        x if weight is None else weight,
        q,
        x if residual_out is None else residual_out,
        scale2,
        epsilon,
    )
    plan_key = None
    if launch_plans_enabled():
        plan_key = launch_key((group_size,), x, residual, weight, q, residual_out, scale2)
        if _GROUP_NORM_PLANS.replay(plan_key, values):
            return
    x2, q2 = rows(x), rows(q)
    r2 = rows(residual) if residual is not None else x2
    res2 = rows(residual_out) if residual_out is not None else x2
    groups_block, group_block, single = group_norm_config(hidden, group_size)
    warps = rules.norm_warps(groups_block * group_block, rules.QUANT_DYNAMIC, residual is not None)
    grid = (n,)
    args = (
        x2,
        x2.stride(0),
        r2,
        r2.stride(0),
        x2 if weight is None else weight,
        q2,
        q2.stride(0),
        res2,
        res2.stride(0),
        scale2,
        scale2.stride(0),
        scale2.stride(1),
        hidden,
        group_size,
        groups,
        epsilon,
    )
    kwargs = dict(
        HAS_RESIDUAL=residual is not None,
        HAS_WEIGHT=weight is not None,
        GROUPS_BLOCK=groups_block,
        GROUP_BLOCK=group_block,
        SINGLE_PASS=single,
        EXACT_FP8=exact_rounding(),
        num_warps=warps,
        **launch_options(x2, grid, warps),
    )
    compiled = group_norm_kernel[grid](*args, **kwargs)
    if plan_key is not None:
        _GROUP_NORM_PLANS.record(
            plan_key, group_norm_kernel, compiled, grid, args, kwargs, _GROUP_NORM_SLOTS
        )
