"""Provider ``cuda`` (and ``cuda_inplace`` for ``fused_add_rms_norm``): hand-written CUDA
kernels for ``rms_norm``, ``fused_add_rms_norm``, ``silu_and_mul`` and ``gelu_and_mul``.

Importing this module (the ``ir.providers`` entry point) builds the kernels on first use; where
that cannot happen (no GPU, no toolkit, a failed build) the implementations are registered with
``supported=False`` and the reason, which ``ir_dispatch.explain`` shows. Every kernel is
row-wise with a launch that depends on the row width only, so all are batch-invariant.
`supports_args` accepts float32/float16/bfloat16 CUDA tensors whose rows a kernel can address
(`ir_spec.row_view`), and contiguous weights.
"""

import logging

import torch
from torch import Tensor

from ir_spec import ops, row_view

from .build import BuildUnavailable, build

logger = logging.getLogger("ir_kernels_cuda")
PROVIDER = "cuda"
INPLACE_PROVIDER = "cuda_inplace"
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _availability() -> tuple[bool, str]:
    try:
        build()
    except BuildUnavailable as exc:
        return False, str(exc)
    except Exception as exc:  # a failed build must not break importing the provider
        logger.error("ir_kernels_cuda: building the kernels failed: %s", exc)
        return False, f"the build failed: {type(exc).__name__}: {str(exc)[:300]}"
    return True, ""


SUPPORTED, REASON = _availability()


def _rowwise(*tensors: Tensor) -> bool:
    return all(t.is_cuda and t.dtype in _DTYPES and row_view(t) is not None for t in tensors)


def _weight_ok(weight: Tensor | None) -> bool:
    return weight is None or weight.is_contiguous()


def _as_rows(t: Tensor) -> Tensor:
    view = row_view(t)
    assert view is not None  # supports_args checked it
    return view


# ---------------------------------------------------------------------------- rms_norm
def rms_norm_supported(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> bool:
    return _rowwise(x) and _weight_ok(weight)


@ops.rms_norm.register_impl(
    PROVIDER,
    supported=SUPPORTED,
    supports_args=rms_norm_supported,
    batch_invariant=True,
    unsupported_reason=REASON,
)
def rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    torch.ops.ir_cuda.rms_norm_out(_as_rows(out), _as_rows(x), weight, epsilon, variance_size)
    return out


# ------------------------------------------------------------------ fused_add_rms_norm
def fused_add_rms_norm_supported(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    return _rowwise(x, x_residual) and _weight_ok(weight)


@ops.fused_add_rms_norm.register_impl(
    PROVIDER,
    supported=SUPPORTED,
    supports_args=fused_add_rms_norm_supported,
    batch_invariant=True,
    unsupported_reason=REASON,
)
def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    residual_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    torch.ops.ir_cuda.fused_add_rms_norm_out(
        _as_rows(out),
        _as_rows(residual_out),
        _as_rows(x),
        _as_rows(x_residual),
        weight,
        epsilon,
        variance_size,
    )
    return out, residual_out


@ops.fused_add_rms_norm.register_impl(
    INPLACE_PROVIDER,
    supported=SUPPORTED,
    supports_args=fused_add_rms_norm_supported,
    inplace=True,
    batch_invariant=True,
    unsupported_reason=REASON,
)
def fused_add_rms_norm_inplace(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    torch.ops.ir_cuda.fused_add_rms_norm_(
        _as_rows(x), _as_rows(x_residual), weight, epsilon, variance_size
    )
    return x, x_residual


# ---------------------------------------------------------------- gated activations
def _gated_supported(x: Tensor) -> bool:
    return _rowwise(x) and x.shape[-1] % 2 == 0


def silu_and_mul_supported(x: Tensor) -> bool:
    return _gated_supported(x)


def gelu_and_mul_supported(x: Tensor, approximate: str = "none") -> bool:
    return _gated_supported(x)


def _gated_output(x: Tensor) -> Tensor:
    return torch.empty((*x.shape[:-1], x.shape[-1] // 2), dtype=x.dtype, device=x.device)


@ops.silu_and_mul.register_impl(
    PROVIDER,
    supported=SUPPORTED,
    supports_args=silu_and_mul_supported,
    batch_invariant=True,
    unsupported_reason=REASON,
)
def silu_and_mul(x: Tensor) -> Tensor:
    out = _gated_output(x)
    torch.ops.ir_cuda.silu_and_mul_out(_as_rows(out), _as_rows(x))
    return out


@ops.gelu_and_mul.register_impl(
    PROVIDER,
    supported=SUPPORTED,
    supports_args=gelu_and_mul_supported,
    batch_invariant=True,
    unsupported_reason=REASON,
)
def gelu_and_mul(x: Tensor, approximate: str = "none") -> Tensor:
    out = _gated_output(x)
    torch.ops.ir_cuda.gelu_and_mul_out(_as_rows(out), _as_rows(x), int(approximate == "tanh"))
    return out


def _register_fakes() -> None:
    """The ops write into their arguments and return nothing: their fakes do nothing."""
    for name in (
        "rms_norm_out",
        "fused_add_rms_norm_out",
        "fused_add_rms_norm_",
        "silu_and_mul_out",
        "gelu_and_mul_out",
    ):
        torch.library.register_fake(f"ir_cuda::{name}")(lambda *args: None)


if SUPPORTED:
    _register_fakes()
