"""Split-K (flash-decoding) attention for one token per sequence over a KV cache, in Triton.

A decode step attends one query row per sequence over that sequence's cached keys and values:
the work is a stream of the cache, and one program per (sequence, head) would leave most of a
GPU idle at small batches. So the cached positions of each sequence are split into chunks:

- ``_partial_kernel``, one program per (sequence, KV head, split), streams its chunk once for
  all the query heads that share the KV head (grouped-query attention: the group's query rows
  form one matrix, and the scores are one matrix product per block of keys) and writes the
  chunk's running maximum, softmax denominator and weighted sum of values, in float32;
- ``_combine_kernel``, one program per (sequence, query head), rescales the splits' partial
  results to their common maximum and divides.

A chunk's length follows from its own sequence's length and the number of splits alone, so a
sequence's result never depends on the rest of the batch where the number of splits does not
either (`splits_for`: batch-invariant mode fixes it from the cache's shape and the device).
Lengths are read on the device (from `positions`): nothing waits on the host, and the kernels
can be captured in a CUDA graph.
"""

import math

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton ships with CUDA builds of torch
    triton = None

#: Keys and values a program loads at once.
BLOCK_N = 32
#: The query rows of one KV head form a matrix of at least this many rows (Triton's matrix
#: product needs 16); rows past the group's are masked.
MIN_GROUP_ROWS = 16
#: Programs a decode step aims for, as a multiple of the device's SM count.
PROGRAMS_PER_SM = 2
#: Most splits a sequence takes (bounds the partial results' scratch memory).
MAX_SPLITS = 64
#: The largest element offset within one sequence's cache the kernel computes in 32 bits (a
#: sequence's start is a 64-bit offset: a whole cache may hold more than 2**31 elements).
MAX_SEQUENCE_OFFSET = 2**31 - 1


def supports(query: Tensor, k_cache: Tensor, positions: Tensor, out: Tensor) -> bool:
    """True where the kernel applies: Triton present, one token per sequence, a power-of-two
    head size from 16, unit-stride rows and heads, and one sequence's cache rows within 32-bit
    offsets (`MAX_SEQUENCE_OFFSET`; offsets across sequences are 64-bit)."""
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
        and k_cache.shape[1] * k_cache.stride(1) <= MAX_SEQUENCE_OFFSET
    )


def _sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return 8  # the interpreter on the CPU: a few splits, to exercise the combination


def splits_for(
    batch: int, kv_heads: int, max_positions: int, device: torch.device, batch_invariant: bool
) -> int:
    """How many chunks each sequence's cache splits into: enough programs to fill the device
    (`PROGRAMS_PER_SM` per SM) over ``batch * kv_heads`` (sequence, KV head) pairs, at most one
    chunk per `BLOCK_N` positions and `MAX_SPLITS`. In batch-invariant mode the batch is left
    out (counted as one sequence), so a sequence is split the same way in any batch."""
    pairs = kv_heads * (1 if batch_invariant else max(batch, 1))
    wanted = -(-PROGRAMS_PER_SM * _sm_count(device) // pairs)
    return max(1, min(wanted, MAX_SPLITS, -(-max_positions // BLOCK_N)))


if triton is not None:

    @triton.jit
    def _partial_kernel(
        q_ptr,
        k_ptr,
        v_ptr,
        pos_ptr,
        max_ptr,
        sum_ptr,
        acc_ptr,
        stride_q,
        stride_kb,
        stride_kp,
        stride_kh,
        stride_vb,
        stride_vp,
        stride_vh,
        stride_pos,
        scale,
        HEADS: tl.constexpr,
        GROUP: tl.constexpr,
        GROUP_ROWS: tl.constexpr,
        SPLITS: tl.constexpr,
        HEAD_DIM: tl.constexpr,
        BLOCK: tl.constexpr,
        PRECISION: tl.constexpr,
    ):
        seq = tl.program_id(0).to(tl.int64)  # a cache may hold more than 2**31 elements
        kv_head = tl.program_id(1)
        split = tl.program_id(2)
        # padding rows (negative positions) attend to position 0
        length = tl.maximum(tl.load(pos_ptr + seq * stride_pos).to(tl.int32), 0) + 1
        # the chunk: a multiple of BLOCK from the sequence's own length and SPLITS alone
        chunk = tl.cdiv(tl.cdiv(length, SPLITS), BLOCK) * BLOCK
        start = split * chunk
        end = tl.minimum(start + chunk, length)
        g = tl.arange(0, GROUP_ROWS)
        d = tl.arange(0, HEAD_DIM)
        in_group = g < GROUP
        head = kv_head * GROUP + g
        q = tl.load(
            q_ptr + seq * stride_q + head[:, None] * HEAD_DIM + d[None, :],
            mask=in_group[:, None],
            other=0.0,
        )
        k_base = k_ptr + seq * stride_kb + kv_head * stride_kh
        v_base = v_ptr + seq * stride_vb + kv_head * stride_vh
        running_max = tl.full([GROUP_ROWS], float("-inf"), tl.float32)
        running_sum = tl.zeros([GROUP_ROWS], tl.float32)
        acc = tl.zeros([GROUP_ROWS, HEAD_DIM], tl.float32)
        for block_start in range(start, end, BLOCK):
            n = block_start + tl.arange(0, BLOCK)
            valid = n < end
            k = tl.load(
                k_base + n[:, None] * stride_kp + d[None, :], mask=valid[:, None], other=0.0
            )
            scores = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(tl.float32) * scale
            scores = tl.where(valid[None, :], scores, float("-inf"))
            new_max = tl.maximum(running_max, tl.max(scores, axis=1))
            correction = tl.exp(running_max - new_max)
            p = tl.exp(scores - new_max[:, None])
            v = tl.load(
                v_base + n[:, None] * stride_vp + d[None, :], mask=valid[:, None], other=0.0
            )
            running_sum = running_sum * correction + tl.sum(p, axis=1)
            acc = acc * correction[:, None] + tl.dot(
                p.to(v.dtype), v, input_precision=PRECISION
            ).to(tl.float32)
            running_max = new_max
        # partial results of (sequence, head, split); an empty chunk leaves -inf, 0 and 0
        row = (seq * HEADS + head) * SPLITS + split
        tl.store(max_ptr + row, running_max, mask=in_group)
        tl.store(sum_ptr + row, running_sum, mask=in_group)
        tl.store(acc_ptr + row[:, None] * HEAD_DIM + d[None, :], acc, mask=in_group[:, None])

    @triton.jit
    def _combine_kernel(
        max_ptr,
        sum_ptr,
        acc_ptr,
        out_ptr,
        HEADS: tl.constexpr,
        SPLITS: tl.constexpr,
        SPLITS_POW2: tl.constexpr,
        HEAD_DIM: tl.constexpr,
    ):
        seq = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1)
        s = tl.arange(0, SPLITS_POW2)
        d = tl.arange(0, HEAD_DIM)
        row = (seq * HEADS + head) * SPLITS + s
        present = s < SPLITS
        maxima = tl.load(max_ptr + row, mask=present, other=float("-inf"))
        sums = tl.load(sum_ptr + row, mask=present, other=0.0)
        accs = tl.load(
            acc_ptr + row[:, None] * HEAD_DIM + d[None, :], mask=present[:, None], other=0.0
        )
        top = tl.max(maxima, axis=0)
        # a split that saw no keys has a maximum of -inf: weight 0 (never exp(-inf - -inf))
        weight = tl.where(maxima > float("-inf"), tl.exp(maxima - top), 0.0)
        total = tl.sum(sums * weight, axis=0)
        result = tl.sum(accs * weight[:, None], axis=0) / total
        tl.store(out_ptr + (seq * HEADS + head) * HEAD_DIM + d, result.to(out_ptr.dtype.element_ty))


def decode_attention(
    query: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    positions: Tensor,
    out: Tensor,
    *,
    batch_invariant: bool = False,
) -> None:
    """Attention of ``query [batch, heads * head_dim]`` over cache positions
    ``0..positions[b, 0]`` of slot ``b``, into `out`; the caller checked `supports`."""
    batch = positions.shape[0]
    max_positions, kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    heads = query.shape[-1] // head_dim
    query = query.reshape(batch, heads * head_dim)
    if batch == 0:
        return
    group = heads // kv_heads
    splits = splits_for(batch, kv_heads, max_positions, query.device, batch_invariant)
    partial_max = torch.empty(batch * heads * splits, dtype=torch.float32, device=query.device)
    partial_sum = torch.empty_like(partial_max)
    partial_acc = torch.empty(
        batch * heads * splits * head_dim, dtype=torch.float32, device=query.device
    )
    _partial_kernel[(batch, kv_heads, splits)](
        query,
        k_cache,
        v_cache,
        positions,
        partial_max,
        partial_sum,
        partial_acc,
        query.stride(0),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        positions.stride(0),
        1.0 / math.sqrt(head_dim),
        HEADS=heads,
        GROUP=group,
        GROUP_ROWS=max(MIN_GROUP_ROWS, triton.next_power_of_2(group)),
        SPLITS=splits,
        HEAD_DIM=head_dim,
        BLOCK=BLOCK_N,
        # float32 caches: full-precision products (a TF32 product would round the inputs)
        PRECISION="ieee" if k_cache.dtype == torch.float32 else "tf32",
    )
    _combine_kernel[(batch, heads)](
        partial_max,
        partial_sum,
        partial_acc,
        out,
        HEADS=heads,
        SPLITS=splits,
        SPLITS_POW2=triton.next_power_of_2(splits),
        HEAD_DIM=head_dim,
    )
