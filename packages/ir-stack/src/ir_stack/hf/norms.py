"""Which norms `convert_hf_model` replaces, and with what: a norm's form is found by running it
on a probe beside ``rms_norm``, so a module computing neither ``x / rms * w`` nor
``x / rms * (1 + w)`` (Gemma's) is left alone whatever its class is called."""

from typing import Any

import torch
from torch import Tensor, nn

from ir_spec import ops

from .modules import IRRMSNorm
from .probes import probe


def _norm_offset(module: nn.Module, eps: float) -> float | None:
    """0 where `module` computes ``x / rms * weight``, 1 where it computes
    ``x / rms * (1 + weight)`` (Gemma), None otherwise: run on a float32 probe beside both."""
    weight: Tensor = module.weight  # type: ignore[assignment]
    if weight.device.type == "meta":
        return None
    x = probe((4, weight.shape[-1]), weight.device)
    with torch.no_grad():
        got = module(x)
    return next((o for o in (0.0, 1.0) if _same_as_rms_norm(got, x, weight.float() + o, eps)), None)


def _same_as_rms_norm(got: Any, x: Tensor, weight: Tensor | None, eps: float) -> bool:
    """Whether a norm's output `got` on the float32 probe `x` is ``rms_norm(x, weight, eps)``."""
    want = ops.rms_norm.native(x, weight, eps)
    return (
        isinstance(got, Tensor)
        and got.shape == want.shape
        and torch.allclose(got.float(), want, rtol=1e-5, atol=1e-6)
    )


def _norm_epsilon(module: nn.Module) -> Any:
    """A norm's epsilon attribute, by either name transformers gives it, or None."""
    return getattr(module, "variance_epsilon", getattr(module, "eps", None))


def _weightless_norm_eps(module: nn.Module, device: torch.device) -> float | None:
    """The epsilon of a norm without a weight that computes ``x / rms`` (Llama 4's query and
    key norm), found by running it on a float32 probe beside the op's; else None."""
    eps = _norm_epsilon(module)
    if (
        not type(module).__name__.endswith("Norm")
        or not isinstance(eps, float)
        or next(module.parameters(), None) is not None
        or next(module.buffers(), None) is not None
        or device.type == "meta"
    ):
        return None
    x = probe((4, 48), device)
    try:
        with torch.no_grad():
            got = module(x)
    except Exception:  # a norm of another shape (groups, channels): not this form
        return None
    return eps if _same_as_rms_norm(got, x, None, eps) else None


def _is_rms_norm(module: nn.Module) -> bool:
    return type(module).__name__.endswith("RMSNorm") and isinstance(
        getattr(module, "weight", None), nn.Parameter
    )


def replacement_norm(module: nn.Module, device: torch.device) -> IRRMSNorm | str | None:
    """The `IRRMSNorm` computing what `module` computes, where it is an RMS norm: one without a
    weight computing ``x / rms`` (Llama 4's query and key norm), or an ``*RMSNorm`` with a
    weight computing ``x / rms * w`` or, Gemma's, ``x / rms * (1 + w)`` (its weight stays
    the module's ``Parameter``); why not, where it is an ``*RMSNorm`` of another form; None
    where it is no RMS norm. `device`: the model's, where the probes run."""
    if (eps := _weightless_norm_eps(module, device)) is not None:
        return IRRMSNorm(None, eps)
    if not _is_rms_norm(module):
        return None
    epsilon = _norm_epsilon(module)
    epsilon = 1e-6 if epsilon is None else float(epsilon)
    offset = _norm_offset(module, epsilon)
    if offset is None:
        return "computes neither x / rms * w nor x / rms * (1 + w)"
    weight: nn.Parameter = module.weight  # type: ignore[assignment]
    return IRRMSNorm(weight, epsilon, offset)
