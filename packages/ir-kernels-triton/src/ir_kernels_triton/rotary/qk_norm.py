"""The per-head RMS norm of query and key, then the rotary embedding, in one kernel
(`qk_norm_rotary_embedding`), in place or into new tensors.

A program takes a block of heads of one token, in the query and in the key, and loads the
token's cos/sin once. It works through its heads a tile at a time: each head of the tile is
read once, in the rotary's layout (the two elements of each rotated pair, and the elements past
the rotary dimension), its sum of squares taken over those, and it is normalized, rounded to
the activations' dtype (as the two ops hand it to each other), rotated in float32 and written
once. The unfused ops read and write each head twice.

A head's sum runs in the order of its tile's layout, which the tile's shape and warps fix: both
follow the head size alone (`tuning.QkNorm`), so the results are batch-invariant; the heads a
program (`rotary.kernel.rotary_head_block`) only decide how many tiles it loops over.
"""

import torch
import triton
import triton.language as tl

from ..launch import tuning
from ..launch.device import interpreting
from ..launch.plans import launch_key, launch_plans_enabled, plans_for
from ..launch.programmatic import await_previous_grid, launch_options
from ..launch.rows import next_power_of_2, num_rows, rows
from ..quant.fp8 import round_to_dtype
from .kernel import cos_sin, head_pairs, head_tails, rotary_head_block, rotated

#: Plans of `launch_qk_norm_rotary` (`launch.plans`), and the positions among
#: `qk_norm_rotary_kernel`'s arguments of the values that change between calls of one plan: the
#: tensors and epsilon.
_QK_NORM_PLANS = plans_for("qk_norm_rotary")
_QK_NORM_SLOTS = (0, 1, 3, 5, 7, 9, 10, 11, 18)


@triton.jit
def _norm_rotate_tile(
    src_ptr,
    dst_ptr,
    w_ptr,
    heads,
    head_size,
    cos,
    sin,
    half,
    eps,
    HAS_WEIGHT: tl.constexpr,
    IS_NEOX: tl.constexpr,
    HAS_TAIL: tl.constexpr,
    TILE_HEADS: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    TAIL_BLOCK: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """Normalize, round and rotate the first `heads` (at most `TILE_HEADS`) heads at `src_ptr`
    into `dst_ptr`."""
    dtype = src_ptr.dtype.element_ty
    base, first, second, mask = head_pairs(heads, head_size, half, IS_NEOX, TILE_HEADS, HALF_BLOCK)
    x1 = tl.load(src_ptr + base + first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src_ptr + base + second, mask=mask, other=0.0).to(tl.float32)
    squares = tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)
    if HAS_TAIL:
        _, tail, tail_mask = head_tails(heads, head_size, half, TILE_HEADS, TAIL_BLOCK)
        xt = tl.load(src_ptr + base + tail, mask=tail_mask, other=0.0).to(tl.float32)
        squares += tl.sum(xt * xt, axis=1)
    inv_rms = tl.rsqrt(squares / head_size + eps)[:, None]
    # the weight of a pair's elements, the same for every head of the tile
    in_pairs = second < 2 * half
    y1 = x1 * inv_rms
    y2 = x2 * inv_rms
    if HAS_WEIGHT:
        y1 = y1 * tl.load(w_ptr + first, mask=in_pairs, other=0.0).to(tl.float32)
        y2 = y2 * tl.load(w_ptr + second, mask=in_pairs, other=0.0).to(tl.float32)
    o1, o2 = rotated(
        round_to_dtype(y1, dtype, INTERPRETED), round_to_dtype(y2, dtype, INTERPRETED), cos, sin
    )
    tl.store(dst_ptr + base + first, o1.to(dtype), mask=mask)
    tl.store(dst_ptr + base + second, o2.to(dtype), mask=mask)
    if HAS_TAIL:
        yt = xt * inv_rms
        if HAS_WEIGHT:
            yt = yt * tl.load(w_ptr + tail, mask=tail < head_size, other=0.0).to(tl.float32)
        tl.store(dst_ptr + base + tail, yt.to(dtype), mask=tail_mask)


@triton.jit
def _norm_rotate_heads(
    src_ptr,
    dst_ptr,
    w_ptr,
    first_head,
    heads,
    head_size,
    cos,
    sin,
    half,
    eps,
    HAS_WEIGHT: tl.constexpr,
    IS_NEOX: tl.constexpr,
    HAS_TAIL: tl.constexpr,
    HEAD_BLOCK: tl.constexpr,
    TILE_HEADS: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    TAIL_BLOCK: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """This program's heads `first_head` to `first_head + HEAD_BLOCK` of the row at `src_ptr`
    (of `heads`), a tile at a time."""
    end = tl.minimum(first_head + HEAD_BLOCK, heads)
    for tile in range(first_head, end, TILE_HEADS):
        offset = tile * head_size
        _norm_rotate_tile(
            src_ptr + offset,
            dst_ptr + offset,
            w_ptr,
            end - tile,
            head_size,
            cos,
            sin,
            half,
            eps,
            HAS_WEIGHT,
            IS_NEOX,
            HAS_TAIL,
            TILE_HEADS,
            HALF_BLOCK,
            TAIL_BLOCK,
            INTERPRETED,
        )


@triton.jit
def qk_norm_rotary_kernel(
    pos_ptr,
    q_ptr,
    q_stride,
    k_ptr,
    k_stride,
    q_out_ptr,
    q_out_stride,
    k_out_ptr,
    k_out_stride,
    q_w_ptr,
    k_w_ptr,
    cache_ptr,
    cache_stride,
    max_position,
    q_heads,
    k_heads,
    head_size,
    half,
    eps,
    IS_NEOX: tl.constexpr,
    HAS_Q_WEIGHT: tl.constexpr,
    HAS_K_WEIGHT: tl.constexpr,
    HAS_TAIL: tl.constexpr,
    HEAD_BLOCK: tl.constexpr,
    TILE_HEADS: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    TAIL_BLOCK: tl.constexpr,
    INTERPRETED: tl.constexpr,
    PDL: tl.constexpr = False,
):
    await_previous_grid(PDL)
    token = tl.program_id(0).to(tl.int64)
    first_head = tl.program_id(1) * HEAD_BLOCK
    cos, sin = cos_sin(pos_ptr, token, cache_ptr, cache_stride, max_position, half, HALF_BLOCK)
    _norm_rotate_heads(
        q_ptr + token * q_stride,
        q_out_ptr + token * q_out_stride,
        q_w_ptr,
        first_head,
        q_heads,
        head_size,
        cos,
        sin,
        half,
        eps,
        HAS_Q_WEIGHT,
        IS_NEOX,
        HAS_TAIL,
        HEAD_BLOCK,
        TILE_HEADS,
        HALF_BLOCK,
        TAIL_BLOCK,
        INTERPRETED,
    )
    _norm_rotate_heads(
        k_ptr + token * k_stride,
        k_out_ptr + token * k_out_stride,
        k_w_ptr,
        first_head,
        k_heads,
        head_size,
        cos,
        sin,
        half,
        eps,
        HAS_K_WEIGHT,
        IS_NEOX,
        HAS_TAIL,
        HEAD_BLOCK,
        TILE_HEADS,
        HALF_BLOCK,
        TAIL_BLOCK,
        INTERPRETED,
    )


def qk_norm_tile_heads(head_size: int, rotary_dim: int, heads: int) -> int:
    """Heads of a tile (a power of two): as many as fill `tuning.QkNorm.tile_elements` with
    their pair halves, at least one and no more than the row's heads need. It follows the head
    size alone (and the call's head count, never its tokens): the order of a head's sum
    depends on it."""
    half_block = next_power_of_2(rotary_dim // 2)
    per_tile = max(1, tuning.COMMON.qk_norm.tile_elements // half_block)
    return min(next_power_of_2(per_tile), next_power_of_2(heads))


def launch_qk_norm_rotary(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None,
    epsilon: float,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    query_out: torch.Tensor,
    key_out: torch.Tensor,
    head_block: int | None = None,
) -> None:
    """Normalize each head of `query`/`key`, then rotate them, into `query_out`/`key_out`
    (which may be the inputs themselves). `head_block` (heads a program, a power of two)
    overrides `rotary_head_block` (for tuning sweeps); the tile never changes."""
    tokens = num_rows(query)
    if tokens == 0:
        return
    epsilon = float(epsilon)
    flat_positions = positions.reshape(-1)
    values = (
        flat_positions,
        query,
        key,
        query_out,
        key_out,
        query if q_weight is None else q_weight,
        query if k_weight is None else k_weight,
        cos_sin_cache,
        epsilon,
    )
    plan_key = None
    if head_block is None and launch_plans_enabled():
        plan_key = launch_key(
            (head_size, is_neox_style),
            flat_positions,
            query,
            key,
            query_out,
            key_out,
            q_weight,
            k_weight,
            cos_sin_cache,
        )
        if _QK_NORM_PLANS.replay(plan_key, values):
            return
    rotary_dim = cos_sin_cache.shape[-1]
    half = rotary_dim // 2
    q_heads = query.shape[-1] // head_size
    k_heads = key.shape[-1] // head_size
    heads = max(q_heads, k_heads)
    tile = qk_norm_tile_heads(head_size, rotary_dim, heads)
    if head_block is None:
        head_block = rotary_head_block(tokens, heads)
    head_block = max(head_block, tile)
    q2, k2, qo2, ko2 = rows(query), rows(key), rows(query_out), rows(key_out)
    warps = tuning.COMMON.qk_norm.warps
    grid = (tokens, triton.cdiv(heads, head_block))
    args = (
        flat_positions,
        q2,
        q2.stride(0),
        k2,
        k2.stride(0),
        qo2,
        qo2.stride(0),
        ko2,
        ko2.stride(0),
        q2 if q_weight is None else q_weight,
        q2 if k_weight is None else k_weight,
        cos_sin_cache,
        cos_sin_cache.stride(0),
        cos_sin_cache.shape[0],
        q_heads,
        k_heads,
        head_size,
        half,
        epsilon,
    )
    tail = head_size - rotary_dim
    kwargs = dict(
        IS_NEOX=is_neox_style,
        HAS_Q_WEIGHT=q_weight is not None,
        HAS_K_WEIGHT=k_weight is not None,
        HAS_TAIL=tail > 0,
        HEAD_BLOCK=head_block,
        TILE_HEADS=tile,
        HALF_BLOCK=next_power_of_2(half),
        TAIL_BLOCK=next_power_of_2(max(tail, 1)),
        INTERPRETED=interpreting(),
        num_warps=warps,
        **launch_options(q2, grid, warps),
    )
    compiled = qk_norm_rotary_kernel[grid](*args, **kwargs)
    if plan_key is not None:
        _QK_NORM_PLANS.record(
            plan_key, qk_norm_rotary_kernel, compiled, grid, args, kwargs, _QK_NORM_SLOTS
        )
