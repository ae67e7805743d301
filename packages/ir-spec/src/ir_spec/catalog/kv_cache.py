"""The KV cache: `write_kv_cache` stores keys and values by slot; `rotary_embedding_write_kv_cache`
rotates query and key and stores the rotated key with the value in one op.

A cache is ``[blocks, block_size, kv_heads, head_size]`` (a paged cache; the reference models'
``[sequences, max_positions, ...]`` cache is the case of one block per sequence). A token's
slot is ``block * block_size + offset``; a negative slot marks a padding token that stores
nothing. The slots of one call must be distinct (which of two writes to one slot lands is
unspecified). Both ops declare the caches mutated in their schemas, so compilers keep the writes
and their order.
"""

from typing import Any

import torch
from torch import Tensor

from .. import checks
from ..dispatch_key import tensor_summary
from ..errors import argument_error
from ..op import register_op
from ..sampling import SampleSpec
from .rotary import _rotary_inputs, check_rotary_arguments, rotary_embedding

_SLOT_DTYPES = frozenset({torch.int64, torch.int32})


@register_op(activations=("key", "value"), mutates=("key_cache", "value_cache"))
def write_kv_cache(
    key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, slot_mapping: Tensor
) -> None:
    """Store each token's key and value in its slot of the caches.

    `key` is ``[..., kv_heads * head_size]`` and `value` ``[..., kv_heads * value_head_size]``
    with ``slot_mapping.shape == key.shape[:-1]``; the caches are ``[blocks, block_size,
    kv_heads, head_size]`` (and ``value_head_size``) of the keys' dtype. Token ``t`` goes to
    ``cache.view(-1, kv_heads, head_size)[slot_mapping[t]]``; tokens with a negative slot store
    nothing. Returns nothing: the caches are written in place.
    """
    slots = slot_mapping.reshape(-1)
    valid = slots >= 0
    rows = slots[valid]
    for new, cache in ((key, key_cache), (value, value_cache)):
        flat = cache.view(-1, cache.shape[2], cache.shape[3])
        flat[rows] = new.reshape(-1, cache.shape[2], cache.shape[3])[valid]


@write_kv_cache.register_fake
def _write_kv_cache_fake(
    key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, slot_mapping: Tensor
) -> None:
    return None


def _check_cache(op: str, name: str, cache: Any, new: Tensor, new_name: str) -> None:
    """A ``[blocks, block_size, kv_heads, head_size]`` cache that `new` (``[..., kv_heads *
    head_size]``) fits, of its dtype and device, whose slots are one stride apart (the first two
    dimensions merge into one) and whose heads are contiguous."""
    if not isinstance(cache, torch.Tensor) or cache.dim() != 4:
        raise argument_error(
            op, name, cache, "a 4-D [blocks, block_size, kv_heads, head_size] Tensor"
        )
    if cache.dtype != new.dtype or cache.device != new.device:
        raise argument_error(op, name, cache, f"dtype {new.dtype} on {new.device} (as {new_name})")
    width = cache.shape[2] * cache.shape[3]
    if new.shape[-1] != width:
        raise argument_error(
            op,
            new_name,
            new,
            f"a last dimension of kv_heads * head_size = {width} ({name}.shape[2:])",
        )
    head_stride, element_stride = cache.stride(2), cache.stride(3)
    if (cache.shape[3] > 1 and element_stride != 1) or (
        cache.shape[2] > 1 and head_stride != cache.shape[3]
    ):
        raise argument_error(op, name, cache, "contiguous heads (strides [..., head_size, 1])")
    if cache.shape[1] > 1 and cache.stride(0) != cache.shape[1] * cache.stride(1):
        raise argument_error(
            op, name, cache, "blocks whose slots are one stride apart (dims 0 and 1 mergeable)"
        )


def _check_slots(op: str, slot_mapping: Any, key: Tensor) -> None:
    if not isinstance(slot_mapping, torch.Tensor) or slot_mapping.dtype not in _SLOT_DTYPES:
        raise argument_error(op, "slot_mapping", slot_mapping, "an int64 or int32 Tensor")
    if slot_mapping.shape != key.shape[:-1] or slot_mapping.device != key.device:
        raise argument_error(
            op,
            "slot_mapping",
            slot_mapping,
            f"shape {tuple(key.shape[:-1])} (key.shape[:-1]) on {key.device}",
        )


def _check_kv(op: str, key: Any, value: Any, key_cache: Any, value_cache: Any) -> None:
    checks.activation(op, "key", key)
    checks.activation(op, "value", value)
    if value.shape[:-1] != key.shape[:-1] or value.dtype != key.dtype:
        raise argument_error(
            op, "value", value, f"dtype {key.dtype} and leading shape {tuple(key.shape[:-1])}"
        )
    _check_cache(op, "key_cache", key_cache, key, "key")
    _check_cache(op, "value_cache", value_cache, value, "value")
    if value_cache.shape[:3] != key_cache.shape[:3]:
        raise argument_error(
            op,
            "value_cache",
            value_cache,
            f"the blocks, block size and heads of key_cache {tuple(key_cache.shape[:3])}",
        )


@write_kv_cache.register_checker
def _check_write_kv_cache(
    key: Any, value: Any, key_cache: Any, value_cache: Any, slot_mapping: Any
) -> None:
    _check_kv("write_kv_cache", key, value, key_cache, value_cache)
    _check_slots("write_kv_cache", slot_mapping, key)


def _cache_summary(cache: Tensor) -> tuple[Any, ...]:
    return (cache.dtype, cache.device, tuple(cache.shape), cache.stride())


@write_kv_cache.register_dispatch_key
def _write_kv_cache_key(
    key: Any, value: Any, key_cache: Any, value_cache: Any, slot_mapping: Any
) -> tuple[Any, ...]:
    lead = key.shape[:-1]
    return (
        tensor_summary(key),
        tensor_summary(value),
        value.shape[:-1] == lead,
        _cache_summary(key_cache),
        _cache_summary(value_cache),
        slot_mapping.dtype,
        slot_mapping.device,
        slot_mapping.shape == lead,
    )


def sample_cache(
    spec: SampleSpec, gen: torch.Generator, tokens: int, kv_heads: int, head_size: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Random key and value caches of ``block_size`` (option, default 16) slots a block, with
    room for `tokens` and some more, and distinct random slots for the tokens; the
    ``padding_slots`` option marks every third token as padding (slot -1)."""
    block_size = spec.options.get("block_size", 16)
    blocks = max(1, -(-2 * tokens // block_size))
    caches = [
        torch.randn(blocks, block_size, kv_heads, head_size, generator=gen, device=spec.device).to(
            spec.dtype
        )
        for _ in range(2)
    ]
    slots = torch.randperm(blocks * block_size, generator=gen, device=spec.device)[:tokens]
    if spec.options.get("padding_slots", False):
        slots[::3] = -1
    return caches[0], caches[1], slots.reshape(spec.batch_shape)


@write_kv_cache.register_input_generator
def _write_kv_cache_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    """`hidden_size` is the key width (``kv_heads * head_size``)."""
    gen = spec.generator()
    head_size = spec.options.get("head_size", _head_size_for(spec.hidden_size))
    kv_heads = spec.hidden_size // head_size
    key = spec.randn(gen, spec.hidden_size)
    value = spec.randn(gen, spec.hidden_size)
    tokens = key[..., 0].numel()
    key_cache, value_cache, slots = sample_cache(spec, gen, tokens, kv_heads, head_size)
    return (key, value, key_cache, value_cache, slots)


def _head_size_for(width: int) -> int:
    return next((h for h in (128, 64, 32, 16, 8) if width % h == 0), width)


@register_op(allow_inplace=True, mutates=("key_cache", "value_cache"))
def rotary_embedding_write_kv_cache(
    positions: Tensor,
    x_query: Tensor,
    x_key: Tensor,
    value: Tensor,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
    key_cache: Tensor,
    value_cache: Tensor,
    slot_mapping: Tensor,
) -> tuple[Tensor, Tensor]:
    """``rotary_embedding`` of query and key, then ``write_kv_cache`` of the rotated key and the
    value; returns the rotated ``(query, key)``. One kernel reads the key and value once and
    writes them once, where the unfused ops read and write them three times."""
    query, key = rotary_embedding.native(
        positions, x_query, x_key, head_size, cos_sin_cache, is_neox_style
    )
    write_kv_cache.native(key, value, key_cache, value_cache, slot_mapping)
    return query, key


@rotary_embedding_write_kv_cache.register_fake
def _rotary_embedding_write_kv_cache_fake(
    positions: Tensor,
    x_query: Tensor,
    x_key: Tensor,
    value: Tensor,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
    key_cache: Tensor,
    value_cache: Tensor,
    slot_mapping: Tensor,
) -> tuple[Tensor, Tensor]:
    return x_query.new_empty(x_query.shape), x_key.new_empty(x_key.shape)


@rotary_embedding_write_kv_cache.register_checker
def _check_rotary_embedding_write_kv_cache(
    positions: Any,
    x_query: Any,
    x_key: Any,
    value: Any,
    head_size: Any,
    cos_sin_cache: Any,
    is_neox_style: Any,
    key_cache: Any,
    value_cache: Any,
    slot_mapping: Any,
) -> None:
    op = "rotary_embedding_write_kv_cache"
    check_rotary_arguments(op, positions, x_query, x_key, head_size, cos_sin_cache, is_neox_style)
    _check_kv(op, x_key, value, key_cache, value_cache)
    if key_cache.shape[3] != head_size:
        raise argument_error(
            op, "key_cache", key_cache, f"head_size={head_size} as its last dimension"
        )
    _check_slots(op, slot_mapping, x_key)


@rotary_embedding_write_kv_cache.register_dispatch_key
def _rotary_embedding_write_kv_cache_key(
    positions: Any,
    x_query: Any,
    x_key: Any,
    value: Any,
    head_size: Any,
    cos_sin_cache: Any,
    is_neox_style: Any,
    key_cache: Any,
    value_cache: Any,
    slot_mapping: Any,
) -> tuple[Any, ...]:
    lead = x_query.shape[:-1]
    return (
        positions.dtype,
        positions.device,
        positions.shape == lead,
        positions.is_contiguous(),
        tensor_summary(x_query),
        tensor_summary(x_key),
        x_key.shape[:-1] == lead,
        tensor_summary(value),
        value.shape[:-1] == lead,
        head_size,
        tensor_summary(cos_sin_cache),
        cos_sin_cache.shape[0],
        is_neox_style,
        _cache_summary(key_cache),
        _cache_summary(value_cache),
        slot_mapping.dtype,
        slot_mapping.device,
        slot_mapping.shape == lead,
    )


@rotary_embedding_write_kv_cache.register_input_generator
def _rotary_embedding_write_kv_cache_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    """As `rotary_embedding`'s sample (`hidden_size` the query width), with a value and caches."""
    positions, query, key, head_size, cos_sin_cache, is_neox_style = _rotary_inputs(spec)
    gen = spec.generator()
    gen.manual_seed(spec.seed + 1)
    value = spec.randn(gen, key.shape[-1])
    tokens = positions.numel()
    key_cache, value_cache, slots = sample_cache(
        spec, gen, tokens, key.shape[-1] // head_size, head_size
    )
    return (
        positions,
        query,
        key,
        value,
        head_size,
        cos_sin_cache,
        is_neox_style,
        key_cache,
        value_cache,
        slots,
    )
