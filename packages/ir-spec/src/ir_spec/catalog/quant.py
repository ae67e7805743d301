"""FP8 (e4m3) quantization: static per-tensor, dynamic per-token and per-token-group."""

from typing import Any

import torch
from torch import Tensor

from .. import checks
from ..errors import argument_error
from ..op import register_op
from ..sampling import SampleSpec

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448
#: Smallest scale a dynamic quantizer uses, so an all-zero row does not divide by zero.
MIN_SCALE = 1.0 / (FP8_MAX * 512.0)


def saturate_fp8(values: Tensor) -> Tensor:
    """Clamp float32 values to the e4m3 range and convert (round to nearest even)."""
    return values.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


@register_op
def static_quant_fp8(x: Tensor, scale: Tensor) -> Tensor:
    """``saturate(x / scale)`` in ``float8_e4m3fn``; `scale` is a one-element float32 tensor."""
    return saturate_fp8(x.float() / scale.reshape(()))


@static_quant_fp8.register_checker
def _check_static_quant_fp8(x: Any, scale: Any) -> None:
    checks.activation("static_quant_fp8", "x", x)
    checks.scalar_scale("static_quant_fp8", "scale", scale, x)


def sample_scale(x: Tensor, headroom: float = 0.8) -> Tensor:
    """A per-tensor scale that saturates the largest values a little (exercises the clamp)."""
    flat = x.detach().abs().float().reshape(-1)
    amax = (flat.max() if flat.numel() else flat.new_ones(())).clamp(min=1e-3)
    return (amax * headroom / FP8_MAX).reshape(1).to(device=x.device)


@static_quant_fp8.register_input_generator
def _static_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    x = spec.randn(spec.generator(), spec.hidden_size)
    return (x, sample_scale(x))


@register_op
def dynamic_quant_fp8(x: Tensor, scale_ub: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Per-token dynamic quantization: returns ``(q, scale)``, scale of shape ``[..., 1]``, fp32.

    ``scale = max(min(absmax, scale_ub) / 448, 1 / (448 * 512))`` per row and
    ``q = saturate(x / scale)``. A NaN in a row makes its scale and its outputs NaN.
    """
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)
    if scale_ub is not None:
        amax = torch.minimum(amax, scale_ub.reshape(()))
    scale = torch.clamp(amax / FP8_MAX, min=MIN_SCALE)
    return saturate_fp8(xf / scale), scale


@dynamic_quant_fp8.register_checker
def _check_dynamic_quant_fp8(x: Any, scale_ub: Any = None) -> None:
    checks.activation("dynamic_quant_fp8", "x", x)
    checks.optional_scalar_scale("dynamic_quant_fp8", "scale_ub", scale_ub, x)


def sample_scale_ub(spec: SampleSpec) -> Tensor | None:
    """The dynamic quantizers' ``scale_ub`` for `spec`: 2.0 (below the sample rows' peaks, so
    the bound takes effect) where the ``scale_ub`` option is set, else None."""
    if not spec.options.get("scale_ub", False):
        return None
    return torch.tensor([2.0], device=spec.device)


@dynamic_quant_fp8.register_input_generator
def _dynamic_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    x = spec.randn(spec.generator(), spec.hidden_size)
    return (x, sample_scale_ub(spec))


@register_op
def group_quant_fp8(
    x: Tensor, group_size: int = 128, column_major_scales: bool = False
) -> tuple[Tensor, Tensor]:
    """Per-token-group quantization: each row splits into groups of `group_size` elements.

    Returns ``(q, scale)`` with scale of shape ``[..., hidden / group_size]`` in float32,
    ``scale = max(group absmax / 448, 1 / (448 * 512))``; a NaN in a group makes its scale and
    its outputs NaN. With `column_major_scales` the scale is stored with the group dimension
    outermost (for 2-D input: strides ``(1, tokens)``).
    """
    hidden = x.shape[-1]
    lead = x.shape[:-1]
    groups = hidden // group_size
    xg = x.float().reshape(*lead, groups, group_size)
    amax = xg.abs().amax(dim=-1)
    scale = torch.clamp(amax / FP8_MAX, min=MIN_SCALE)
    q = saturate_fp8(xg / scale.unsqueeze(-1)).reshape(x.shape)
    if column_major_scales:
        scale = empty_group_scales(x, groups, column_major=True).copy_(scale)
    return q, scale


def empty_group_scales(x: Tensor, groups: int, *, column_major: bool) -> Tensor:
    """Float32 scales of shape ``[*x.shape[:-1], groups]`` on `x`'s device; `column_major`:
    the group dimension outermost in memory (`group_quant_fp8`'s ``column_major_scales``)."""
    lead = x.shape[:-1]
    if column_major:
        return torch.empty((groups, *lead), dtype=torch.float32, device=x.device).movedim(0, -1)
    return torch.empty((*lead, groups), dtype=torch.float32, device=x.device)


@group_quant_fp8.register_checker
def _check_group_quant_fp8(x: Any, group_size: Any = 128, column_major_scales: Any = False) -> None:
    checks.activation("group_quant_fp8", "x", x)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size <= 0:
        raise argument_error("group_quant_fp8", "group_size", group_size, "a positive int")
    if x.shape[-1] % group_size != 0:
        raise argument_error(
            "group_quant_fp8", "x", x, f"a last dimension divisible by group_size={group_size}"
        )
    if not isinstance(column_major_scales, bool):
        raise argument_error(
            "group_quant_fp8", "column_major_scales", column_major_scales, "a bool"
        )


def group_size_for(hidden: int) -> int:
    """The largest of 128, 64, ..., 8 dividing `hidden`, else `hidden` itself (one group)."""
    return next((g for g in (128, 64, 32, 16, 8) if hidden % g == 0), hidden)


@group_quant_fp8.register_input_generator
def _group_quant_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    x = spec.randn(spec.generator(), spec.hidden_size)
    group_size = spec.options.get("group_size", group_size_for(spec.hidden_size))
    return (x, group_size, spec.options.get("column_major_scales", False))
