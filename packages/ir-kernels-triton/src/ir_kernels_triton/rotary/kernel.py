"""Rotary position embedding, in place or into new tensors.

A program rotates a block of heads of one token, in the query and in the key: it loads the
token's cos/sin once, and for each head the two rotated halves (neox) or the even/odd pairs
(GPT-J). Out of place, it also copies the pass-through tail of partially rotated heads. Each
element's arithmetic is the same whatever the blocking, so the blocking may follow the batch:
few tokens split their heads over more programs. The key's tile is as wide as the key heads a
program can hold (`KV_BLOCK`), not the query's block: a program that takes all of a token's heads
would otherwise hold a query-sized tile of mostly masked key heads in its registers.

A position outside the table (negative, or ``>= max_position``) is not looked up: checking the
positions on the host would wait for the GPU, so the kernel reads no cos/sin for that token and
its rotated elements come out NaN, which shows the mistake where reading past the table would
have given plausible values or a fault. The check is a mask on the cos/sin loads, which costs
about nothing; clamping the row and selecting NaN after the loads costs more at large batches.
"""

import torch
import triton
import triton.language as tl

from ..launch import tuning
from ..launch.plans import launch_key, launch_plans_enabled, plans_for
from ..launch.programmatic import await_previous_grid, launch_options
from ..launch.rows import next_power_of_2, num_rows, rows

#: Plans of `launch_rotary` (`launch.plans`), and the positions among `rotary_kernel`'s arguments of
#: the tensors that change between calls of one plan.
_ROTARY_PLANS = plans_for("rotary")
_ROTARY_SLOTS = (0, 1, 3, 5, 7, 9)


@triton.jit
def cos_sin(pos_ptr, token, cache_ptr, cache_stride, max_position, half, HALF_BLOCK: tl.constexpr):
    """The cos and sin of `token`'s position, float32 ``[1, HALF_BLOCK]``, NaN where the
    position is outside the table (no lane reads then, so its row is never dereferenced)."""
    pos = tl.load(pos_ptr + token).to(tl.int64)
    i = tl.arange(0, HALF_BLOCK)[None, :]
    in_table = (pos >= 0) & (pos < max_position)
    cache_row = cache_ptr + pos * cache_stride
    # a bound, not `& in_table`, which the interpreter runs as int32
    looked_up = i < tl.where(in_table, half, 0)
    cos = tl.load(cache_row + i, mask=looked_up, other=float("nan")).to(tl.float32)
    sin = tl.load(cache_row + half + i, mask=looked_up, other=float("nan")).to(tl.float32)
    return cos, sin


@triton.jit
def head_pairs(
    heads,
    head_size,
    half,
    IS_NEOX: tl.constexpr,
    HEAD_BLOCK: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
):
    """The rotated pairs of a block of `heads` heads: each head's offset ``[HEAD_BLOCK, 1]``,
    the offsets within a head of each pair's two elements ``[1, HALF_BLOCK]`` (the two halves
    (neox) or the even and odd elements (GPT-J)) and the mask of the pairs in the block."""
    h = tl.arange(0, HEAD_BLOCK)[:, None]
    i = tl.arange(0, HALF_BLOCK)[None, :]
    if IS_NEOX:
        first = i
        second = half + i
    else:
        first = 2 * i
        second = 2 * i + 1
    return h * head_size, first, second, (h < heads) & (i < half)


@triton.jit
def head_tails(heads, head_size, half, HEAD_BLOCK: tl.constexpr, TAIL_BLOCK: tl.constexpr):
    """The elements past the rotary dimension of a block of `heads` heads (partial rotary):
    each head's offset ``[HEAD_BLOCK, 1]``, their offsets within a head ``[1, TAIL_BLOCK]``,
    and their mask."""
    h = tl.arange(0, HEAD_BLOCK)[:, None]
    t = 2 * half + tl.arange(0, TAIL_BLOCK)[None, :]
    return h * head_size, t, (h < heads) & (t < head_size)


@triton.jit
def rotated(x1, x2, cos, sin):
    """The pair (`x1`, `x2`) rotated by the angle of (`cos`, `sin`), float32."""
    return x1 * cos - x2 * sin, x2 * cos + x1 * sin


@triton.jit
def rotate_heads(
    src_ptr,
    dst_ptr,
    heads,
    head_size,
    cos,
    sin,
    half,
    IS_NEOX: tl.constexpr,
    COPY_TAIL: tl.constexpr,
    HEAD_BLOCK: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    TAIL_BLOCK: tl.constexpr,
):
    base, first, second, mask = head_pairs(heads, head_size, half, IS_NEOX, HEAD_BLOCK, HALF_BLOCK)
    x1 = tl.load(src_ptr + base + first, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(src_ptr + base + second, mask=mask, other=0.0).to(tl.float32)
    o1, o2 = rotated(x1, x2, cos, sin)
    tl.store(dst_ptr + base + first, o1.to(dst_ptr.dtype.element_ty), mask=mask)
    tl.store(dst_ptr + base + second, o2.to(dst_ptr.dtype.element_ty), mask=mask)
    if COPY_TAIL:
        base, tail, tail_mask = head_tails(heads, head_size, half, HEAD_BLOCK, TAIL_BLOCK)
        tail += base
        tl.store(dst_ptr + tail, tl.load(src_ptr + tail, mask=tail_mask), mask=tail_mask)


@triton.jit
def rotary_kernel(
    pos_ptr,
    q_ptr,
    q_stride,
    k_ptr,
    k_stride,
    q_out_ptr,
    q_out_stride,
    k_out_ptr,
    k_out_stride,
    cache_ptr,
    cache_stride,
    max_position,
    q_heads,
    k_heads,
    head_size,
    half,
    IS_NEOX: tl.constexpr,
    COPY_TAIL: tl.constexpr,
    HEAD_BLOCK: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    TAIL_BLOCK: tl.constexpr,
    KV_BLOCK: tl.constexpr,
    PDL: tl.constexpr = False,
):
    await_previous_grid(PDL)
    token = tl.program_id(0).to(tl.int64)
    first_head = tl.program_id(1) * HEAD_BLOCK
    first = first_head * head_size  # offset of this program's first head
    cos, sin = cos_sin(pos_ptr, token, cache_ptr, cache_stride, max_position, half, HALF_BLOCK)
    rotate_heads(
        q_ptr + token * q_stride + first,
        q_out_ptr + token * q_out_stride + first,
        q_heads - first_head,
        head_size,
        cos,
        sin,
        half,
        IS_NEOX,
        COPY_TAIL,
        HEAD_BLOCK,
        HALF_BLOCK,
        TAIL_BLOCK,
    )
    rotate_heads(
        k_ptr + token * k_stride + first,
        k_out_ptr + token * k_out_stride + first,
        k_heads - first_head,
        head_size,
        cos,
        sin,
        half,
        IS_NEOX,
        COPY_TAIL,
        KV_BLOCK,
        HALF_BLOCK,
        TAIL_BLOCK,
    )


def launch_rotary(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    query_out: torch.Tensor,
    key_out: torch.Tensor,
    head_block: int | None = None,
    num_warps: int | None = None,
) -> None:
    """Rotate `query`/`key` into `query_out`/`key_out` (which may be the inputs themselves).

    `head_block` (heads per program) and `num_warps` override the configuration (for tuning
    sweeps; `rotary_head_block` and `tuning.Rotary.warps` otherwise)."""
    tokens = num_rows(query)
    if tokens == 0:
        return
    flat_positions = positions.reshape(-1)
    values = (flat_positions, query, key, query_out, key_out, cos_sin_cache)
    plan_key = None
    if head_block is None and num_warps is None and launch_plans_enabled():
        # out of place the kernel copies the tail too
        in_place = query_out.data_ptr() == query.data_ptr()
        plan_key = launch_key((head_size, is_neox_style, in_place), *values)
        if _ROTARY_PLANS.replay(plan_key, values):
            return
    half = cos_sin_cache.shape[-1] // 2
    q_heads = query.shape[-1] // head_size
    k_heads = key.shape[-1] // head_size
    q2, k2, qo2, ko2 = rows(query), rows(key), rows(query_out), rows(key_out)
    tail = head_size - 2 * half
    copy_tail = tail > 0 and query_out.data_ptr() != query.data_ptr()
    heads = max(q_heads, k_heads)
    if head_block is None:
        head_block = rotary_head_block(tokens, heads)
    if num_warps is None:
        num_warps = tuning.COMMON.rotary.warps
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
        cos_sin_cache,
        cos_sin_cache.stride(0),
        cos_sin_cache.shape[0],
        q_heads,
        k_heads,
        head_size,
        half,
    )
    kwargs = dict(
        IS_NEOX=is_neox_style,
        COPY_TAIL=copy_tail,
        HEAD_BLOCK=head_block,
        HALF_BLOCK=next_power_of_2(half),
        TAIL_BLOCK=next_power_of_2(max(tail, 1)),
        KV_BLOCK=key_head_block(head_block, k_heads),
        num_warps=num_warps,
        **launch_options(q2, grid, num_warps),
    )
    compiled = rotary_kernel[grid](*args, **kwargs)
    if plan_key is not None:
        _ROTARY_PLANS.record(plan_key, rotary_kernel, compiled, grid, args, kwargs, _ROTARY_SLOTS)


def rotary_head_block(tokens: int, heads: int, table: tuning.Rotary | None = None) -> int:
    """Heads per program (a power of two) by `table` (default `tuning.COMMON.rotary`): few
    tokens split their heads over more programs so that every SM has work, many tokens take all
    of a token's heads in one program, which loads the token's cos/sin once."""
    table = table or tuning.COMMON.rotary
    if tokens <= table.few_tokens:
        block = table.few_heads
    elif tokens <= table.mid_tokens:
        block = table.mid_heads
    else:
        block = heads
    return min(next_power_of_2(block), next_power_of_2(heads))


def key_head_block(head_block: int, k_heads: int) -> int:
    """Key heads a program's tile holds: its block of heads, or all the key heads (a power of
    two) where the block is wider; programs past the key heads mask theirs off."""
    return min(head_block, next_power_of_2(k_heads))
