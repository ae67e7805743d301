"""Provider ``triton`` for every catalog op, and ``triton_inplace`` for the ops whose
activations may be overwritten (``fused_add_rms_norm``, ``rotary_embedding``,
``qk_norm_rotary_embedding`` and ``rotary_embedding_write_kv_cache``).

Every implementation is a row-wise kernel: a row's result never depends on other rows, and
every launch choice that changes the order of a row's arithmetic depends on the row width
only (a head's, for the QK norm), so all are registered batch-invariant.
`supports_args` accepts float32/float16/bfloat16 activations on the kernels' device whose rows
the kernels can address (last dimension contiguous, leading dimensions collapsing into one row
stride; for ``rms_norm`` also a packed projection's heads, `launch.rows.head_rows`),
contiguous parameters (weight, scale, cos/sin cache, positions, slot mapping) and KV caches
as the cache ops' checks shape them.

The all-reduce + norm composites (``all_reduce_rms_norm`` and its residual / static-fp8
forms) run `collective.allreduce_norm`: one kernel over torch symmetric memory on GPUs of an
NCCL group, the IR ``all_reduce`` and the norm kernels otherwise (the interpreter included).
They are not registered batch-invariant: the path, and with it the order of a row's sum,
depends on the message size, so on the number of rows.
"""

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ir_spec import IrOp, empty_rows, ops
from ir_spec.catalog.quant import empty_group_scales

from .activations.gated import ACT_GELU, ACT_GELU_TANH, ACT_SILU, launch_gated
from .collective.allreduce_norm import allreduce_norm, supported_args
from .kv_cache.kernel import launch_rotary_write_kv_cache, launch_write_kv_cache
from .launch import tuning
from .launch.device import on_kernel_device, unsupported_reason
from .launch.rows import head_rows, row_stride
from .launch.torch_ops import traceable
from .norms.group import launch_group_norm
from .norms.kernel import launch_norm
from .norms.rules import QUANT_DYNAMIC, QUANT_STATIC
from .quant.dynamic import launch_dynamic_quant
from .quant.group import launch_group_quant
from .quant.static import launch_static_quant
from .rotary.kernel import launch_rotary
from .rotary.qk_norm import launch_qk_norm_rotary

PROVIDER = "triton"
INPLACE_PROVIDER = "triton_inplace"
FP8 = torch.float8_e4m3fn
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Why the kernels cannot run here, or "" (then `SUPPORTED`).
UNSUPPORTED_REASON = unsupported_reason()
SUPPORTED = not UNSUPPORTED_REASON


def _provides(
    op: IrOp,
    supports_args: Callable[..., bool],
    *,
    inplace: bool = False,
    batch_invariant: bool = True,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Make the decorated kernel function traceable (`traceable`) and register it as provider
    ``triton`` of `op` (``triton_inplace`` where `inplace`): batch-invariant unless told,
    supported where Triton runs, else with the reason."""
    register = op.register_impl(
        INPLACE_PROVIDER if inplace else PROVIDER,
        supported=SUPPORTED,
        unsupported_reason=UNSUPPORTED_REASON,
        supports_args=supports_args,
        inplace=inplace,
        batch_invariant=batch_invariant,
    )
    return lambda fn: register(traceable(op, inplace=inplace)(fn))


def _rowwise(*tensors: Tensor) -> bool:
    return all(t.dtype in _DTYPES and row_stride(t) is not None for t in tensors)


def _param(t: Tensor | None) -> bool:
    return t is None or t.is_contiguous()


# ------------------------------------------------------------------------------ rms_norm
def _norm_ok(x: Tensor, weight: Tensor | None, *extra: Tensor | None) -> bool:
    return (
        on_kernel_device(x, weight, *extra)
        and _rowwise(x)
        and _param(weight)
        and all(_param(t) for t in extra)
    )


def rms_norm_supported(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    # also the per-head rows of a packed projection (`head_rows`: Qwen3's query and key norms),
    # held to every other check through one head of them, which one stride addresses
    return _norm_ok(x, weight) or (head_rows(x) is not None and _norm_ok(x[..., 0, :], weight))


@_provides(ops.rms_norm, rms_norm_supported)
def rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    out = empty_rows(x)
    launch_norm(x, weight, epsilon, variance_size, out)
    return out


def fused_add_rms_norm_supported(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    return _norm_ok(x, weight, None) and on_kernel_device(x_residual) and _rowwise(x_residual)


@_provides(ops.fused_add_rms_norm, fused_add_rms_norm_supported)
def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    out, residual_out = empty_rows(x), empty_rows(x)
    launch_norm(
        x, weight, epsilon, variance_size, out, residual=x_residual, residual_out=residual_out
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
    """Writes ``x + x_residual`` into `x_residual` and the normalized result into `x`."""
    launch_norm(x, weight, epsilon, variance_size, x, residual=x_residual, residual_out=x_residual)
    return x, x_residual


def rms_norm_static_quant_fp8_supported(
    x: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor
) -> bool:
    return _norm_ok(x, weight, scale)


@_provides(ops.rms_norm_static_quant_fp8, rms_norm_static_quant_fp8_supported)
def rms_norm_static_quant_fp8(
    x: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor
) -> Tensor:
    q = empty_rows(x, dtype=FP8)
    launch_norm(x, weight, epsilon, None, q, quant=QUANT_STATIC, scale=scale)
    return q


def fused_add_rms_norm_static_quant_fp8_supported(
    x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor
) -> bool:
    return _norm_ok(x, weight, scale) and on_kernel_device(x_residual) and _rowwise(x_residual)


@_provides(ops.fused_add_rms_norm_static_quant_fp8, fused_add_rms_norm_static_quant_fp8_supported)
def fused_add_rms_norm_static_quant_fp8(
    x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor
) -> tuple[Tensor, Tensor]:
    q, residual_out = empty_rows(x, dtype=FP8), empty_rows(x)
    launch_norm(
        x,
        weight,
        epsilon,
        None,
        q,
        residual=x_residual,
        residual_out=residual_out,
        quant=QUANT_STATIC,
        scale=scale,
    )
    return q, residual_out


def rms_norm_dynamic_quant_fp8_supported(
    x: Tensor, weight: Tensor | None, epsilon: float, scale_ub: Tensor | None = None
) -> bool:
    return _norm_ok(x, weight, scale_ub)


@_provides(ops.rms_norm_dynamic_quant_fp8, rms_norm_dynamic_quant_fp8_supported)
def rms_norm_dynamic_quant_fp8(
    x: Tensor, weight: Tensor | None, epsilon: float, scale_ub: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    q = empty_rows(x, dtype=FP8)
    scale = empty_rows(x, 1, torch.float32)
    launch_norm(
        x, weight, epsilon, None, q, quant=QUANT_DYNAMIC, scale_out=scale, scale_ub=scale_ub
    )
    return q, scale


def fused_add_rms_norm_dynamic_quant_fp8_supported(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale_ub: Tensor | None = None,
) -> bool:
    return _norm_ok(x, weight, scale_ub) and on_kernel_device(x_residual) and _rowwise(x_residual)


@_provides(ops.fused_add_rms_norm_dynamic_quant_fp8, fused_add_rms_norm_dynamic_quant_fp8_supported)
def fused_add_rms_norm_dynamic_quant_fp8(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale_ub: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    q, residual_out = empty_rows(x, dtype=FP8), empty_rows(x)
    scale = empty_rows(x, 1, torch.float32)
    launch_norm(
        x,
        weight,
        epsilon,
        None,
        q,
        residual=x_residual,
        residual_out=residual_out,
        quant=QUANT_DYNAMIC,
        scale_out=scale,
        scale_ub=scale_ub,
    )
    return q, scale, residual_out


#: Largest group the group-quant kernels hold in one tile row.
MAX_GROUP_SIZE = 16384


def rms_norm_group_quant_fp8_supported(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_size: int = 128,
    column_major_scales: bool = False,
) -> bool:
    return _norm_ok(x, weight) and group_size <= MAX_GROUP_SIZE


@_provides(ops.rms_norm_group_quant_fp8, rms_norm_group_quant_fp8_supported)
def rms_norm_group_quant_fp8(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_size: int = 128,
    column_major_scales: bool = False,
) -> tuple[Tensor, Tensor]:
    q = empty_rows(x, dtype=FP8)
    scale = empty_group_scales(x, x.shape[-1] // group_size, column_major=column_major_scales)
    launch_group_norm(x, weight, epsilon, group_size, q, scale)
    return q, scale


def fused_add_rms_norm_group_quant_fp8_supported(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_size: int = 128,
    column_major_scales: bool = False,
) -> bool:
    return (
        rms_norm_group_quant_fp8_supported(x, weight, epsilon, group_size)
        and on_kernel_device(x_residual)
        and _rowwise(x_residual)
    )


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
    scale = empty_group_scales(x, x.shape[-1] // group_size, column_major=column_major_scales)
    launch_group_norm(
        x, weight, epsilon, group_size, q, scale, residual=x_residual, residual_out=residual_out
    )
    return q, scale, residual_out


# ---------------------------------------------------------------------- activations
def _gated_ok(x: Tensor, scale: Tensor | None = None) -> bool:
    return on_kernel_device(x, scale) and _rowwise(x) and _param(scale)


def silu_and_mul_supported(x: Tensor) -> bool:
    return _gated_ok(x)


@_provides(ops.silu_and_mul, silu_and_mul_supported)
def silu_and_mul(x: Tensor) -> Tensor:
    out = empty_rows(x, x.shape[-1] // 2)
    launch_gated(x, out, ACT_SILU)
    return out


def gelu_and_mul_supported(x: Tensor, approximate: str = "none") -> bool:
    return _gated_ok(x)


@_provides(ops.gelu_and_mul, gelu_and_mul_supported)
def gelu_and_mul(x: Tensor, approximate: str = "none") -> Tensor:
    out = empty_rows(x, x.shape[-1] // 2)
    launch_gated(x, out, ACT_GELU_TANH if approximate == "tanh" else ACT_GELU)
    return out


def silu_and_mul_static_quant_fp8_supported(x: Tensor, scale: Tensor) -> bool:
    return _gated_ok(x, scale)


@_provides(ops.silu_and_mul_static_quant_fp8, silu_and_mul_static_quant_fp8_supported)
def silu_and_mul_static_quant_fp8(x: Tensor, scale: Tensor) -> Tensor:
    q = empty_rows(x, x.shape[-1] // 2, FP8)
    launch_gated(x, q, ACT_SILU, scale)
    return q


def silu_and_mul_group_quant_fp8_supported(
    x: Tensor, group_size: int = 128, column_major_scales: bool = False
) -> bool:
    return _gated_ok(x) and group_size <= MAX_GROUP_SIZE


@_provides(ops.silu_and_mul_group_quant_fp8, silu_and_mul_group_quant_fp8_supported)
def silu_and_mul_group_quant_fp8(
    x: Tensor, group_size: int = 128, column_major_scales: bool = False
) -> tuple[Tensor, Tensor]:
    d = x.shape[-1] // 2
    q = empty_rows(x, d, FP8)
    scale = empty_group_scales(x, d // group_size, column_major=column_major_scales)
    launch_group_quant(x, group_size, q, scale, act=ACT_SILU)
    return q, scale


# -------------------------------------------------------------------------- quant
def static_quant_fp8_supported(x: Tensor, scale: Tensor) -> bool:
    return _gated_ok(x, scale)


@_provides(ops.static_quant_fp8, static_quant_fp8_supported)
def static_quant_fp8(x: Tensor, scale: Tensor) -> Tensor:
    q = empty_rows(x, dtype=FP8)
    launch_static_quant(x, scale, q)
    return q


def dynamic_quant_fp8_supported(x: Tensor, scale_ub: Tensor | None = None) -> bool:
    return _gated_ok(x, scale_ub)


@_provides(ops.dynamic_quant_fp8, dynamic_quant_fp8_supported)
def dynamic_quant_fp8(x: Tensor, scale_ub: Tensor | None = None) -> tuple[Tensor, Tensor]:
    q = empty_rows(x, dtype=FP8)
    scale = empty_rows(x, 1, torch.float32)
    launch_dynamic_quant(x, scale_ub, q, scale)
    return q, scale


def group_quant_fp8_supported(
    x: Tensor, group_size: int = 128, column_major_scales: bool = False
) -> bool:
    return _gated_ok(x) and group_size <= MAX_GROUP_SIZE


@_provides(ops.group_quant_fp8, group_quant_fp8_supported)
def group_quant_fp8(
    x: Tensor, group_size: int = 128, column_major_scales: bool = False
) -> tuple[Tensor, Tensor]:
    q = empty_rows(x, dtype=FP8)
    groups = x.shape[-1] // group_size
    scale = empty_group_scales(x, groups, column_major=column_major_scales)
    launch_group_quant(x, group_size, q, scale)
    return q, scale


# ------------------------------------------------------------------------- rotary
def rotary_embedding_supported(
    positions: Tensor,
    x_query: Tensor,
    x_key: Tensor,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool,
) -> bool:
    return (
        on_kernel_device(positions, x_query, x_key, cos_sin_cache)
        and _rowwise(x_query, x_key)
        and positions.is_contiguous()
        and cos_sin_cache.is_contiguous()
    )


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
    launch_rotary(positions, x_query, x_key, head_size, cos_sin_cache, is_neox_style, query, key)
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
    launch_rotary(
        positions, x_query, x_key, head_size, cos_sin_cache, is_neox_style, x_query, x_key
    )
    return x_query, x_key


#: Largest head the QK-norm kernel holds in registers.
MAX_NORM_HEAD_SIZE = tuning.COMMON.rows.max_single_pass


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
        rotary_embedding_supported(
            positions, x_query, x_key, head_size, cos_sin_cache, is_neox_style
        )
        and on_kernel_device(q_weight, k_weight)
        and _param(q_weight)
        and _param(k_weight)
        and head_size <= MAX_NORM_HEAD_SIZE
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
    launch_qk_norm_rotary(
        positions,
        x_query,
        x_key,
        q_weight,
        k_weight,
        epsilon,
        head_size,
        cos_sin_cache,
        is_neox_style,
        query,
        key,
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
    """Normalizes and rotates `x_query` and `x_key` in place and returns them."""
    launch_qk_norm_rotary(
        positions,
        x_query,
        x_key,
        q_weight,
        k_weight,
        epsilon,
        head_size,
        cos_sin_cache,
        is_neox_style,
        x_query,
        x_key,
    )
    return x_query, x_key


# ----------------------------------------------------------------------- KV cache
def _caches_ok(key_cache: Tensor, value_cache: Tensor, slot_mapping: Tensor) -> bool:
    return (
        on_kernel_device(key_cache, value_cache, slot_mapping)
        and key_cache.dtype in _DTYPES
        and slot_mapping.is_contiguous()
    )


def write_kv_cache_supported(
    key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, slot_mapping: Tensor
) -> bool:
    return (
        on_kernel_device(key, value)
        and _rowwise(key, value)
        and _caches_ok(key_cache, value_cache, slot_mapping)
    )


@_provides(ops.write_kv_cache, write_kv_cache_supported)
def write_kv_cache(
    key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, slot_mapping: Tensor
) -> None:
    launch_write_kv_cache(key, value, key_cache, value_cache, slot_mapping)


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
        rotary_embedding_supported(
            positions, x_query, x_key, head_size, cos_sin_cache, is_neox_style
        )
        and on_kernel_device(value)
        and _rowwise(value)
        and _caches_ok(key_cache, value_cache, slot_mapping)
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
    launch_rotary_write_kv_cache(
        positions,
        x_query,
        x_key,
        value,
        head_size,
        cos_sin_cache,
        is_neox_style,
        key_cache,
        value_cache,
        slot_mapping,
        query,
        key,
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
    """Rotates `x_query` and `x_key` in place, writes the rotated key and `value` into the
    caches, and returns `x_query` and `x_key`."""
    launch_rotary_write_kv_cache(
        positions,
        x_query,
        x_key,
        value,
        head_size,
        cos_sin_cache,
        is_neox_style,
        key_cache,
        value_cache,
        slot_mapping,
        x_query,
        x_key,
    )
    return x_query, x_key


# ------------------------------------------------------------ all-reduce + norm composites
def all_reduce_rms_norm_supported(
    x: Tensor, weight: Tensor | None, epsilon: float, group_name: str
) -> bool:
    return supported_args(x, weight)


@_provides(ops.all_reduce_rms_norm, all_reduce_rms_norm_supported, batch_invariant=False)
def all_reduce_rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, group_name: str
) -> Tensor:
    out, _ = allreduce_norm(x, None, weight, epsilon, None, group_name)
    return out


def all_reduce_fused_add_rms_norm_supported(
    x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float, group_name: str
) -> bool:
    return supported_args(x, x_residual, weight) and x_residual.shape == x.shape


@_provides(
    ops.all_reduce_fused_add_rms_norm,
    all_reduce_fused_add_rms_norm_supported,
    batch_invariant=False,
)
def all_reduce_fused_add_rms_norm(
    x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float, group_name: str
) -> tuple[Tensor, Tensor]:
    out, residual_out = allreduce_norm(x, x_residual, weight, epsilon, None, group_name)
    assert residual_out is not None
    return out, residual_out


def all_reduce_rms_norm_static_quant_fp8_supported(
    x: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor, group_name: str
) -> bool:
    return supported_args(x, weight, scale)


@_provides(
    ops.all_reduce_rms_norm_static_quant_fp8,
    all_reduce_rms_norm_static_quant_fp8_supported,
    batch_invariant=False,
)
def all_reduce_rms_norm_static_quant_fp8(
    x: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor, group_name: str
) -> Tensor:
    q, _ = allreduce_norm(x, None, weight, epsilon, scale, group_name)
    return q


def all_reduce_fused_add_rms_norm_static_quant_fp8_supported(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    group_name: str,
) -> bool:
    return supported_args(x, x_residual, weight, scale) and x_residual.shape == x.shape


@_provides(
    ops.all_reduce_fused_add_rms_norm_static_quant_fp8,
    all_reduce_fused_add_rms_norm_static_quant_fp8_supported,
    batch_invariant=False,
)
def all_reduce_fused_add_rms_norm_static_quant_fp8(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale: Tensor,
    group_name: str,
) -> tuple[Tensor, Tensor]:
    q, residual_out = allreduce_norm(x, x_residual, weight, epsilon, scale, group_name)
    assert residual_out is not None
    return q, residual_out
