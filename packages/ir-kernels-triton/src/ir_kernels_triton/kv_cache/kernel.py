"""The cache write (`write_kv_cache`) and the rotary embedding that writes the rotated key and
the value into the cache (`rotary_embedding_write_kv_cache`).

A cache ``[blocks, block_size, kv_heads, head_size]`` whose heads are contiguous and whose
blocks merge with their slots (what the ops' checks ask) is a matrix of slot rows, one stride
apart (`slot_stride`): a token's key or value row is copied whole into the row of its slot. A
padding token (a negative slot) stores nothing: its copies are masked off, so no lane touches
the address its slot would give.

`rotary_write_kv_cache_kernel` takes a block of heads of one token, as the rotary kernel does:
it rotates the query heads, rotates the key heads and writes each rotated key head both to the
returned key and to the cache, and copies the value heads into the cache, so the key and the
value are read once and every output written once. It loads the rotated pairs and the value
heads before its first store (`rotary_write_kv_cache_kernel` says why); the tails of partial
rotary, which pass through, are copied last. Every element is computed alone, so
the blocking may follow the batch (`rotary.kernel.rotary_head_block` over
`tuning.COMMON.rotary_cache`). Its cache stores are marked
evict-first: the cache rows are read by a later step's attention, while the rotated query and key
are read by the very next kernel, so the L2 keeps those rather than the rows just stored.
"""

import torch
import triton
import triton.language as tl

from ..launch import tuning
from ..launch.plans import launch_key, launch_plans_enabled, plans_for
from ..launch.programmatic import await_previous_grid, launch_options
from ..launch.rows import next_power_of_2, num_rows, rows
from ..rotary.kernel import (
    cos_sin,
    head_pairs,
    head_tails,
    key_head_block,
    rotary_head_block,
    rotated,
)

#: Plans of `launch_write_kv_cache` and of `launch_rotary_write_kv_cache` (`launch.plans`), and
#: the positions among their kernels' arguments of the tensors that change between calls.
_WRITE_PLANS = plans_for("write_kv_cache")
_WRITE_SLOTS = (0, 2, 4, 6, 8)
_ROTARY_WRITE_PLANS = plans_for("rotary_write_kv_cache")
_ROTARY_WRITE_SLOTS = (0, 1, 3, 5, 7, 9, 11, 13, 15, 16)


def slot_stride(cache: torch.Tensor) -> int:
    """The stride between the slots of a ``[blocks, block_size, ...]`` cache, whose first two
    dimensions merge (the ops' check): that of the slots, or of the blocks where a block holds
    one slot."""
    return int(cache.stride(1) if cache.shape[1] > 1 else cache.stride(0))


@triton.jit
def _copy_row(src_row, dst_row, cols, width):
    """Copy the elements `cols` of a row of `width` elements (0: none)."""
    mask = cols < width
    tl.store(dst_row + cols, tl.load(src_row + cols, mask=mask), mask=mask)


@triton.jit
def write_kv_cache_kernel(
    k_ptr,
    k_stride,
    v_ptr,
    v_stride,
    k_cache_ptr,
    k_slot_stride,
    v_cache_ptr,
    v_slot_stride,
    slot_ptr,
    k_width,
    v_width,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr = False,
):
    await_previous_grid(PDL)
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    # a padding token copies a row of no elements (a bound, not a mask `& (slot >= 0)`, which
    # the interpreter runs as int32)
    stored = slot >= 0
    _copy_row(
        k_ptr + token * k_stride,
        k_cache_ptr + slot * k_slot_stride,
        cols,
        tl.where(stored, k_width, 0),
    )
    _copy_row(
        v_ptr + token * v_stride,
        v_cache_ptr + slot * v_slot_stride,
        cols,
        tl.where(stored, v_width, 0),
    )


def launch_write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Copy each token's key and value row into its slot's row of the caches (`slot_mapping`
    contiguous, negative slots skipped); `tuning.KvCache` sets the launch."""
    tokens = num_rows(key)
    if tokens == 0:
        return
    slots = slot_mapping.reshape(-1)
    values = (key, value, key_cache, value_cache, slots)
    plan_key = None
    if launch_plans_enabled():
        plan_key = launch_key((), *values)
        if _WRITE_PLANS.replay(plan_key, values):
            return
    k2, v2 = rows(key), rows(value)
    k_width, v_width = key.shape[-1], value.shape[-1]
    table = tuning.COMMON.kv_cache
    block = min(table.block, next_power_of_2(max(k_width, v_width)))
    grid = (tokens, triton.cdiv(max(k_width, v_width), block))
    args = (
        k2,
        k2.stride(0),
        v2,
        v2.stride(0),
        key_cache,
        slot_stride(key_cache),
        value_cache,
        slot_stride(value_cache),
        slots,
        k_width,
        v_width,
    )
    kwargs = dict(BLOCK=block, num_warps=table.warps, **launch_options(k2, grid, table.warps))
    compiled = write_kv_cache_kernel[grid](*args, **kwargs)
    if plan_key is not None:
        _WRITE_PLANS.record(
            plan_key, write_kv_cache_kernel, compiled, grid, args, kwargs, _WRITE_SLOTS
        )


@triton.jit
def _load_pairs(
    src_ptr, heads, head_size, half,
    IS_NEOX: tl.constexpr, HEAD_BLOCK: tl.constexpr, HALF_BLOCK: tl.constexpr,
):  # fmt: skip
    """The rotated pairs of a block of `heads` heads at `src_ptr` (`rotary.kernel.head_pairs`),
    as loaded."""
    base, first, second, mask = head_pairs(heads, head_size, half, IS_NEOX, HEAD_BLOCK, HALF_BLOCK)
    x1 = tl.load(src_ptr + base + first, mask=mask, other=0.0)
    x2 = tl.load(src_ptr + base + second, mask=mask, other=0.0)
    return x1, x2


@triton.jit
def _store_pairs(
    dst_ptr, o1, o2, heads, head_size, half,
    IS_NEOX: tl.constexpr, HEAD_BLOCK: tl.constexpr, HALF_BLOCK: tl.constexpr, HINT: tl.constexpr,
):  # fmt: skip
    """Store the pairs (`o1`, `o2`) of a block of `heads` heads at `dst_ptr`, with the
    eviction hint `HINT` ("" for none)."""
    base, first, second, mask = head_pairs(heads, head_size, half, IS_NEOX, HEAD_BLOCK, HALF_BLOCK)
    tl.store(dst_ptr + base + first, o1, mask=mask, eviction_policy=HINT)
    tl.store(dst_ptr + base + second, o2, mask=mask, eviction_policy=HINT)


@triton.jit
def _copy_tails(
    src_ptr, dst_ptr, cache_ptr, heads, cached_heads, head_size, half,
    COPY_TAIL: tl.constexpr, HEAD_BLOCK: tl.constexpr, TAIL_BLOCK: tl.constexpr,
):  # fmt: skip
    """The elements past the rotary dimension of the key heads at `src_ptr` (partial rotary):
    to the cache for the first `cached_heads` heads, and to `dst_ptr` out of place
    (`COPY_TAIL`)."""
    base, tail, tail_mask = head_tails(heads, head_size, half, HEAD_BLOCK, TAIL_BLOCK)
    xt = tl.load(src_ptr + base + tail, mask=tail_mask)
    if COPY_TAIL:
        tl.store(dst_ptr + base + tail, xt, mask=tail_mask)
    _, _, cached_tail = head_tails(cached_heads, head_size, half, HEAD_BLOCK, TAIL_BLOCK)
    tl.store(cache_ptr + base + tail, xt, mask=cached_tail, eviction_policy="evict_first")


@triton.jit
def rotary_write_kv_cache_kernel(
    pos_ptr,
    q_ptr,
    q_stride,
    k_ptr,
    k_stride,
    v_ptr,
    v_stride,
    q_out_ptr,
    q_out_stride,
    k_out_ptr,
    k_out_stride,
    k_cache_ptr,
    k_slot_stride,
    v_cache_ptr,
    v_slot_stride,
    slot_ptr,
    cos_sin_ptr,
    cos_sin_stride,
    max_position,
    q_heads,
    k_heads,
    head_size,
    v_head_size,
    half,
    IS_NEOX: tl.constexpr,
    COPY_TAIL: tl.constexpr,
    HAS_TAIL: tl.constexpr,
    HEAD_BLOCK: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    TAIL_BLOCK: tl.constexpr,
    V_BLOCK: tl.constexpr,
    KV_BLOCK: tl.constexpr,
    PDL: tl.constexpr = False,
):
    await_previous_grid(PDL)
    token = tl.program_id(0).to(tl.int64)
    first_head = tl.program_id(1) * HEAD_BLOCK
    first = first_head * head_size
    q_src = q_ptr + token * q_stride + first
    k_src = k_ptr + token * k_stride + first
    k_heads_here = k_heads - first_head
    slot = tl.load(slot_ptr + token).to(tl.int64)
    # a padding token caches no head (a bound, not a mask: see `write_kv_cache_kernel`)
    cached_heads = tl.where(slot >= 0, k_heads_here, 0)
    h = tl.arange(0, KV_BLOCK)[:, None]
    j = tl.arange(0, V_BLOCK)[None, :]
    v_offs = (first_head + h) * v_head_size + j
    v_mask = (h < cached_heads) & (j < v_head_size)
    # the rotated pairs and the value are loaded before the first store: the compiler cannot
    # tell a store from an alias of a later load, so it issues no load ahead of an earlier
    # store, and loads placed after the query's stores would start their wait for memory only
    # then (the tails of partial rotary, copied last, are the exception)
    q1, q2 = _load_pairs(
        q_src, q_heads - first_head, head_size, half, IS_NEOX, HEAD_BLOCK, HALF_BLOCK
    )
    k1, k2 = _load_pairs(k_src, k_heads_here, head_size, half, IS_NEOX, KV_BLOCK, HALF_BLOCK)
    value = tl.load(v_ptr + token * v_stride + v_offs, mask=v_mask)
    cos, sin = cos_sin(pos_ptr, token, cos_sin_ptr, cos_sin_stride, max_position, half, HALF_BLOCK)

    q_out = q_out_ptr + token * q_out_stride + first
    o1, o2 = rotated(q1.to(tl.float32), q2.to(tl.float32), cos, sin)
    dtype = q_out_ptr.dtype.element_ty
    o1, o2 = o1.to(dtype), o2.to(dtype)
    _store_pairs(
        q_out, o1, o2, q_heads - first_head, head_size, half, IS_NEOX, HEAD_BLOCK, HALF_BLOCK, ""
    )
    k_out = k_out_ptr + token * k_out_stride + first
    k_cache = k_cache_ptr + slot * k_slot_stride + first
    o1, o2 = rotated(k1.to(tl.float32), k2.to(tl.float32), cos, sin)
    dtype = k_out_ptr.dtype.element_ty
    o1, o2 = o1.to(dtype), o2.to(dtype)
    _store_pairs(k_out, o1, o2, k_heads_here, head_size, half, IS_NEOX, KV_BLOCK, HALF_BLOCK, "")
    # the cache rows are read by a later step's attention, the rotated query and key by the
    # very next kernel: the L2 keeps those
    _store_pairs(
        k_cache, o1, o2, cached_heads, head_size, half, IS_NEOX, KV_BLOCK, HALF_BLOCK, "evict_first"
    )
    tl.store(
        v_cache_ptr + slot * v_slot_stride + v_offs,
        value,
        mask=v_mask,
        eviction_policy="evict_first",
    )
    if HAS_TAIL:
        if COPY_TAIL:
            q_base, q_tail, q_tail_mask = head_tails(
                q_heads - first_head, head_size, half, HEAD_BLOCK, TAIL_BLOCK
            )
            tl.store(
                q_out + q_base + q_tail,
                tl.load(q_src + q_base + q_tail, mask=q_tail_mask),
                mask=q_tail_mask,
            )
        _copy_tails(
            k_src,
            k_out,
            k_cache,
            k_heads_here,
            cached_heads,
            head_size,
            half,
            COPY_TAIL,
            KV_BLOCK,
            TAIL_BLOCK,
        )


def launch_rotary_write_kv_cache(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    query_out: torch.Tensor,
    key_out: torch.Tensor,
    head_block: int | None = None,
    num_warps: int | None = None,
) -> None:
    """Rotate `query`/`key` into `query_out`/`key_out` (which may be the inputs themselves)
    and write the rotated key and `value` into the slots' rows of the caches. `head_block`
    (heads a program, a power of two) and `num_warps` override `rotary_head_block` and
    the warps of `tuning.COMMON.rotary_cache` (for tuning sweeps)."""
    tokens = num_rows(query)
    if tokens == 0:
        return
    flat_positions = positions.reshape(-1)
    slots = slot_mapping.reshape(-1)
    values = (
        flat_positions,
        query,
        key,
        value,
        query_out,
        key_out,
        key_cache,
        value_cache,
        slots,
        cos_sin_cache,
    )
    in_place = query_out.data_ptr() == query.data_ptr()
    plan_key = None
    if head_block is None and num_warps is None and launch_plans_enabled():
        # out of place the kernel copies the tail too
        plan_key = launch_key((head_size, is_neox_style, in_place), *values)
        if _ROTARY_WRITE_PLANS.replay(plan_key, values):
            return
    rotary_dim = cos_sin_cache.shape[-1]
    half = rotary_dim // 2
    q_heads = query.shape[-1] // head_size
    k_heads = key.shape[-1] // head_size
    v_head_size = value.shape[-1] // k_heads
    heads = max(q_heads, k_heads)
    table = tuning.COMMON.rotary_cache
    if head_block is None:
        head_block = rotary_head_block(tokens, heads, table)
    warps = table.warps if num_warps is None else num_warps
    q2, k2, v2, qo2, ko2 = rows(query), rows(key), rows(value), rows(query_out), rows(key_out)
    grid = (tokens, triton.cdiv(heads, head_block))
    args = (
        flat_positions,
        q2,
        q2.stride(0),
        k2,
        k2.stride(0),
        v2,
        v2.stride(0),
        qo2,
        qo2.stride(0),
        ko2,
        ko2.stride(0),
        key_cache,
        slot_stride(key_cache),
        value_cache,
        slot_stride(value_cache),
        slots,
        cos_sin_cache,
        cos_sin_cache.stride(0),
        cos_sin_cache.shape[0],
        q_heads,
        k_heads,
        head_size,
        v_head_size,
        half,
    )
    tail = head_size - rotary_dim
    kwargs = dict(
        IS_NEOX=is_neox_style,
        COPY_TAIL=tail > 0 and not in_place,
        HAS_TAIL=tail > 0,
        HEAD_BLOCK=head_block,
        HALF_BLOCK=next_power_of_2(half),
        TAIL_BLOCK=next_power_of_2(max(tail, 1)),
        V_BLOCK=next_power_of_2(v_head_size),
        KV_BLOCK=key_head_block(head_block, k_heads),
        num_warps=warps,
        **launch_options(q2, grid, warps),
    )
    compiled = rotary_write_kv_cache_kernel[grid](*args, **kwargs)
    if plan_key is not None:
        _ROTARY_WRITE_PLANS.record(
            plan_key,
            rotary_write_kv_cache_kernel,
            compiled,
            grid,
            args,
            kwargs,
            _ROTARY_WRITE_SLOTS,
        )
