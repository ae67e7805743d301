"""Fused composites: a norm or activation followed by fp8 quantization (static per tensor,
dynamic per token, or per token group).

Each native function is exactly the composition of the catalog ops it fuses, so a fused
kernel is tested against the same numbers the unfused graph produces.
"""

from typing import Any

import torch
from torch import Tensor

from .. import checks
from ..dispatch_key import tensor_summary
from ..errors import argument_error
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
from .quant import (
    dynamic_quant_fp8,
    group_quant_fp8,
    group_size_for,
    sample_scale,
    sample_scale_ub,
    static_quant_fp8,
)


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


@register_op
def fused_add_rms_norm_dynamic_quant_fp8(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    scale_ub: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(q, scale, residual_out)``: ``dynamic_quant_fp8`` of ``fused_add_rms_norm``'s output,
    and its residual."""
    out, residual_out = fused_add_rms_norm.native(x, x_residual, weight, epsilon)
    q, scale = dynamic_quant_fp8.native(out, scale_ub)
    return q, scale, residual_out


@fused_add_rms_norm_dynamic_quant_fp8.register_checker
def _check_fused_add_rms_norm_dynamic_quant_fp8(
    x: Any, x_residual: Any, weight: Any, epsilon: Any, scale_ub: Any = None
) -> None:
    _check_fused_add_rms_norm(x, x_residual, weight, epsilon)
    checks.optional_scalar_scale("fused_add_rms_norm_dynamic_quant_fp8", "scale_ub", scale_ub, x)


@fused_add_rms_norm_dynamic_quant_fp8.register_dispatch_key
def _fused_add_rms_norm_dynamic_quant_fp8_key(
    x: Any, x_residual: Any, weight: Any, epsilon: Any, scale_ub: Any = None
) -> tuple[Any, ...]:
    return (
        tensor_summary(x),
        tensor_summary(x_residual),
        x.shape == x_residual.shape,
        None if weight is None else tensor_summary(weight),
        epsilon,
        None if scale_ub is None else tensor_summary(scale_ub),
    )


@fused_add_rms_norm_dynamic_quant_fp8.register_input_generator
def _fused_add_rms_norm_dynamic_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    x, residual, weight, eps, _ = _fused_add_rms_norm_inputs(spec)
    return (x, residual, weight, eps, sample_scale_ub(spec))


def _check_group(op: str, x: Any, group_size: Any, column_major_scales: Any) -> None:
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise argument_error(op, "group_size", group_size, "a positive int")
    if x.shape[-1] % group_size != 0:
        raise argument_error(op, "x", x, f"a last dimension divisible by group_size={group_size}")
    if not isinstance(column_major_scales, bool):
        raise argument_error(op, "column_major_scales", column_major_scales, "a bool")


def _sample_group(spec: SampleSpec, width: int) -> tuple[int, bool]:
    group_size = spec.options.get("group_size", group_size_for(width))
    return group_size, spec.options.get("column_major_scales", False)


@register_op
def rms_norm_group_quant_fp8(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_size: int = 128,
    column_major_scales: bool = False,
) -> tuple[Tensor, Tensor]:
    """``group_quant_fp8(rms_norm(x, weight, epsilon), group_size, column_major_scales)``: the
    per-token-group fp8 input of a block-quantized linear layer."""
    q_and_scale: tuple[Tensor, Tensor] = group_quant_fp8.native(
        rms_norm.native(x, weight, epsilon), group_size, column_major_scales
    )
    return q_and_scale


@rms_norm_group_quant_fp8.register_checker
def _check_rms_norm_group_quant_fp8(
    x: Any, weight: Any, epsilon: Any, group_size: Any = 128, column_major_scales: Any = False
) -> None:
    _check_rms_norm(x, weight, epsilon)
    _check_group("rms_norm_group_quant_fp8", x, group_size, column_major_scales)


@rms_norm_group_quant_fp8.register_input_generator
def _rms_norm_group_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    x, weight, eps, _ = _rms_norm_inputs(spec)
    return (x, weight, eps, *_sample_group(spec, spec.hidden_size))


@register_op
def fused_add_rms_norm_group_quant_fp8(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    group_size: int = 128,
    column_major_scales: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(q, scale, residual_out)``: ``group_quant_fp8`` of ``fused_add_rms_norm``'s output,
    and its residual."""
    out, residual_out = fused_add_rms_norm.native(x, x_residual, weight, epsilon)
    q, scale = group_quant_fp8.native(out, group_size, column_major_scales)
    return q, scale, residual_out


@fused_add_rms_norm_group_quant_fp8.register_checker
def _check_fused_add_rms_norm_group_quant_fp8(
    x: Any,
    x_residual: Any,
    weight: Any,
    epsilon: Any,
    group_size: Any = 128,
    column_major_scales: Any = False,
) -> None:
    _check_fused_add_rms_norm(x, x_residual, weight, epsilon)
    _check_group("fused_add_rms_norm_group_quant_fp8", x, group_size, column_major_scales)


@fused_add_rms_norm_group_quant_fp8.register_dispatch_key
def _fused_add_rms_norm_group_quant_fp8_key(
    x: Any,
    x_residual: Any,
    weight: Any,
    epsilon: Any,
    group_size: Any = 128,
    column_major_scales: Any = False,
) -> tuple[Any, ...]:
    return (
        tensor_summary(x),
        tensor_summary(x_residual),
        x.shape == x_residual.shape,
        None if weight is None else tensor_summary(weight),
        epsilon,
        group_size,
        column_major_scales,
    )


@fused_add_rms_norm_group_quant_fp8.register_input_generator
def _fused_add_rms_norm_group_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    x, residual, weight, eps, _ = _fused_add_rms_norm_inputs(spec)
    return (x, residual, weight, eps, *_sample_group(spec, spec.hidden_size))


@register_op
def silu_and_mul_group_quant_fp8(
    x: Tensor, group_size: int = 128, column_major_scales: bool = False
) -> tuple[Tensor, Tensor]:
    """``group_quant_fp8(silu_and_mul(x), group_size, column_major_scales)``."""
    q_and_scale: tuple[Tensor, Tensor] = group_quant_fp8.native(
        silu_and_mul.native(x), group_size, column_major_scales
    )
    return q_and_scale


@silu_and_mul_group_quant_fp8.register_checker
def _check_silu_and_mul_group_quant_fp8(
    x: Any, group_size: Any = 128, column_major_scales: Any = False
) -> None:
    _check_silu_and_mul(x)
    op = "silu_and_mul_group_quant_fp8"
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise argument_error(op, "group_size", group_size, "a positive int")
    if (x.shape[-1] // 2) % group_size != 0:
        raise argument_error(
            op, "x", x, f"a last dimension 2 * d with d divisible by group_size={group_size}"
        )
    if not isinstance(column_major_scales, bool):
        raise argument_error(op, "column_major_scales", column_major_scales, "a bool")


@silu_and_mul_group_quant_fp8.register_input_generator
def _silu_and_mul_group_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    x = spec.randn(spec.generator(), 2 * spec.hidden_size)
    return (x, *_sample_group(spec, spec.hidden_size))


# The scales come from the peak of rows that the native composition rounds to the input dtype
# first; a kernel that keeps them in float32 may give a scale one unit of the input dtype's
# last place apart (bfloat16's, the coarsest: 2**-7 relative), so float32 results of these
# ops compare at that relative tolerance.
for _op in (
    rms_norm_dynamic_quant_fp8,
    fused_add_rms_norm_dynamic_quant_fp8,
    rms_norm_group_quant_fp8,
    fused_add_rms_norm_group_quant_fp8,
    silu_and_mul_group_quant_fp8,
):
    _op.set_tolerance(torch.float32, atol=1e-5, rtol=2.0**-7)
