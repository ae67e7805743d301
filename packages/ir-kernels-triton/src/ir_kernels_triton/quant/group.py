"""Group fp8 quantization: a scale for every group of a row's elements, several whole groups a
program. A group's result is exact whatever the configuration (a maximum and one division),
so the configuration may follow the batch and the card.

The kernel also quantizes a gated activation by groups (`silu_and_mul_group_quant_fp8`): it
computes the gate (`activations.gated.gate`) of each element of its groups and rounds it to the
activations' dtype, as `silu_and_mul` returns it, in place of loading the element.
"""

import torch
import triton
import triton.language as tl

from ..activations.gated import gate
from ..launch import tuning
from ..launch.device import dram_gbps_per_sm
from ..launch.plans import launch_key, launch_plans_enabled, plans_for
from ..launch.programmatic import await_previous_grid, launch_options
from ..launch.rows import (
    next_power_of_2,
    num_rows,
    rows,
    streams_from_dram,
    tensor_bytes,
    warps_for,
)
from .fp8 import dynamic_scale, exact_rounding, max_keeping_nan, quantize, round_to_dtype

#: Plans of `launch_group_quant` (`launch.plans`).
_GROUP_QUANT_PLANS = plans_for("group_quant")


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
    GATE: tl.constexpr = -1,
):
    """`GATE` (one of `activations.gated`'s ``ACT_*``): quantize ``gate(x[..., :hidden]) *
    x[..., hidden:]`` rounded to the activations' dtype (the gated op's output) instead of
    `x`; `hidden` is then the output's width."""
    await_previous_grid(PDL)
    # one flat grid, a row's group blocks on consecutive programs: consecutive programs read
    # consecutive memory (a 2-D grid would run the first block of every row first)
    pid = tl.program_id(0)
    blocks_per_row = tl.cdiv(groups, GROUPS_PER_PROGRAM)
    row = (pid // blocks_per_row).to(tl.int64)
    g = (pid % blocks_per_row) * GROUPS_PER_PROGRAM + tl.arange(0, GROUPS_PER_PROGRAM)
    c = tl.arange(0, GROUP_BLOCK)
    col = g[:, None] * group_size + c[None, :]
    mask = (g[:, None] < groups) & (c[None, :] < group_size)
    x_row = x_ptr + row * x_stride
    if GATE >= 0:
        a = tl.load(x_row + col, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(x_row + hidden + col, mask=mask, other=0.0).to(tl.float32)
        x = round_to_dtype(gate(a, GATE, EXACT_FP8) * b, x_ptr.dtype.element_ty, EXACT_FP8)
    else:
        x = tl.load(x_row + col, mask=mask, other=0.0).to(tl.float32)
    # a float maximum keeping NaN: `abs_peak`'s integer maximum runs slower on these tiles,
    # and the NaN-dropping `tl.max` would give a finite scale to a row holding a NaN
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
    *,
    act: int | None = None,
) -> None:
    """Per-(row, group) scales into `scale` (any strides) and `q`. `per_program` (groups per
    program, a power of two) and `num_warps` override the configuration (for tuning sweeps).
    `act` (`activations.gated.ACT_SILU`, ...): quantize the gated activation of `x` (rows of
    ``2 * q.shape[-1]``) rounded to its dtype, as the gated op returns it, not `x`."""
    hidden = q.shape[-1]
    n = num_rows(x)
    if n == 0 or hidden == 0:
        return
    groups = hidden // group_size
    scale2 = scale.reshape(n, groups) if scale.dim() != 2 else scale
    values = (x, q, scale2)
    key = None
    if per_program is None and num_warps is None and launch_plans_enabled():
        key = launch_key((group_size, act), x, q, scale2)
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
        # (the interpreter's gate is `EXACT_FP8`'s: both where the kernels are interpreted)
        **({} if act is None else {"GATE": act}),
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
        q.shape[-1] // group_size,
        next_power_of_2(group_size),
        streamed,
        # only where the rule reads it (a cached answer still costs a decode-size launch)
        dram_gbps_per_sm(x) if streamed else None,
    )


def group_quant_config(
    rows_: int,
    groups: int,
    group_block: int,
    streamed: bool = False,
    gbps_per_sm: float | None = None,
) -> tuple[int, int]:
    """(groups per program, warps) of `group_quant_kernel` (`tuning.GroupQuant`). Few rows
    favour latency: small programs of one 16-byte load a thread, then wider ones over fewer
    warps. Past `tuning.GroupQuant.mid_rows` rows, rows within the L2 take programs of
    `program_elements` elements (rows of up to `narrow_groups` groups keep `narrow_launch`).
    Rows streamed from DRAM (`streamed`) take what the card's class (`gbps_per_sm`) sets:
    whole rows a program up to `tuning.DeviceClass.streamed_group_elements` elements where a
    card must keep many loads in flight per SM, or `streamed_group_launch`; a card that
    reports no bandwidth keeps the rule for rows within the L2. Never more groups a program
    than the row holds."""
    table = tuning.COMMON.group_quant
    device = tuning.device_class(gbps_per_sm)
    if rows_ <= table.decode_rows:
        per_program, warps = table.decode_launch
    elif rows_ <= table.mid_rows:
        per_program, warps = table.mid_launch
    elif streamed and device.streamed_group_elements is not None:
        per_program = max(
            1, min(next_power_of_2(groups), device.streamed_group_elements // group_block)
        )
        warps = warps_for(per_program * group_block)
    elif streamed and device.streamed_group_launch is not None:
        per_program, warps = device.streamed_group_launch
    elif groups <= table.narrow_groups:
        per_program, warps = table.narrow_launch
    else:
        per_program = max(1, table.program_elements // group_block)
        warps = warps_for(per_program * group_block)
    return max(1, min(per_program, next_power_of_2(groups))), warps
