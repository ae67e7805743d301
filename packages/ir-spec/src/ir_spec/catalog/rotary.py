"""Rotary position embedding."""

from typing import Any

import torch
from torch import Tensor

from .. import checks
from ..dispatch_key import tensor_summary
from ..errors import argument_error
from ..op import register_op
from ..sampling import SampleSpec

_POSITION_DTYPES = frozenset({torch.int64, torch.int32})


def _rotate(
    x: Tensor, cos: Tensor, sin: Tensor, tokens: int, head_size: int, is_neox_style: bool
) -> Tensor:
    rotary_dim = 2 * cos.shape[-1]
    heads = x.shape[-1] // head_size
    xh = x.float().reshape(tokens, heads, head_size)
    rot, rest = xh[..., :rotary_dim], xh[..., rotary_dim:]
    c, s = cos.unsqueeze(1), sin.unsqueeze(1)
    if is_neox_style:
        x1, x2 = rot.chunk(2, dim=-1)
        rotated = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        rotated = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
    return torch.cat((rotated, rest), dim=-1).reshape(x.shape).to(x.dtype)


@register_op(allow_inplace=True)
def rotary_embedding(
    positions: Tensor,
    x_query: Tensor,
    x_key: Tensor,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
) -> tuple[Tensor, Tensor]:
    """Rotate query and key by their positions; returns ``(query, key)``.

    `x_query` / `x_key` are ``[..., heads * head_size]`` with ``positions.shape ==
    x_query.shape[:-1]``; `cos_sin_cache` is ``[max_position, rotary_dim]`` holding
    ``cat(cos, sin)``. The first `rotary_dim` elements of each head rotate (partial rotary when
    ``rotary_dim < head_size``): neox style rotates the two halves, otherwise interleaved pairs.
    Math in float32, result in the input dtype.

    Positions must lie in ``0..max_position - 1``. For one outside, this function fails in
    torch's indexing (`IndexError` on the CPU, a device-side assertion on a GPU); a kernel,
    which cannot check without waiting for the GPU, reads nothing outside the table and gives
    that token's rotated elements NaN.
    """
    tokens = positions.numel()
    cos, sin = cos_sin_cache.index_select(0, positions.reshape(-1)).float().chunk(2, dim=-1)
    query = _rotate(x_query, cos, sin, tokens, head_size, is_neox_style)
    key = _rotate(x_key, cos, sin, tokens, head_size, is_neox_style)
    return query, key


@rotary_embedding.register_fake
def _rotary_embedding_fake(
    positions: Tensor,
    x_query: Tensor,
    x_key: Tensor,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
) -> tuple[Tensor, Tensor]:
    # fresh row-major tensors, as the native computation returns; tracing the native math on
    # fake tensors costs about 25 ms per call, a large part of tracing a decoder
    return x_query.new_empty(x_query.shape), x_key.new_empty(x_key.shape)


@rotary_embedding.register_checker
def _check_rotary_embedding(
    positions: Any,
    x_query: Any,
    x_key: Any,
    head_size: Any,
    cos_sin_cache: Any,
    is_neox_style: Any,
) -> None:
    check_rotary_arguments(
        "rotary_embedding", positions, x_query, x_key, head_size, cos_sin_cache, is_neox_style
    )


def check_rotary_arguments(
    op: str,
    positions: Any,
    x_query: Any,
    x_key: Any,
    head_size: Any,
    cos_sin_cache: Any,
    is_neox_style: Any,
) -> None:
    """The rotary arguments of `op` (`rotary_embedding` and the ops that fuse it)."""
    checks.activation(op, "x_query", x_query)
    checks.activation(op, "x_key", x_key)
    if isinstance(head_size, bool) or not isinstance(head_size, int) or head_size <= 0:
        raise argument_error(op, "head_size", head_size, "a positive int")
    for name, t in (("x_query", x_query), ("x_key", x_key)):
        if t.shape[-1] % head_size != 0:
            raise argument_error(
                op, name, t, f"a last dimension divisible by head_size={head_size}"
            )
    if x_key.dtype != x_query.dtype or x_key.shape[:-1] != x_query.shape[:-1]:
        raise argument_error(
            op,
            "x_key",
            x_key,
            f"dtype {x_query.dtype} and leading shape {tuple(x_query.shape[:-1])}",
        )
    if not isinstance(positions, torch.Tensor) or positions.dtype not in _POSITION_DTYPES:
        raise argument_error(op, "positions", positions, "an int64 or int32 Tensor")
    if positions.shape != x_query.shape[:-1]:
        raise argument_error(
            op, "positions", positions, f"shape {tuple(x_query.shape[:-1])} (x_query.shape[:-1])"
        )
    if not isinstance(cos_sin_cache, torch.Tensor) or cos_sin_cache.dim() != 2:
        raise argument_error(
            op, "cos_sin_cache", cos_sin_cache, "a 2-D [max_position, rotary_dim] Tensor"
        )
    if cos_sin_cache.shape[0] == 0:
        raise argument_error(
            op, "cos_sin_cache", cos_sin_cache, "a table of at least one position (row)"
        )
    if cos_sin_cache.dtype not in checks.FLOAT_DTYPES:
        raise argument_error(
            op, "cos_sin_cache", cos_sin_cache, f"dtype {checks.FLOAT_DTYPE_NAMES}"
        )
    rotary_dim = cos_sin_cache.shape[-1]
    if rotary_dim % 2 != 0 or not 0 < rotary_dim <= head_size:
        raise argument_error(
            op,
            "cos_sin_cache",
            cos_sin_cache,
            f"an even rotary_dim (last dimension) in 2..head_size={head_size}",
        )
    if positions.device != x_query.device or cos_sin_cache.device != x_query.device:
        raise argument_error(op, "positions", positions, f"positions and cache on {x_query.device}")
    if not isinstance(is_neox_style, bool):
        raise argument_error(op, "is_neox_style", is_neox_style, "a bool")


@rotary_embedding.register_dispatch_key
def _rotary_embedding_key(
    positions: Any,
    x_query: Any,
    x_key: Any,
    head_size: Any,
    cos_sin_cache: Any,
    is_neox_style: Any,
) -> tuple[Any, ...]:
    # positions is as long as the batch: record its dtype and layout, and whether the leading
    # shapes of the three agree, never the length itself.
    lead = x_query.shape[:-1]
    return (
        positions.dtype,
        positions.device,
        positions.shape == lead,
        positions.is_contiguous(),
        tensor_summary(x_query),
        tensor_summary(x_key),
        x_key.shape[:-1] == lead,
        head_size,
        tensor_summary(cos_sin_cache),
        cos_sin_cache.shape[0],
        is_neox_style,
    )


def head_size_for(width: int) -> int:
    """The largest of 128, 64, ..., 8 dividing `width`, else `width` (a single head)."""
    return next((h for h in (128, 64, 32, 16, 8) if width % h == 0), width)


def make_cos_sin_cache(max_position: int, rotary_dim: int, base: float = 10000.0) -> Tensor:
    """The standard RoPE table ``cat(cos, sin)`` of shape ``[max_position, rotary_dim]``, fp32."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    freqs = torch.outer(torch.arange(max_position, dtype=torch.float64), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).float()


@rotary_embedding.register_input_generator
def _rotary_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    """`hidden_size` is the query width; keys have a quarter of the heads (at least one)."""
    gen = spec.generator()
    head_size = spec.options.get("head_size", head_size_for(spec.hidden_size))
    heads = spec.hidden_size // head_size
    kv_heads = max(1, heads // 4)
    rotary_dim = spec.options.get("rotary_dim", head_size - head_size % 2)
    max_position = spec.options.get("max_position", 4096)
    query = spec.randn(gen, heads * head_size)
    key = spec.randn(gen, kv_heads * head_size)
    positions = spec.randint(gen, max_position)
    cache = make_cos_sin_cache(max_position, rotary_dim)
    cache = cache.to(device=spec.device, dtype=spec.options.get("cache_dtype", torch.float32))
    return (positions, query, key, head_size, cache, spec.options.get("is_neox_style", True))
