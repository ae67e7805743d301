"""Attention over a KV cache as opaque custom ops, the ops piecewise compilation splits at.

Both read the caches, which the model writes before them (``ir_spec.ops.write_kv_cache``, so
that the rotary embedding and the cache write can fuse), and write the attention output into
`out` (the one argument mutated, nothing returned). Caches are ``[slots, max_positions,
kv_heads, head_dim]``; a call of ``batch <= slots`` sequences uses slots ``0..batch-1``. Rows
with negative positions are padding (``ir_stack.compile`` pads calls to CUDA graph sizes with
position -1): they attend to position 0 and their outputs are ignored. Rows past the last slot
must be padding (a batch of 3 replays the graph of 4 with caches of 3 slots): they are skipped
and their outputs zeroed.

- ``torch.ops.ir_stack.attention``: any number of tokens per sequence; reads the attended
  length on the host, so it is tagged ``cudagraph_unsafe`` and runs eagerly between captured
  pieces. Whole prompts (positions ``0..tokens-1``) attend over their own keys and values.
- ``torch.ops.ir_stack.prompt_plan``: what `attention` reads on the host (the attended length,
  whether every sequence is a whole prompt), read once for a step of every layer: the model
  passes it to each layer's `attention`, so a prompt synchronizes the host with the GPU once,
  not once a layer (each synchronization drains the GPU's queue while the host launches the
  next piece).
- ``torch.ops.ir_stack.decode_attention``: one token per sequence, no host synchronization, so
  it can be captured in a CUDA graph (split-K Triton kernels on CUDA GPUs, `decode_kernel`) and
  a decode step can replay as one full graph.
"""

import torch
import torch.nn.functional as F
from torch import Tensor

import ir_dispatch

from . import decode_kernel


def _rows_with_slots(
    rows: tuple[Tensor, ...], k_cache: Tensor, positions: Tensor, out: Tensor
) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
    """`rows` (``[batch * tokens, ...]`` tensors), `positions` and `out` cut to the sequences
    that have a cache slot. The rest are padding past the last slot: their outputs are zeroed
    (shapes are static, so this stays capturable in a CUDA graph)."""
    batch, tokens = positions.shape
    kept = min(batch, k_cache.shape[0])
    if kept == batch:
        return rows, positions, out
    cut = kept * tokens
    out[cut:].zero_()
    return tuple(r[:cut] for r in rows), positions[:kept], out[:cut]


def _attend(
    query: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor, length: int, out: Tensor
) -> None:
    """Token ``t`` of sequence ``b`` attends to cache slots ``0..positions[b, t]`` of the first
    `length` positions (padding rows, with negative positions, to position 0); math in
    float32."""
    positions = positions.clamp(min=0)
    batch, tokens = positions.shape
    head_dim = k_cache.shape[3]
    heads = query.shape[-1] // head_dim
    keys = k_cache[:batch, :length].transpose(1, 2)  # [batch, kv_heads, length, head_dim]
    values = v_cache[:batch, :length].transpose(1, 2)
    q = query.reshape(batch, tokens, heads, head_dim).transpose(1, 2)
    mask = torch.arange(length, device=q.device)[None, :] <= positions[:, :, None]
    result = F.scaled_dot_product_attention(
        q.float(), keys.float(), values.float(), attn_mask=mask[:, None], enable_gqa=True
    )
    out.copy_(result.transpose(1, 2).reshape(out.shape))


def _plan_of(positions: Tensor) -> Tensor:
    """``[last position, rows that are not their prompt's own index]`` of ``[batch, tokens]``
    `positions`, on the host: one synchronization for both."""
    expected = torch.arange(positions.shape[1], device=positions.device)
    return torch.stack([positions.max(), (positions != expected).sum()]).cpu()


# cudagraph_unsafe: it reads the device on the host, which a CUDA graph cannot capture;
# piecewise compilation runs it eagerly between captured pieces.
@torch.library.custom_op(
    "ir_stack::prompt_plan", mutates_args=(), tags=(torch.Tag.cudagraph_unsafe,)
)
def prompt_plan(positions: Tensor, slots: int) -> Tensor:
    """What `attention` needs on the host of ``[batch, tokens]`` `positions` over caches of
    `slots` slots, read once for every layer of a step: an int64 CPU tensor ``[last position,
    scattered rows]`` (``scattered == 0``: every sequence is a whole prompt ``0..tokens-1``).
    Rows past the last slot are padding and left out, as `attention` leaves them out."""
    return _plan_of(positions[:slots])


@prompt_plan.register_fake
def _prompt_plan_fake(positions: Tensor, slots: int) -> Tensor:
    return torch.empty(2, dtype=torch.int64, device="cpu")


# cudagraph_unsafe: the attended length is read on the host (.item()), which a CUDA graph
# cannot capture; piecewise compilation runs it eagerly between captured pieces.
@torch.library.custom_op(
    "ir_stack::attention", mutates_args=("out",), tags=(torch.Tag.cudagraph_unsafe,)
)
def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    positions: Tensor,
    out: Tensor,
    plan: Tensor | None = None,
) -> None:
    """Causal attention of ``[batch * tokens, heads * head_dim]`` queries over the cache.

    `positions` is ``[batch, tokens]``: token ``t`` of sequence ``b`` attends to positions
    ``0..positions[b, t]`` of slot ``b``, its own key and value already stored at
    ``positions[b, t]``. `key` and `value` are the tokens' own (``[batch * tokens, kv_heads *
    head_dim]``): whole prompts attend over them alone. Rows with negative positions are
    padding. `plan` is `prompt_plan` of `positions` and the caches' slots; without it the op
    reads the positions on the host itself.
    """
    (query, key, value), positions, out = _rows_with_slots(
        (query, key, value), k_cache, positions, out
    )
    if plan is None:
        plan = _plan_of(positions)
    last, scattered = plan.tolist()
    if scattered == 0:
        _attend_prompts(query, key, value, positions.shape[0], k_cache.shape[3], out)
    else:
        _attend(query, k_cache, v_cache, positions, int(last) + 1, out)


def _attend_prompts(
    query: Tensor, key: Tensor, value: Tensor, batch: int, head_dim: int, out: Tensor
) -> None:
    """Causal attention of whole prompts (positions ``0..tokens-1``) over their own keys, in
    the activations' dtype, so SDPA can pick a flash kernel."""
    tokens = query.shape[0] // batch
    q, k, v = (
        t.reshape(batch, tokens, t.shape[-1] // head_dim, head_dim).transpose(1, 2)
        for t in (query, key, value)
    )
    result = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    out.copy_(result.transpose(1, 2).reshape(out.shape))


@torch.library.custom_op("ir_stack::decode_attention", mutates_args=("out",))
def decode_attention(
    query: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor, out: Tensor
) -> None:
    """`attention` for one token per sequence (``positions`` is ``[batch, 1]``), without host
    synchronization: it attends over every cache position under a mask (reference
    implementation; CUDA GPUs run a Triton kernel that stops at each sequence's length)."""
    (query,), positions, out = _rows_with_slots((query,), k_cache, positions, out)
    _attend(query, k_cache, v_cache, positions, k_cache.shape[1], out)


@decode_attention.register_kernel("cuda")
def _(query: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor, out: Tensor) -> None:
    (query,), positions, out = _rows_with_slots((query,), k_cache, positions, out)
    if decode_kernel.supports(query, k_cache, positions, out):
        decode_kernel.decode_attention(
            query, k_cache, v_cache, positions, out, batch_invariant=ir_dispatch.batch_invariant()
        )
    else:
        _attend(query, k_cache, v_cache, positions, k_cache.shape[1], out)


@attention.register_fake
def _attention_fake(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    positions: Tensor,
    out: Tensor,
    plan: Tensor | None = None,
) -> None:
    return None  # it only writes into `out`


@decode_attention.register_fake
def _decode_attention_fake(
    query: Tensor, k_cache: Tensor, v_cache: Tensor, positions: Tensor, out: Tensor
) -> None:
    return None  # it only writes into `out`
