"""Attention over a KV cache as one opaque custom op, ``torch.ops.ir_stack.attention``.

It writes the new keys and values into the caches and the attention output into `out` (all
three mutated, nothing returned), the shape of op that piecewise compilation splits graphs at.
"""

import torch
import torch.nn.functional as F
from torch import Tensor


# cudagraph_unsafe: the attended length is read on the host (.item()), which a CUDA graph
# cannot capture; piecewise compilation runs it eagerly between captured pieces.
@torch.library.custom_op(
    "ir_stack::attention",
    mutates_args=("k_cache", "v_cache", "out"),
    tags=(torch.Tag.cudagraph_unsafe,),
)
def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    positions: Tensor,
    out: Tensor,
) -> None:
    """Causal attention of ``[batch * tokens, heads * head_dim]`` queries over the cache.

    `positions` is ``[batch, tokens]``: token ``t`` of sequence ``b`` is stored at cache slot
    ``positions[b, t]`` and attends to slots ``0..positions[b, t]``. Caches are
    ``[batch, max_positions, kv_heads, head_dim]``.
    """
    batch, tokens = positions.shape
    kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
    heads = query.shape[-1] // head_dim
    k = key.view(batch, tokens, kv_heads, head_dim)
    v = value.view(batch, tokens, kv_heads, head_dim)
    slots = positions.unsqueeze(-1).unsqueeze(-1).expand(batch, tokens, kv_heads, head_dim)
    k_cache.scatter_(1, slots, k)
    v_cache.scatter_(1, slots, v)
    length = int(positions.max().item()) + 1
    keys = k_cache[:, :length].transpose(1, 2)  # [batch, kv_heads, length, head_dim]
    values = v_cache[:, :length].transpose(1, 2)
    q = query.view(batch, tokens, heads, head_dim).transpose(1, 2)
    mask = torch.arange(length, device=q.device)[None, :] <= positions[:, :, None]
    result = F.scaled_dot_product_attention(
        q.float(), keys.float(), values.float(), attn_mask=mask[:, None], enable_gqa=True
    )
    out.copy_(result.transpose(1, 2).reshape(batch * tokens, heads * head_dim))


@attention.register_fake
def _(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    positions: Tensor,
    out: Tensor,
) -> None:
    return None
