"""RMS normalization: `rms_norm` and `fused_add_rms_norm`."""

from typing import Any

import torch
from torch import Tensor

from .. import checks
from ..dispatch_key import tensor_summary
from ..op import register_op
from ..sampling import SampleSpec


@register_op
def rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    """Root-mean-square normalization over the last dimension, optionally weighted.

    ``out = x / sqrt(mean(x[..., :variance_size] ** 2) + epsilon) * weight``, computed in float32
    and rounded once to ``x.dtype``. ``weight=None`` means a weight of ones; a weight is of
    ``x.dtype`` or float32 (exact where half precision would round it, as Gemma's ``1 + w``).
    """
    xf = x.float()
    x_var = xf if variance_size is None else xf[..., :variance_size]
    inv_rms = torch.rsqrt(x_var.pow(2).mean(dim=-1, keepdim=True) + epsilon)
    out = xf * inv_rms
    if weight is not None:
        out = out * weight.float()
    return out.to(x.dtype)


@rms_norm.register_fake
def _rms_norm_fake(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    # elementwise from x: x's layout where x is dense, row-major otherwise (as empty_like does)
    return torch.empty_like(x)


@rms_norm.register_checker
def _check_rms_norm(x: Any, weight: Any, epsilon: Any, variance_size: Any = None) -> None:
    checks.activation("rms_norm", "x", x)
    checks.norm_weight("rms_norm", weight, x)
    checks.epsilon("rms_norm", epsilon)
    checks.variance_size("rms_norm", variance_size, x)


@rms_norm.register_input_generator
def _rms_norm_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    gen = spec.generator()
    x = spec.randn(gen, spec.hidden_size)
    weight = spec.weight(gen, spec.hidden_size) if spec.options.get("weight", True) else None
    return (x, weight, spec.options.get("epsilon", 1e-6), spec.options.get("variance_size"))


@register_op(allow_inplace=True)
def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Residual add then RMS normalization: returns ``(rms_norm(x + x_residual), x + x_residual)``.

    The sum is rounded to ``x.dtype`` first, and the normalization reads the rounded sum, so
    ``out == rms_norm(residual_out)`` exactly.
    """
    residual_out = x + x_residual
    return rms_norm.native(residual_out, weight, epsilon, variance_size), residual_out


@fused_add_rms_norm.register_checker
def _check_fused_add_rms_norm(
    x: Any, x_residual: Any, weight: Any, epsilon: Any, variance_size: Any = None
) -> None:
    checks.activation("fused_add_rms_norm", "x", x)
    checks.like("fused_add_rms_norm", "x_residual", x_residual, x, "x")
    checks.norm_weight("fused_add_rms_norm", weight, x)
    checks.epsilon("fused_add_rms_norm", epsilon)
    checks.variance_size("fused_add_rms_norm", variance_size, x)


@fused_add_rms_norm.register_dispatch_key
def _fused_add_rms_norm_key(
    x: Any, x_residual: Any, weight: Any, epsilon: Any, variance_size: Any = None
) -> tuple[Any, ...]:
    # The check compares the whole shapes of x and x_residual; record whether they agree.
    return (
        tensor_summary(x),
        tensor_summary(x_residual),
        x.shape == x_residual.shape,
        None if weight is None else tensor_summary(weight),
        epsilon,
        variance_size,
    )


@fused_add_rms_norm.register_input_generator
def _fused_add_rms_norm_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    gen = spec.generator()
    x = spec.randn(gen, spec.hidden_size)
    residual = spec.randn(gen, spec.hidden_size)
    weight = spec.weight(gen, spec.hidden_size) if spec.options.get("weight", True) else None
    return (
        x,
        residual,
        weight,
        spec.options.get("epsilon", 1e-6),
        spec.options.get("variance_size"),
    )
