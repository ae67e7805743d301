"""Gated activations: `silu_and_mul` and `gelu_and_mul`."""

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import checks
from ..errors import argument_error
from ..op import register_op
from ..sampling import SampleSpec

GELU_APPROXIMATIONS = ("none", "tanh")


@register_op
def silu_and_mul(x: Tensor) -> Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` with ``d = x.shape[-1] // 2``, in float32, one rounding."""
    d = x.shape[-1] // 2
    return (F.silu(x[..., :d].float()) * x[..., d:].float()).to(x.dtype)


def _gated_output(x: Tensor) -> Tensor:
    # elementwise over a half of x: empty_like infers the same dense layout as the native
    # computation, without running it (a cheap fake keeps tracing fast)
    return torch.empty_like(x[..., : x.shape[-1] // 2])


@silu_and_mul.register_fake
def _silu_and_mul_fake(x: Tensor) -> Tensor:
    return _gated_output(x)


@silu_and_mul.register_checker
def _check_silu_and_mul(x: Any) -> None:
    checks.activation("silu_and_mul", "x", x)
    checks.even_last_dim("silu_and_mul", "x", x)


def _gated_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    return (spec.randn(spec.generator(), 2 * spec.hidden_size),)


silu_and_mul.register_input_generator(_gated_inputs)


@register_op
def gelu_and_mul(x: Tensor, approximate: str = "none") -> Tensor:
    """``gelu(x[..., :d], approximate) * x[..., d:]``; `approximate` is ``"none"`` or ``"tanh"``."""
    d = x.shape[-1] // 2
    gate = F.gelu(x[..., :d].float(), approximate=approximate)
    return (gate * x[..., d:].float()).to(x.dtype)


@gelu_and_mul.register_fake
def _gelu_and_mul_fake(x: Tensor, approximate: str = "none") -> Tensor:
    return _gated_output(x)


@gelu_and_mul.register_checker
def _check_gelu_and_mul(x: Any, approximate: Any = "none") -> None:
    checks.activation("gelu_and_mul", "x", x)
    checks.even_last_dim("gelu_and_mul", "x", x)
    if approximate not in GELU_APPROXIMATIONS:
        raise argument_error("gelu_and_mul", "approximate", approximate, "'none' or 'tanh'")


@gelu_and_mul.register_input_generator
def _gelu_and_mul_inputs(spec: SampleSpec) -> tuple[Any, ...]:
    return (*_gated_inputs(spec), spec.options.get("approximate", "none"))
