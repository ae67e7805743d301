"""Fused composites: a norm or activation followed by fp8 quantization.

Each native function is exactly the composition of the catalog ops it fuses, so a fused
kernel is tested against the same numbers the unfused graph produces.
"""

from typing import Any

from torch import Tensor

from .. import checks
from ..dispatch_key import tensor_summary
from ..op import register_op
from ..sampling import SampleSpec
from .activation import _check_silu_and_mul, silu_and_mul
from .norm import (
    _check_fused_add_rms_norm,
    _check_rms_norm,
    _fused_add_rms_norm_inputs,
    _rms_norm_inputs,
    fused_add_rms_norm,
    rms_norm,
)
from .quant import dynamic_quant_fp8, sample_scale, sample_scale_ub, static_quant_fp8


@register_op
def rms_norm_static_quant_fp8(
    x: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor
) -> Tensor:
    """``static_quant_fp8(rms_norm(x, weight, epsilon), scale)``."""
    q: Tensor = static_quant_fp8.native(rms_norm.native(x, weight, epsilon), scale)
    return q


@rms_norm_static_quant_fp8.register_checker
def _check_rms_norm_static_quant_fp8(x: Any, weight: Any, epsilon: Any, scale: Any) -> None:
    _check_rms_norm(x, weight, epsilon)
    checks.scalar_scale("rms_norm_static_quant_fp8", "scale", scale, x)


@rms_norm_static_quant_fp8.register_input_generator
def _rms_norm_static_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    x, weight, eps, _ = _rms_norm_inputs(spec)
    return (x, weight, eps, sample_scale(rms_norm.native(x, weight, eps)))


@register_op
def fused_add_rms_norm_static_quant_fp8(
    x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor
) -> tuple[Tensor, Tensor]:
    """``(static_quant_fp8(out, scale), residual_out)`` of ``fused_add_rms_norm``."""
    out, residual_out = fused_add_rms_norm.native(x, x_residual, weight, epsilon)
    return static_quant_fp8.native(out, scale), residual_out


@fused_add_rms_norm_static_quant_fp8.register_checker
def _check_fused_add_rms_norm_static_quant_fp8(
    x: Any, x_residual: Any, weight: Any, epsilon: Any, scale: Any
) -> None:
    _check_fused_add_rms_norm(x, x_residual, weight, epsilon)
    checks.scalar_scale("fused_add_rms_norm_static_quant_fp8", "scale", scale, x)


@fused_add_rms_norm_static_quant_fp8.register_dispatch_key
def _fused_add_rms_norm_static_quant_fp8_key(
    x: Any, x_residual: Any, weight: Any, epsilon: Any, scale: Any
) -> tuple[Any, ...]:
    return (
        tensor_summary(x),
        tensor_summary(x_residual),
        x.shape == x_residual.shape,
        None if weight is None else tensor_summary(weight),
        epsilon,
        tensor_summary(scale),
    )


@fused_add_rms_norm_static_quant_fp8.register_input_generator
def _fused_add_rms_norm_static_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    x, residual, weight, eps, _ = _fused_add_rms_norm_inputs(spec)
    return (x, residual, weight, eps, sample_scale(rms_norm.native(x + residual, weight, eps)))


@register_op
def rms_norm_dynamic_quant_fp8(
    x: Tensor, weight: Tensor | None, epsilon: float, scale_ub: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """``dynamic_quant_fp8(rms_norm(x, weight, epsilon), scale_ub)``."""
    q_and_scale: tuple[Tensor, Tensor] = dynamic_quant_fp8.native(
        rms_norm.native(x, weight, epsilon), scale_ub
    )
    return q_and_scale


@rms_norm_dynamic_quant_fp8.register_checker
def _check_rms_norm_dynamic_quant_fp8(
    x: Any, weight: Any, epsilon: Any, scale_ub: Any = None
) -> None:
    _check_rms_norm(x, weight, epsilon)
    checks.optional_scalar_scale("rms_norm_dynamic_quant_fp8", "scale_ub", scale_ub, x)


@rms_norm_dynamic_quant_fp8.register_input_generator
def _rms_norm_dynamic_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    x, weight, eps, _ = _rms_norm_inputs(spec)
    return (x, weight, eps, sample_scale_ub(spec))


@register_op
def silu_and_mul_static_quant_fp8(x: Tensor, scale: Tensor) -> Tensor:
    """``static_quant_fp8(silu_and_mul(x), scale)``."""
    q: Tensor = static_quant_fp8.native(silu_and_mul.native(x), scale)
    return q


@silu_and_mul_static_quant_fp8.register_checker
def _check_silu_and_mul_static_quant_fp8(x: Any, scale: Any) -> None:
    _check_silu_and_mul(x)
    checks.scalar_scale("silu_and_mul_static_quant_fp8", "scale", scale, x)


@silu_and_mul_static_quant_fp8.register_input_generator
def _silu_and_mul_static_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    x = spec.randn(spec.generator(), 2 * spec.hidden_size)
    return (x, sample_scale(silu_and_mul.native(x)))
