"""``maybe_inplace`` with the ``triton_inplace`` kernels selected and activations that alias:
refused with a `ValueError` naming both arguments where they overlap each other or another
tensor argument, computed right where an activation is a stride-0 expand, in place where views
of one buffer are disjoint (rows of one buffer; query and key columns of one projection)."""

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import Tensor

import ir_kernels_triton  # noqa: F401  (registers the provider)
import ir_spec
from ir_spec import Impl, IrOp, ops
from ir_spec.catalog.rotary import make_cos_sin_cache
from ir_spec.testing import assert_close

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FADD = ops.fused_add_rms_norm
ROTARY = ops.rotary_embedding
EPS = 1e-6


class InplaceKernels(ir_spec.NativeDispatcher):
    """Selects ``triton_inplace`` wherever it accepts the arguments, else native."""

    def select(self, op: IrOp, args: tuple[Any, ...]) -> Impl:
        impl = op.impls.get("triton_inplace")
        if impl is not None and impl.supported and impl.accepts(args):
            return impl
        return op.native_impl


@pytest.fixture(autouse=True)
def inplace_kernels() -> Iterator[None]:
    if not FADD.impls["triton_inplace"].supported:
        pytest.skip(FADD.impls["triton_inplace"].unsupported_reason)
    previous = ir_spec.set_dispatcher(InplaceKernels())
    yield
    ir_spec.set_dispatcher(previous)


def randn(*shape: int) -> Tensor:
    return torch.randn(*shape, device=DEVICE)


def expected_fadd(x: Tensor, r: Tensor, w: Tensor) -> Any:
    return FADD.native(x.clone(), r.clone(), w.clone(), EPS)


def test_inplace_fused_add_refuses_the_same_tensor_twice() -> None:
    x, w = randn(4, 64), randn(64)
    before = x.clone()
    with pytest.raises(ValueError, match=r"'x' and 'x_residual' overlap.*the same tensor"):
        FADD.maybe_inplace(x, x, w, EPS)
    assert torch.equal(x, before)


@pytest.mark.parametrize(
    "views",
    [
        lambda base: (base[:4], base[2:6]),  # rows
        lambda base: (base[:4, :64], base[:4, 32:96]),  # columns
    ],
    ids=["rows", "columns"],
)
def test_inplace_fused_add_refuses_overlapping_views(views: Any) -> None:
    x, r = views(randn(8, 128))
    w = randn(x.shape[-1])
    with pytest.raises(ValueError, match=r"'x' and 'x_residual' overlap"):
        FADD.maybe_inplace(x, r, w, EPS)


def test_inplace_fused_add_refuses_a_weight_inside_the_rows() -> None:
    base, r = randn(5, 64), randn(4, 64)
    with pytest.raises(ValueError, match=r"'x' and 'weight' overlap"):
        FADD.maybe_inplace(base[:4], r, base[3], EPS)


@pytest.mark.parametrize(
    "views",
    [lambda base: (base[:4, :64], base[4:, :64]), lambda base: (base[:, :64], base[:, 64:])],
    ids=["rows", "columns"],
)
def test_inplace_fused_add_writes_disjoint_views_in_place(views: Any) -> None:
    base, w = randn(8, 128), randn(64)
    x, r = views(base)
    assert ir_spec.get_dispatcher().select(FADD, (x, r, w, EPS, None)).provider == (
        "triton_inplace"
    )
    expected = expected_fadd(x, r, w)
    out, residual = FADD.maybe_inplace(x, r, w, EPS)
    assert out.data_ptr() == x.data_ptr()
    assert residual.data_ptr() == r.data_ptr()
    assert_close(FADD, (out, residual), expected)


def test_inplace_fused_add_gives_an_expanded_residual_a_copy() -> None:
    x, row, w = randn(4, 64), randn(1, 64), randn(64)
    r = row.expand(4, 64)
    before = row.clone()
    expected = expected_fadd(x, r, w)
    assert_close(FADD, FADD.maybe_inplace(x, r, w, EPS), expected)
    assert torch.equal(row, before)


def rotary_args(tokens: int = 5) -> tuple[Tensor, Tensor]:
    return torch.randint(0, 64, (tokens,), device=DEVICE), make_cos_sin_cache(64, 32).to(DEVICE)


def test_inplace_rotary_refuses_query_as_key() -> None:
    positions, cache = rotary_args()
    q = randn(5, 128)
    with pytest.raises(ValueError, match=r"'x_query' and 'x_key' overlap"):
        ROTARY.maybe_inplace(positions, q, q, 32, cache, True)


def test_inplace_rotary_refuses_overlapping_columns() -> None:
    positions, cache = rotary_args()
    qkv = randn(5, 192)
    with pytest.raises(ValueError, match=r"'x_query' and 'x_key' overlap"):
        ROTARY.maybe_inplace(positions, qkv[:, :128], qkv[:, 96:160], 32, cache, True)


def test_inplace_rotary_rotates_one_projections_columns_in_place() -> None:
    positions, cache = rotary_args()
    qkv = randn(5, 128 + 64 + 64)
    q, k, v = qkv.split([128, 64, 64], dim=-1)
    v_before = v.clone()
    expected = ROTARY.native(positions, q.clone(), k.clone(), 32, cache, True)
    query, key = ROTARY.maybe_inplace(positions, q, k, 32, cache, True)
    assert query.data_ptr() == q.data_ptr()
    assert key.data_ptr() == k.data_ptr()
    assert_close(ROTARY, (query, key), expected)
    assert torch.equal(v, v_before)  # the columns between and after are left alone
