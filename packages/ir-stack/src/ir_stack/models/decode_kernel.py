"""A Triton kernel for one-token-per-sequence attention over a KV cache.

One program per (sequence, query head) streams that sequence's keys and values in blocks up to
its length, read from `positions` on the device, with an online softmax in float32. Nothing is
read on the host, so the kernel can be captured in a CUDA graph.
"""

import math

from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton ships with CUDA builds of torch
    triton = None

BLOCK_N = 64


def supports(query: Tensor, k_cache: Tensor, positions: Tensor, out: Tensor) -> bool:
    """True where the kernel applies: Triton present, one token per sequence, a power-of-two
    head size, unit-stride rows."""
    head_dim = k_cache.shape[3]
    return (
        triton is not None
        and positions.dim() == 2
        and positions.shape[1] == 1
        and head_dim >= 16
        and head_dim & (head_dim - 1) == 0
        and query.stride(-1) == 1
        and out.is_contiguous()
        and k_cache.stride(-1) == 1
    )


if triton is not None:

    @triton.jit
    def _decode_attention_kernel(
        q_ptr,
        k_ptr,
        v_ptr,
        pos_ptr,
        out_ptr,
        stride_q,
        stride_kb,
        stride_kp,
        stride_kh,
        stride_vb,
        stride_vp,
        stride_vh,
        stride_pos,
        scale,
        HEADS_PER_KV: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        seq = tl.program_id(0)
        head = tl.program_id(1)
        num_heads = tl.num_programs(1)
        kv_head = head // HEADS_PER_KV
        # padding rows (negative positions) attend to position 0
        length = tl.maximum(tl.load(pos_ptr + seq * stride_pos).to(tl.int32), 0) + 1
        d = tl.arange(0, HEAD_DIM)
        q = tl.load(q_ptr + seq * stride_q + head * HEAD_DIM + d).to(tl.float32) * scale
        k_base = k_ptr + seq * stride_kb + kv_head * stride_kh
        v_base = v_ptr + seq * stride_vb + kv_head * stride_vh
        running_max = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), axis=0)
        running_sum = tl.sum(tl.zeros([BLOCK], tl.float32), axis=0)
        acc = tl.zeros([HEAD_DIM], tl.float32)
        for start in range(0, length, BLOCK):
            n = start + tl.arange(0, BLOCK)
            valid = n < length
            k = tl.load(
                k_base + n[:, None] * stride_kp + d[None, :], mask=valid[:, None], other=0.0
            ).to(tl.float32)
            scores = tl.where(valid, tl.sum(k * q[None, :], axis=1), float("-inf"))
            new_max = tl.maximum(running_max, tl.max(scores, axis=0))
            correction = tl.exp(running_max - new_max)
            p = tl.exp(scores - new_max)
            v = tl.load(
                v_base + n[:, None] * stride_vp + d[None, :], mask=valid[:, None], other=0.0
            ).to(tl.float32)
            running_sum = running_sum * correction + tl.sum(p, axis=0)
            acc = acc * correction + tl.sum(p[:, None] * v, axis=0)
            running_max = new_max
        result = acc / running_sum
        out_offset = (seq * num_heads + head) * HEAD_DIM + d
        tl.store(out_ptr + out_offset, result.to(out_ptr.dtype.element_ty))


def decode_attention(
    query: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor, out: Tensor
) -> None:
    """Attention of ``query [batch, heads * head_dim]`` over cache positions
    ``0..positions[b, 0]`` of slot ``b``, into `out`; the caller checked `supports`."""
    batch = positions.shape[0]
    kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
    heads = query.shape[-1] // head_dim
    query = query.reshape(batch, heads * head_dim)
    if batch == 0:
        return
    _decode_attention_kernel[(batch, heads)](
        query,
        k_cache,
        v_cache,
        positions,
        out,
        query.stride(0),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        positions.stride(0),
        1.0 / math.sqrt(head_dim),
        HEADS_PER_KV=heads // kv_heads,
        HEAD_DIM=head_dim,
        BLOCK=BLOCK_N,
    )
