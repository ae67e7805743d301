"""Test providers for the passes: in-place (two: one row after another, as a kernel writes) and
out-of-place fused_add_rms_norm, each an opaque torch custom op (as real kernels are), one that
allocates its outputs and passes them to an out-variant op (as the cuda provider does), marker
implementations of the fused rms_norm + static quant and fused_add_rms_norm + static quant
composites, and ``t_fused`` / ``t_store`` implementations of the rotary and KV-cache ops that
count their calls (`CALLS`), so a test sees the selected implementation run."""

from collections import Counter
from collections.abc import Iterator

import pytest
import torch
from torch import Tensor

import ir_dispatch
from ir_spec import ops
from ir_spec.testing import fused_add_rms_norm_inplace


@torch.library.custom_op("ir_passes_test::fadd_inplace", mutates_args=("x", "r"))
def _fadd_inplace(x: Tensor, r: Tensor, w: Tensor, eps: float) -> None:
    fused_add_rms_norm_inplace(x, r, w, eps)


@torch.library.custom_op("ir_passes_test::fadd_inplace_rows", mutates_args=("x", "r"))
def _fadd_inplace_rows(x: Tensor, r: Tensor, w: Tensor, eps: float) -> None:
    for i in range(x.shape[0]):  # reads the weight and the other rows as it writes
        r[i] += x[i]
        x[i] = ops.rms_norm.native(r[i], w, eps)


@torch.library.custom_op("ir_passes_test::fadd", mutates_args=())
def _fadd(x: Tensor, r: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    residual = x + r
    return ops.rms_norm.native(residual, w, eps), residual


@_fadd.register_fake
def _fadd_fake(x: Tensor, r: Tensor, w: Tensor, eps: float) -> tuple[Tensor, Tensor]:
    return torch.empty_like(x), torch.empty_like(x)


@torch.library.custom_op("ir_passes_test::rms_quant", mutates_args=())
def _rms_quant(x: Tensor, w: Tensor, eps: float, scale: Tensor) -> Tensor:
    return ops.rms_norm_static_quant_fp8.native(x, w, eps, scale)


@_rms_quant.register_fake
def _rms_quant_fake(x: Tensor, w: Tensor, eps: float, scale: Tensor) -> Tensor:
    return torch.empty_like(x, dtype=torch.float8_e4m3fn)


@torch.library.custom_op("ir_passes_test::fadd_quant", mutates_args=())
def _fadd_quant(
    x: Tensor, r: Tensor, w: Tensor, eps: float, scale: Tensor
) -> tuple[Tensor, Tensor]:
    return ops.fused_add_rms_norm_static_quant_fp8.native(x, r, w, eps, scale)


@_fadd_quant.register_fake
def _fadd_quant_fake(
    x: Tensor, r: Tensor, w: Tensor, eps: float, scale: Tensor
) -> tuple[Tensor, Tensor]:
    return torch.empty_like(x, dtype=torch.float8_e4m3fn), torch.empty_like(x)


def fadd_inplace(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    torch.ops.ir_passes_test.fadd_inplace(x, x_residual, weight, epsilon)
    return x, x_residual


def fadd_inplace_rows(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    torch.ops.ir_passes_test.fadd_inplace_rows(x, x_residual, weight, epsilon)
    return x, x_residual


def fadd(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    out: tuple[Tensor, Tensor] = torch.ops.ir_passes_test.fadd(x, x_residual, weight, epsilon)
    return out


def rms_quant(x: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor) -> Tensor:
    q: Tensor = torch.ops.ir_passes_test.rms_quant(x, weight, epsilon, scale)
    return q


def fadd_quant(
    x: Tensor, x_residual: Tensor, weight: Tensor | None, epsilon: float, scale: Tensor
) -> tuple[Tensor, Tensor]:
    out: tuple[Tensor, Tensor] = torch.ops.ir_passes_test.fadd_quant(
        x, x_residual, weight, epsilon, scale
    )
    return out


@torch.library.custom_op("ir_passes_test::fadd_out", mutates_args=("out", "residual_out"))
def _fadd_out(
    out: Tensor, residual_out: Tensor, x: Tensor, r: Tensor, w: Tensor, eps: float
) -> None:
    residual_out.copy_(x + r)
    out.copy_(ops.rms_norm.native(residual_out, w, eps))


def fadd_out(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    out, residual = torch.empty_like(x), torch.empty(x.shape, dtype=x.dtype, device=x.device)
    torch.ops.ir_passes_test.fadd_out(out, residual, x, x_residual, weight, epsilon)
    return out, residual


ops.fused_add_rms_norm.register_impl("t_inplace", inplace=True)(fadd_inplace)
ops.fused_add_rms_norm.register_impl("t_inplace_rows", inplace=True)(fadd_inplace_rows)
ops.fused_add_rms_norm.register_impl("t_out")(fadd_out)
ops.fused_add_rms_norm.register_impl("t_outofplace")(fadd)
ops.rms_norm_static_quant_fp8.register_impl("t_fused")(rms_quant)
ops.fused_add_rms_norm_static_quant_fp8.register_impl("t_fused")(fadd_quant)


#: op name -> calls of its counting test implementation
CALLS: Counter[str] = Counter()


def qk_fused(
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
    out: tuple[Tensor, Tensor] = ops.qk_norm_rotary_embedding.native(
        positions, x_query, x_key, q_weight, k_weight, epsilon, head_size, cos_sin_cache,
        is_neox_style,
    )  # fmt: skip
    return out


def rope_kv_fused(
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
    """Runs at call time inside the lowered op (a mutating op is not traced): counted."""
    CALLS["rotary_embedding_write_kv_cache"] += 1
    out: tuple[Tensor, Tensor] = ops.rotary_embedding_write_kv_cache.native(
        positions, x_query, x_key, value, head_size, cos_sin_cache, is_neox_style, key_cache,
        value_cache, slot_mapping,
    )  # fmt: skip
    return out


def store(
    key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, slot_mapping: Tensor
) -> None:
    CALLS["write_kv_cache"] += 1
    ops.write_kv_cache.native(key, value, key_cache, value_cache, slot_mapping)


ops.qk_norm_rotary_embedding.register_impl("t_fused")(qk_fused)
ops.rotary_embedding_write_kv_cache.register_impl("t_fused")(rope_kv_fused)
ops.write_kv_cache.register_impl("t_store")(store)


@pytest.fixture(autouse=True)
def clean_priority() -> Iterator[None]:
    ir_dispatch.set_priority()
    torch._dynamo.reset()
    CALLS.clear()
    yield
    ir_dispatch.set_priority()


@pytest.fixture
def inplace() -> None:
    ir_dispatch.set_priority(fused_add_rms_norm=["t_inplace"])


@pytest.fixture
def calls() -> Counter[str]:
    """Calls of the counting test implementations in this test, by op name."""
    return CALLS
