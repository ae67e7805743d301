"""`qk_norm_rotary_embedding`: the per-head RMSNorm of query and key, then the rotary embedding.

Qwen3, Gemma 3, OLMo 2 and others normalize each head of the query and the key before rotating
them. The fused op reads each head once and writes it once, where the unfused ops (two norms,
then the rotary embedding) read and write it twice.
"""

from typing import Any

import torch
from torch import Tensor

from .. import checks
from ..dispatch_key import tensor_summary
from ..errors import argument_error
from ..op import register_op
from ..sampling import SampleSpec
from .norm import rms_norm
from .rotary import _rotary_inputs, check_rotary_arguments, rotary_embedding


def _norm_heads(x: Tensor, weight: Tensor | None, epsilon: float, head_size: int) -> Tensor:
    """`rms_norm` of each ``head_size`` slice of the last dimension."""
    normed: Tensor = rms_norm.native(x.unflatten(-1, (-1, head_size)), weight, epsilon)
    return normed.flatten(-2)


@register_op(allow_inplace=True)
def qk_norm_rotary_embedding(
    positions: Tensor,
    x_query: Tensor,
    x_key: Tensor,
    q_weight: Tensor | None,
    k_weight: Tensor | None,
    epsilon: float,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
) -> tuple[Tensor, Tensor]:
    """``rotary_embedding(positions, norm(x_query), norm(x_key), ...)`` where ``norm`` is
    ``rms_norm`` of each head (weights ``[head_size]``, or None for ones); returns
    ``(query, key)``. Query and key may be slices of one packed ``qkv`` projection (rows one
    stride apart). The normalized heads are rounded to the input dtype before they rotate, as
    the two ops give them to each other."""
    query = _norm_heads(x_query, q_weight, epsilon, head_size)
    key = _norm_heads(x_key, k_weight, epsilon, head_size)
    rotated: tuple[Tensor, Tensor] = rotary_embedding.native(
        positions, query, key, head_size, cos_sin_cache, is_neox_style
    )
    return rotated


@qk_norm_rotary_embedding.register_fake
def _qk_norm_rotary_embedding_fake(
    positions: Tensor,
    x_query: Tensor,
    x_key: Tensor,
    q_weight: Tensor | None,
    k_weight: Tensor | None,
    epsilon: float,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
) -> tuple[Tensor, Tensor]:
    return x_query.new_empty(x_query.shape), x_key.new_empty(x_key.shape)


@qk_norm_rotary_embedding.register_checker
def _check_qk_norm_rotary_embedding(
    positions: Any,
    x_query: Any,
    x_key: Any,
    q_weight: Any,
    k_weight: Any,
    epsilon: Any,
    head_size: Any,
    cos_sin_cache: Any,
    is_neox_style: Any,
) -> None:
    op = "qk_norm_rotary_embedding"
    check_rotary_arguments(op, positions, x_query, x_key, head_size, cos_sin_cache, is_neox_style)
    checks.epsilon(op, epsilon)
    for name, weight in (("q_weight", q_weight), ("k_weight", k_weight)):
        if weight is None:
            continue
        try:
            checks.norm_weight(op, weight, x_query[..., :head_size])
        except ValueError:
            raise argument_error(
                op,
                name,
                weight,
                f"None or a 1-D tensor of size head_size={head_size}, of dtype "
                f"{x_query.dtype} or float32, on {x_query.device}",
            ) from None


@qk_norm_rotary_embedding.register_dispatch_key
def _qk_norm_rotary_embedding_key(
    positions: Any,
    x_query: Any,
    x_key: Any,
    q_weight: Any,
    k_weight: Any,
    epsilon: Any,
    head_size: Any,
    cos_sin_cache: Any,
    is_neox_style: Any,
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
        None if q_weight is None else tensor_summary(q_weight),
        None if k_weight is None else tensor_summary(k_weight),
        epsilon,
        head_size,
        tensor_summary(cos_sin_cache),
        cos_sin_cache.shape[0],
        is_neox_style,
    )


@qk_norm_rotary_embedding.register_input_generator
def _qk_norm_rotary_embedding_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    """As `rotary_embedding`'s sample (`hidden_size` the query width), with per-head weights
    (the ``weight`` option False: none)."""
    positions, query, key, head_size, cos_sin_cache, is_neox_style = _rotary_inputs(spec)
    gen = spec.generator()
    gen.manual_seed(spec.seed + 2)
    with_weight = spec.options.get("weight", True)
    q_weight = spec.weight(gen, head_size) if with_weight else None
    k_weight = spec.weight(gen, head_size) if with_weight else None
    epsilon = spec.options.get("epsilon", 1e-6)
    return (
        positions,
        query,
        key,
        q_weight,
        k_weight,
        epsilon,
        head_size,
        cos_sin_cache,
        is_neox_style,
    )


# The native composition rounds the normalized heads to the input dtype before rotating them,
# and each rotated element sums two such values: up to half a unit in the last place of the
# largest normalized values (about 4 for unit-variance inputs) each. A kernel that rotates the
# float32 norm differs by that much in absolute terms, more than float16's default tolerance.
qk_norm_rotary_embedding.set_tolerance(torch.float16, atol=4e-3, rtol=1e-3)
