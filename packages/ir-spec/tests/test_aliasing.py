"""`maybe_inplace` with an in-place implementation selected and activations that alias: each
other, another tensor argument, or themselves (stride-0 rows). Overlap is refused with a
`ValueError` naming the op and both arguments; a self-overlapping activation is computed out of
place; disjoint views of one buffer are written in place."""

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from ir_spec import ops
from ir_spec.catalog.rotary import make_cos_sin_cache
from ir_spec.testing import (
    assert_close,
    fused_add_rms_norm_inplace,
    rotary_embedding_inplace,
)

FADD = ops.fused_add_rms_norm
ROTARY = ops.rotary_embedding
EPS = 1e-6


def fadd_by_rows(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """In place one row after another, reading the weight for each row, as a kernel does."""
    for i in range(x.shape[0]):
        x_residual[i] += x[i]
        x[i] = ops.rms_norm.native(x_residual[i], weight, epsilon, variance_size)
    return x, x_residual


PROVIDERS: dict[str, Callable[..., Any]] = {
    "t_alias_whole": fused_add_rms_norm_inplace,
    "t_alias_rows": fadd_by_rows,
}


@pytest.fixture(params=sorted(PROVIDERS))
def fadd_inplace(
    request: pytest.FixtureRequest,
    prefer: Callable[[str], None],
    temporary_impls: list[Any],
) -> str:
    """A plain-PyTorch in-place fused_add_rms_norm, selected."""
    provider: str = request.param
    FADD.register_impl(provider, inplace=True)(PROVIDERS[provider])
    temporary_impls.append((FADD, provider))
    prefer(provider)
    return provider


@pytest.fixture
def rotary_inplace(prefer: Callable[[str], None], temporary_impls: list[Any]) -> str:
    ROTARY.register_impl("t_alias_rotary", inplace=True)(rotary_embedding_inplace)
    temporary_impls.append((ROTARY, "t_alias_rotary"))
    prefer("t_alias_rotary")
    return "t_alias_rotary"


def expected_fadd(x: Tensor, r: Tensor, w: Tensor | None) -> Any:
    return FADD.native(x.clone(), r.clone(), None if w is None else w.clone(), EPS)


# ------------------------------------------------------------------- fused_add_rms_norm
@pytest.mark.usefixtures("fadd_inplace")
class TestFusedAddRmsNorm:
    def test_same_tensor_twice_is_refused(self) -> None:
        x, w = torch.randn(4, 32), torch.randn(32)
        before = x.clone()
        with pytest.raises(ValueError, match=r"fused_add_rms_norm.maybe_inplace.*'x'.*'x_resid"):
            FADD.maybe_inplace(x, x, w, EPS)
        assert torch.equal(x, before)  # refused before anything was written

    def test_overlapping_views_are_refused(self) -> None:
        base, w = torch.randn(8, 32), torch.randn(32)
        with pytest.raises(ValueError, match=r"'x' and 'x_residual'.*overlap"):
            FADD.maybe_inplace(base[:4], base[2:6], w, EPS)

    def test_overlapping_column_views_are_refused(self) -> None:
        base, w = torch.randn(4, 48), torch.randn(32)
        with pytest.raises(ValueError, match=r"'x' and 'x_residual'"):
            FADD.maybe_inplace(base[:, :32], base[:, 16:], w, EPS)

    def test_weight_inside_an_activation_is_refused(self) -> None:
        base, r = torch.randn(5, 32), torch.randn(4, 32)
        with pytest.raises(ValueError, match=r"'x' and 'weight'"):
            FADD.maybe_inplace(base[:4], r, base[3], EPS)

    def test_disjoint_views_of_one_buffer_run_in_place(self) -> None:
        base, w = torch.randn(8, 32), torch.randn(32)
        x, r = base[:4], base[4:]
        expected = expected_fadd(x, r, w)
        out, residual = FADD.maybe_inplace(x, r, w, EPS)
        assert out.data_ptr() == x.data_ptr()
        assert residual.data_ptr() == r.data_ptr()
        assert_close(FADD, (out, residual), expected)

    def test_interleaved_column_views_run_in_place(self) -> None:
        base, w = torch.randn(4, 64), torch.randn(32)
        x, r = base[:, :32], base[:, 32:]
        expected = expected_fadd(x, r, w)
        out, residual = FADD.maybe_inplace(x, r, w, EPS)
        assert out.data_ptr() == x.data_ptr()
        assert residual.data_ptr() == r.data_ptr()
        assert_close(FADD, (out, residual), expected)

    def test_expanded_residual_computes_out_of_place(self) -> None:
        x, row, w = torch.randn(4, 32), torch.randn(1, 32), torch.randn(32)
        r = row.expand(4, 32)
        row_before = row.clone()
        expected = expected_fadd(x, r, w)
        out, residual = FADD.maybe_inplace(x, r, w, EPS)
        assert_close(FADD, (out, residual), expected)
        assert torch.equal(row, row_before)  # a copy holds the residual; x is written in place
        assert out.data_ptr() == x.data_ptr()
        assert residual.data_ptr() != row.data_ptr()

    def test_torch_op_refuses_too(self) -> None:
        x, w = torch.randn(4, 32), torch.randn(32)
        with pytest.raises(ValueError, match=r"'x' and 'x_residual'"):
            FADD.torch_op.maybe_inplace(x, x, w, EPS)

    def test_torch_op_computes_expanded_out_of_place(self) -> None:
        x, row, w = torch.randn(4, 32), torch.randn(1, 32), torch.randn(32)
        expected = expected_fadd(x, row.expand(4, 32), w)
        assert_close(FADD, FADD.torch_op.maybe_inplace(x, row.expand(4, 32), w, EPS), expected)

    def test_default_overload_accepts_aliasing(self) -> None:
        base, w = torch.randn(8, 32), torch.randn(32)
        before = base.clone()
        expected = expected_fadd(base[:4], base[2:6], w)
        assert_close(FADD, FADD(base[:4], base[2:6], w, EPS), expected)
        assert torch.equal(base, before)

    def test_refusal_is_not_cached_with_the_choice(self) -> None:
        # the same shapes, dtypes and strides first alias, then not: only the first is refused
        x, w = torch.randn(4, 32), torch.randn(32)
        with pytest.raises(ValueError, match="the same tensor"):
            FADD.maybe_inplace(x, x, w, EPS)
        r = torch.randn(4, 32)
        expected = expected_fadd(x, r, w)
        assert_close(FADD, FADD.maybe_inplace(x, r, w, EPS), expected)
        with pytest.raises(ValueError, match="the same tensor"):
            FADD.maybe_inplace(r, r, w, EPS)


def test_native_maybe_inplace_computes_aliased_arguments() -> None:
    # an out-of-place implementation never writes its inputs: nothing to refuse
    x, w = torch.randn(4, 32), torch.randn(32)
    expected = expected_fadd(x, x, w)
    assert_close(FADD, FADD.maybe_inplace(x, x, w, EPS), expected)


# ---------------------------------------------------------------------- rotary_embedding
def rotary_args(tokens: int = 5, heads: int = 4, head_size: int = 16) -> tuple[Any, ...]:
    positions = torch.randint(0, 64, (tokens,))
    return positions, head_size, make_cos_sin_cache(64, head_size)


@pytest.mark.usefixtures("rotary_inplace")
class TestRotaryEmbedding:
    def test_query_is_key_is_refused(self) -> None:
        positions, head_size, cache = rotary_args()
        q = torch.randn(5, 64)
        with pytest.raises(ValueError, match=r"rotary_embedding.maybe_inplace.*'x_query'.*'x_key'"):
            ROTARY.maybe_inplace(positions, q, q, head_size, cache, True)

    def test_split_of_one_projection_runs_in_place(self) -> None:
        positions, head_size, cache = rotary_args()
        qkv = torch.randn(5, 64 + 32 + 32)
        q, k, _v = qkv.split([64, 32, 32], dim=-1)
        expected = ROTARY.native(positions, q.clone(), k.clone(), head_size, cache, True)
        query, key = ROTARY.maybe_inplace(positions, q, k, head_size, cache, True)
        assert query.data_ptr() == q.data_ptr()
        assert key.data_ptr() == k.data_ptr()
        assert_close(ROTARY, (query, key), expected)

    def test_overlapping_split_is_refused(self) -> None:
        positions, head_size, cache = rotary_args()
        qkv = torch.randn(5, 96)
        with pytest.raises(ValueError, match=r"'x_query' and 'x_key'"):
            ROTARY.maybe_inplace(positions, qkv[:, :64], qkv[:, 48:80], head_size, cache, True)

    def test_cache_inside_the_query_is_refused(self) -> None:
        positions, head_size, _ = rotary_args()
        block = torch.randn(64 * 16)
        q, cache = block[: 5 * 64].view(5, 64), block.view(64, 16)
        k = torch.randn(5, 32)
        with pytest.raises(ValueError, match=r"'x_query' and 'cos_sin_cache'"):
            ROTARY.maybe_inplace(positions, q, k, head_size, cache, True)

    def test_expanded_key_computes_out_of_place(self) -> None:
        positions, head_size, cache = rotary_args()
        q, row = torch.randn(5, 64), torch.randn(1, 32)
        k = row.expand(5, 32)
        row_before = row.clone()
        expected = ROTARY.native(positions, q.clone(), k.clone(), head_size, cache, True)
        assert_close(
            ROTARY, ROTARY.maybe_inplace(positions, q, k, head_size, cache, True), expected
        )
        assert torch.equal(row, row_before)
