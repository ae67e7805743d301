"""Provider ``cuda`` for every catalog op, and ``cuda_inplace`` for the ops whose activations
may be overwritten (``fused_add_rms_norm``, ``rotary_embedding``, ``qk_norm_rotary_embedding``
and ``rotary_embedding_write_kv_cache``): hand-written CUDA kernels registered as
``torch.ops.ir_cuda.*``.

Importing this module (the ``ir.providers`` entry point) builds the kernels on first use; where
that cannot happen (no GPU, no toolkit, a failed build) the implementations are registered with
``supported=False`` and the reason, which ``ir_dispatch.explain`` shows. Every kernel is
row-wise with a launch that depends on the row width only, so all are batch-invariant.
`supports_args` accepts float32/float16/bfloat16 CUDA tensors whose rows a kernel can address
(`ir_spec.row_view`), contiguous parameters (weights, scales, positions, rotary caches, slot
mappings) and KV caches of those dtypes on the GPU (the op's checker has made sure of their
layout).
"""

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ir_spec import IrOp, empty_rows, ops, row_view
from ir_spec.catalog.quant import empty_group_scales

from . import INPLACE_PROVIDER, PROVIDER
from .build import BuildUnavailable, build

logger = logging.getLogger("ir_kernels_cuda")
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FP8 = torch.float8_e4m3fn


def _availability() -> tuple[bool, str]:
    try:
        build()
    except BuildUnavailable as exc:
        return False, str(exc)
    except Exception as exc:  # a failed build must not break importing the provider
        logger.error("ir_kernels_cuda: building the kernels failed: %s", exc)
        return False, f"the build failed: {type(exc).__name__}: {str(exc)[:300]}"
    return True, ""


_BUILT = _availability()
#: Whether the kernels built here, and so whether the implementations are supported.
SUPPORTED: bool = _BUILT[0]
#: Why the kernels did not build here ("" where they did).
REASON: str = _BUILT[1]
#: The op namespace the implementations call: ``torch.ops.ir_cuda``. Tests without a GPU point
#: it at ``torch.ops.ir_cuda_emulated`` (`build.build_emulated`), the same kernels on the CPU.
KERNELS: Any = torch.ops.ir_cuda


def _rowwise(*tensors: Tensor) -> bool:
    return all(t.is_cuda and t.dtype in _DTYPES and row_view(t) is not None for t in tensors)


def _params_ok(*params: Tensor | None) -> bool:
    return all(p is None or (p.is_cuda and p.is_contiguous()) for p in params)


def _caches_ok(*caches: Tensor) -> bool:
    return all(c.is_cuda and c.dtype in _DTYPES for c in caches)


def _norm_weight_ok(weight: Tensor | None, x: Tensor) -> bool:
    # the kernels read the weight in the rows' dtype; a float32 one beside half rows goes on
    return weight is None or weight.dtype == x.dtype


def _provides(
    op: IrOp, supports_args: Callable[..., bool], *, inplace: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as provider ``cuda`` of `op` (``cuda_inplace`` where
    `inplace`): batch-invariant, supported where the kernels built, else with the reason."""
    return op.register_impl(
        INPLACE_PROVIDER if inplace else PROVIDER,
        supported=SUPPORTED,
        supports_args=supports_args,
        inplace=inplace,
        batch_invariant=True,
        unsupported_reason=REASON,
    )


def _as_rows(t: Tensor) -> Tensor:
    view = row_view(t)
    assert view is not None  # supports_args checked it
    return view


# ---------------------------------------------------------------------------- rms_norm
def rms_norm_supported(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    return _rowwise(x) and _params_ok(weight) and _norm_weight_ok(weight, x)


@_provides(ops.rms_norm, rms_norm_supported)
def rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    out = empty_rows(x)
    KERNELS.rms_norm_out(_as_rows(out), _as_rows(x), weight, epsilon, variance_size)
    return out


# ------------------------------------------------------------------ fused_add_rms_norm
def fused_add_rms_norm_supported(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    return _rowwise(x, x_residual) and _params_ok(weight) and _norm_weight_ok(weight, x)


@_provides(ops.fused_add_rms_norm, fused_add_rms_norm_supported)
def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    out = empty_rows(x)
    residual_out = empty_rows(x)
    KERNELS.fused_add_rms_norm_out(
        _as_rows(out),
        _as_rows(residual_out),
        _as_rows(x),
        _as_rows(x_residual),
        weight,
        epsilon,
        variance_size,
    )
    return out, residual_out


@_provides(ops.fused_add_rms_norm, fused_add_rms_norm_supported, inplace=True)
def fused_add_rms_norm_inplace(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    KERNELS.fused_add_rms_norm_(_as_rows(x), _as_rows(x_residual), weight, epsilon, variance_size)
    return x, x_residual


def rms_norm_static_quant_fp8_supported(
    x: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor
) -> bool:
    return _rowwise(x) and _params_ok(weight, scale) and _norm_weight_ok(weight, x)


@_provides(ops.rms_norm_static_quant_fp8, rms_norm_static_quant_fp8_supported)
def rms_norm_static_quant_fp8(
    x: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor
) -> Tensor:
    q = empty_rows(x, dtype=FP8)
    KERNELS.rms_norm_static_quant_fp8_out(_as_rows(q), _as_rows(x), weight, epsilon, scale)
    return q


def fused_add_rms_norm_static_quant_fp8_supported(
    x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor
) -> bool:
    return _rowwise(x, x_residual) and _params_ok(weight, scale) and _norm_weight_ok(weight, x)


@_provides(ops.fused_add_rms_norm_static_quant_fp8, fused_add_rms_norm_static_quant_fp8_supported)
def fused_add_rms_norm_static_quant_fp8(
    x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor
) -> tuple[Tensor, Tensor]:
    q, residual_out = empty_rows(x, dtype=FP8), empty_rows(x)
    KERNELS.fused_add_rms_norm_static_quant_fp8_out(
        _as_rows(q),
        _as_rows(residual_out),
        _as_rows(x),
        _as_rows(x_residual),
        weight,
        epsilon,
        scale,
    )
    return q, residual_out


def rms_norm_dynamic_quant_fp8_supported(
    x: Tensor, weight: Tensor | None, epsilon: float, scale_ub: Tensor | None = None
) -> bool:
    return _rowwise(x) and _params_ok(weight, scale_ub) and _norm_weight_ok(weight, x)


@_provides(ops.rms_norm_dynamic_quant_fp8, rms_norm_dynamic_quant_fp8_supported)
def rms_norm_dynamic_quant_fp8(
    x: Tensor, weight: Tensor | None, epsilon: float, scale_ub: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    q, scale = empty_rows(x, dtype=FP8), empty_rows(x, 1, torch.float32)
    KERNELS.rms_norm_dynamic_quant_fp8_out(
        _as_rows(q), _as_rows(scale), _as_rows(x), weight, epsilon, scale_ub
    )
    return q, scale


def fused_add_rms_norm_dynamic_quant_fp8_supported(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale_ub: Tensor | None = None,
) -> bool:
    return _rowwise(x, x_residual) and _params_ok(weight, scale_ub) and _norm_weight_ok(weight, x)


@_provides(ops.fused_add_rms_norm_dynamic_quant_fp8, fused_add_rms_norm_dynamic_quant_fp8_supported)
def fused_add_rms_norm_dynamic_quant_fp8(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale_ub: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    q, scale = empty_rows(x, dtype=FP8), empty_rows(x, 1, torch.float32)
    residual_out = empty_rows(x)
    KERNELS.fused_add_rms_norm_dynamic_quant_fp8_out(
        _as_rows(q),
        _as_rows(scale),
        _as_rows(residual_out),
        _as_rows(x),
        _as_rows(x_residual),
        weight,
        epsilon,
        scale_ub,
    )
    return q, scale, residual_out


def _group_scales(x: Tensor, width: int, group_size: int, column_major: bool) -> Tensor:
    """Float32 scales of `x`'s rows of `width` outputs in groups of `group_size`, in the op's
    layout (`ir_spec.catalog.quant.empty_group_scales`)."""
    return empty_group_scales(x, width // group_size, column_major=column_major)


def _scale_rows(scale: Tensor) -> Tensor:
    # the kernels address the scales by (token, group) strides: a [tokens, groups] view
    return scale.view(-1, scale.shape[-1])


def rms_norm_group_quant_fp8_supported(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_size: int = 128,
    column_major_scales: bool = False,
) -> bool:
    return _rowwise(x) and _params_ok(weight) and _norm_weight_ok(weight, x)


@_provides(ops.rms_norm_group_quant_fp8, rms_norm_group_quant_fp8_supported)
def rms_norm_group_quant_fp8(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_size: int = 128,
    column_major_scales: bool = False,
) -> tuple[Tensor, Tensor]:
    q = empty_rows(x, dtype=FP8)
    scale = _group_scales(x, x.shape[-1], group_size, column_major_scales)
    KERNELS.rms_norm_group_quant_fp8_out(
        _as_rows(q), _scale_rows(scale), _as_rows(x), weight, epsilon, group_size
    )
    return q, scale


def fused_add_rms_norm_group_quant_fp8_supported(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_size: int = 128,
    column_major_scales: bool = False,
) -> bool:
    return _rowwise(x, x_residual) and _params_ok(weight) and _norm_weight_ok(weight, x)


@_provides(ops.fused_add_rms_norm_group_quant_fp8, fused_add_rms_norm_group_quant_fp8_supported)
def fused_add_rms_norm_group_quant_fp8(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_size: int = 128,
    column_major_scales: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    q, residual_out = empty_rows(x, dtype=FP8), empty_rows(x)
    scale = _group_scales(x, x.shape[-1], group_size, column_major_scales)
    KERNELS.fused_add_rms_norm_group_quant_fp8_out(
        _as_rows(q),
        _scale_rows(scale),
        _as_rows(residual_out),
        _as_rows(x),
        _as_rows(x_residual),
        weight,
        epsilon,
        group_size,
    )
    return q, scale, residual_out


# ---------------------------------------------------------------- gated activations
def _gated_supported(x: Tensor, scale: Tensor | None = None) -> bool:
    return _rowwise(x) and x.shape[-1] % 2 == 0 and _params_ok(scale)


def silu_and_mul_supported(x: Tensor) -> bool:
    return _gated_supported(x)


def gelu_and_mul_supported(x: Tensor, approximate: str = "none") -> bool:
    return _gated_supported(x)


@_provides(ops.silu_and_mul, silu_and_mul_supported)
def silu_and_mul(x: Tensor) -> Tensor:
    out = empty_rows(x, x.shape[-1] // 2)
    KERNELS.silu_and_mul_out(_as_rows(out), _as_rows(x))
    return out


@_provides(ops.gelu_and_mul, gelu_and_mul_supported)
def gelu_and_mul(x: Tensor, approximate: str = "none") -> Tensor:
    out = empty_rows(x, x.shape[-1] // 2)
    KERNELS.gelu_and_mul_out(_as_rows(out), _as_rows(x), int(approximate == "tanh"))
    return out


def silu_and_mul_static_quant_fp8_supported(x: Tensor, scale: Tensor) -> bool:
    return _gated_supported(x, scale)


@_provides(ops.silu_and_mul_static_quant_fp8, silu_and_mul_static_quant_fp8_supported)
def silu_and_mul_static_quant_fp8(x: Tensor, scale: Tensor) -> Tensor:
    q = empty_rows(x, x.shape[-1] // 2, FP8)
    KERNELS.silu_and_mul_static_quant_fp8_out(_as_rows(q), _as_rows(x), scale)
    return q


def silu_and_mul_group_quant_fp8_supported(
    x: Tensor, group_size: int = 128, column_major_scales: bool = False
) -> bool:
    return _gated_supported(x)


@_provides(ops.silu_and_mul_group_quant_fp8, silu_and_mul_group_quant_fp8_supported)
def silu_and_mul_group_quant_fp8(
    x: Tensor, group_size: int = 128, column_major_scales: bool = False
) -> tuple[Tensor, Tensor]:
    d = x.shape[-1] // 2
    q = empty_rows(x, d, FP8)
    scale = _group_scales(x, d, group_size, column_major_scales)
    KERNELS.silu_and_mul_group_quant_fp8_out(
        _as_rows(q), _scale_rows(scale), _as_rows(x), group_size
    )
    return q, scale


# ----------------------------------------------------------------------------- quant
def static_quant_fp8_supported(x: Tensor, scale: Tensor) -> bool:
    return _rowwise(x) and _params_ok(scale)


@_provides(ops.static_quant_fp8, static_quant_fp8_supported)
def static_quant_fp8(x: Tensor, scale: Tensor) -> Tensor:
    q = empty_rows(x, dtype=FP8)
    KERNELS.static_quant_fp8_out(_as_rows(q), _as_rows(x), scale)
    return q


def dynamic_quant_fp8_supported(x: Tensor, scale_ub: Tensor | None = None) -> bool:
    return _rowwise(x) and _params_ok(scale_ub)


@_provides(ops.dynamic_quant_fp8, dynamic_quant_fp8_supported)
def dynamic_quant_fp8(x: Tensor, scale_ub: Tensor | None = None) -> tuple[Tensor, Tensor]:
    q, scale = empty_rows(x, dtype=FP8), empty_rows(x, 1, torch.float32)
    KERNELS.dynamic_quant_fp8_out(_as_rows(q), _as_rows(scale), _as_rows(x), scale_ub)
    return q, scale


def group_quant_fp8_supported(
    x: Tensor, group_size: int = 128, column_major_scales: bool = False
) -> bool:
    return _rowwise(x)


@_provides(ops.group_quant_fp8, group_quant_fp8_supported)
def group_quant_fp8(
    x: Tensor, group_size: int = 128, column_major_scales: bool = False
) -> tuple[Tensor, Tensor]:
    q = empty_rows(x, dtype=FP8)
    groups = x.shape[-1] // group_size
    scale = empty_group_scales(x, groups, column_major=column_major_scales)
    # the kernel addresses the scales by (token, group) strides: a [tokens, groups] view
    scale_rows = scale.view(-1, groups)
    KERNELS.group_quant_fp8_out(_as_rows(q), scale_rows, _as_rows(x), group_size)
    return q, scale


# ---------------------------------------------------------------------------- rotary
def rotary_embedding_supported(
    positions: Tensor,
    x_query: Tensor,
    x_key: Tensor,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
) -> bool:
    return _rowwise(x_query, x_key) and _params_ok(positions, cos_sin_cache)


@_provides(ops.rotary_embedding, rotary_embedding_supported)
def rotary_embedding(
    positions: Tensor,
    x_query: Tensor,
    x_key: Tensor,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
) -> tuple[Tensor, Tensor]:
    query, key = empty_rows(x_query), empty_rows(x_key)
    KERNELS.rotary_embedding_out(
        _as_rows(query),
        _as_rows(key),
        positions.reshape(-1),
        _as_rows(x_query),
        _as_rows(x_key),
        head_size,
        cos_sin_cache,
        is_neox_style,
    )
    return query, key


@_provides(ops.rotary_embedding, rotary_embedding_supported, inplace=True)
def rotary_embedding_inplace(
    positions: Tensor,
    x_query: Tensor,
    x_key: Tensor,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
) -> tuple[Tensor, Tensor]:
    """Rotates `x_query` and `x_key` in place and returns them."""
    KERNELS.rotary_embedding_(
        _as_rows(x_query),
        _as_rows(x_key),
        positions.reshape(-1),
        head_size,
        cos_sin_cache,
        is_neox_style,
    )
    return x_query, x_key


# ------------------------------------------------------------ qk norm + rotary
def qk_norm_rotary_embedding_supported(
    positions: Tensor,
    x_query: Tensor,
    x_key: Tensor,
    q_weight: Tensor | None,
    k_weight: Tensor | None,
    epsilon: float,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
) -> bool:
    return (
        _rowwise(x_query, x_key)
        and _params_ok(positions, cos_sin_cache, q_weight, k_weight)
        and _norm_weight_ok(q_weight, x_query)
        and _norm_weight_ok(k_weight, x_query)
    )


@_provides(ops.qk_norm_rotary_embedding, qk_norm_rotary_embedding_supported)
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
    query, key = empty_rows(x_query), empty_rows(x_key)
    KERNELS.qk_norm_rotary_embedding_out(
        _as_rows(query),
        _as_rows(key),
        positions.reshape(-1),
        _as_rows(x_query),
        _as_rows(x_key),
        q_weight,
        k_weight,
        epsilon,
        head_size,
        cos_sin_cache,
        is_neox_style,
    )
    return query, key


@_provides(ops.qk_norm_rotary_embedding, qk_norm_rotary_embedding_supported, inplace=True)
def qk_norm_rotary_embedding_inplace(
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
    """Normalizes and rotates `x_query` and `x_key` in place (strided slices of one packed
    ``qkv`` tensor included) and returns them."""
    KERNELS.qk_norm_rotary_embedding_(
        _as_rows(x_query),
        _as_rows(x_key),
        positions.reshape(-1),
        q_weight,
        k_weight,
        epsilon,
        head_size,
        cos_sin_cache,
        is_neox_style,
    )
    return x_query, x_key


# ---------------------------------------------------------------------- KV cache
def write_kv_cache_supported(
    key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, slot_mapping: Tensor
) -> bool:
    return _rowwise(key, value) and _params_ok(slot_mapping) and _caches_ok(key_cache, value_cache)


@_provides(ops.write_kv_cache, write_kv_cache_supported)
def write_kv_cache(
    key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, slot_mapping: Tensor
) -> None:
    KERNELS.write_kv_cache(
        _as_rows(key), _as_rows(value), key_cache, value_cache, slot_mapping.reshape(-1)
    )


def rotary_embedding_write_kv_cache_supported(
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
) -> bool:
    return (
        _rowwise(x_query, x_key, value)
        and _params_ok(positions, cos_sin_cache, slot_mapping)
        and _caches_ok(key_cache, value_cache)
    )


@_provides(ops.rotary_embedding_write_kv_cache, rotary_embedding_write_kv_cache_supported)
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
    query, key = empty_rows(x_query), empty_rows(x_key)
    KERNELS.rotary_embedding_write_kv_cache_out(
        _as_rows(query),
        _as_rows(key),
        positions.reshape(-1),
        _as_rows(x_query),
        _as_rows(x_key),
        _as_rows(value),
        head_size,
        cos_sin_cache,
        is_neox_style,
        key_cache,
        value_cache,
        slot_mapping.reshape(-1),
    )
    return query, key


@_provides(
    ops.rotary_embedding_write_kv_cache, rotary_embedding_write_kv_cache_supported, inplace=True
)
def rotary_embedding_write_kv_cache_inplace(
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
    """Rotates `x_query` and `x_key` in place, stores the rotated key and the value in their
    slots, and returns the rotated query and key."""
    KERNELS.rotary_embedding_write_kv_cache_(
        _as_rows(x_query),
        _as_rows(x_key),
        positions.reshape(-1),
        _as_rows(value),
        head_size,
        cos_sin_cache,
        is_neox_style,
        key_cache,
        value_cache,
        slot_mapping.reshape(-1),
    )
    return x_query, x_key


#: Every ``torch.ops.ir_cuda`` op; each writes into its arguments and returns nothing.
IR_CUDA_OPS = (
    "rms_norm_out",
    "fused_add_rms_norm_out",
    "fused_add_rms_norm_",
    "rms_norm_static_quant_fp8_out",
    "fused_add_rms_norm_static_quant_fp8_out",
    "rms_norm_dynamic_quant_fp8_out",
    "dynamic_quant_fp8_out",
    "group_quant_fp8_out",
    "static_quant_fp8_out",
    "silu_and_mul_out",
    "gelu_and_mul_out",
    "silu_and_mul_static_quant_fp8_out",
    "rotary_embedding_out",
    "rotary_embedding_",
    "fused_add_rms_norm_dynamic_quant_fp8_out",
    "rms_norm_group_quant_fp8_out",
    "fused_add_rms_norm_group_quant_fp8_out",
    "silu_and_mul_group_quant_fp8_out",
    "qk_norm_rotary_embedding_out",
    "qk_norm_rotary_embedding_",
    "rotary_embedding_write_kv_cache_out",
    "rotary_embedding_write_kv_cache_",
    "write_kv_cache",
    "empty_kernel",  # the benchmark's decode floor
)


_FAKES_REGISTERED: set[str] = set()


def register_fakes(namespace: str = "ir_cuda") -> None:
    """Register the fake implementations of `IR_CUDA_OPS` in `namespace` (``ir_cuda``, or
    ``ir_cuda_emulated`` for the host-emulation build), once per process. The ops write into
    their arguments and return nothing, so their fakes do nothing."""
    if namespace in _FAKES_REGISTERED:
        return
    for name in IR_CUDA_OPS:
        torch.library.register_fake(f"{namespace}::{name}")(lambda *args: None)
    _FAKES_REGISTERED.add(namespace)


if SUPPORTED:
    register_fakes()
