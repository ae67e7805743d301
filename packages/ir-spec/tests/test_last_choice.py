"""The last eager choice behind a tensor guard: reused only for arguments the dispatch key
would treat the same, rebuilt on a miss (a bounded number of times), forgotten with the
choices, and never used by ops with their own dispatch key."""

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from ir_spec import last_choice, ops, row_view

pytestmark = pytest.mark.skipif(not last_choice.available(), reason="no tensor guard in torch")


def marker(value: float) -> Callable[..., Tensor]:
    def impl(
        x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> Tensor:
        return torch.full_like(x, value)

    return impl


@pytest.fixture
def picky(prefer: Callable[[str], None], temporary_impls: list[Any]) -> None:
    """Provider `test_picky` (fills 7) takes contiguous float32 rows of 64 with a weight, and
    epsilon 1e-6; everything else runs native."""

    def supports(
        x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> bool:
        return (
            x.dtype == torch.float32
            and x.shape[-1] == 64
            and x.is_contiguous()
            and weight is not None
            and epsilon == 1e-6
        )

    ops.rms_norm.register_impl("test_picky", supports_args=supports)(marker(7.0))
    temporary_impls.append((ops.rms_norm, "test_picky"))
    prefer("test_picky")


def picked(x: Tensor, weight: Tensor | None, epsilon: float = 1e-6) -> bool:
    return bool(torch.all(ops.rms_norm(x, weight, epsilon) == 7.0))


@pytest.mark.usefixtures("picky")
def test_reused_across_token_counts() -> None:
    w = torch.randn(64)
    assert picked(torch.randn(4, 64), w)
    memo = ops.rms_norm._last_choice
    assert memo is not None
    for tokens in (1, 9, 300):
        assert picked(torch.randn(tokens, 64), w)
    assert ops.rms_norm._last_choice is memo  # hits: nothing rebuilt
    assert picked(torch.randn(2, 5, 64), w)  # another rank: a miss, then a new memo
    assert ops.rms_norm._last_choice is not memo


@pytest.mark.usefixtures("picky")
@pytest.mark.parametrize(
    ("change", "still_picked"),
    [
        (lambda x, w: (x.half(), w.half()), False),
        (lambda x, w: (torch.randn(4, 32), torch.randn(32)), False),
        (lambda x, w: (torch.randn(64, 4).t(), w), False),
        (lambda x, w: (x, None), False),
        # the guard sees requires_grad, the key does not: same choice, found through the key
        (lambda x, w: (x, w.clone().requires_grad_()), True),
    ],
    ids=["dtype", "hidden", "layout", "weight-none", "requires-grad"],
)
def test_any_change_misses(change: Callable[..., Any], still_picked: bool) -> None:
    x, w = torch.randn(4, 64), torch.randn(64)
    assert picked(x, w)
    memo = ops.rms_norm._last_choice
    x2, w2 = change(x, w)
    with torch.no_grad():
        out = ops.rms_norm(x2, w2, 1e-6)
        expected = torch.full_like(x2, 7.0) if still_picked else ops.rms_norm.native(x2, w2, 1e-6)
    torch.testing.assert_close(out, expected)
    assert ops.rms_norm._last_choice is not memo
    assert picked(x, w)  # and back


@pytest.mark.usefixtures("picky")
def test_other_arguments_are_compared() -> None:
    x, w = torch.randn(4, 64), torch.randn(64)
    assert picked(x, w)
    assert not picked(x, w, 1e-5)
    assert picked(x, w)


@pytest.mark.usefixtures("picky")
def test_new_registration_forgets_it(temporary_impls: list[Any]) -> None:
    x, w = torch.randn(4, 64), torch.randn(64)
    assert picked(x, w)
    ops.rms_norm.register_impl("test_other")(marker(3.0))
    temporary_impls.append((ops.rms_norm, "test_other"))
    assert ops.rms_norm._last_choice is None
    assert picked(x, w)  # the dispatcher still prefers test_picky


@pytest.mark.usefixtures("picky")
def test_alternating_arguments_stop_rebuilding() -> None:
    a, b = (torch.randn(4, 64), torch.randn(64)), (torch.randn(4, 64).half(), None)
    for _ in range(last_choice.MAX_REBUILDS + 10):
        assert picked(*a)
        assert not picked(*b)
    assert ops.rms_norm._last_choice_rebuilds == last_choice.MAX_REBUILDS


def test_ops_with_their_own_key_guard_every_size(prefer: Callable[[str], None]) -> None:
    """fused_add_rms_norm's key relates x's and x_residual's shapes: its guard checks every
    size, so a token count that differs between the two still reaches the check."""
    prefer("native")  # a dispatcher with process-wide choices (forgets them: rebuilds reset)
    op = ops.fused_add_rms_norm
    x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    op(x, r, w, 1e-6)
    memo = op._last_choice
    assert memo is not None
    op(torch.randn(4, 64), torch.randn(4, 64), w, 1e-6)
    assert op._last_choice is memo  # same sizes: a hit
    with pytest.raises(ValueError, match="x_residual"):
        op(torch.randn(5, 64), r, w, 1e-6)
    out, residual = op(torch.randn(5, 64), torch.randn(5, 64), w, 1e-6)  # another batch: a miss
    assert out.shape == residual.shape == (5, 64)
    assert op._last_choice is not memo


def test_maybe_inplace_shares_the_memo_and_still_checks(prefer: Callable[[str], None]) -> None:
    """`maybe_inplace` tries the same memo as the call (a hit spares the key, most of the
    eager cost of fused_add_rms_norm, whose key relates two tensors), and a mismatch still
    reaches the check."""
    prefer("native")
    op = ops.fused_add_rms_norm
    w = torch.randn(64)
    op.maybe_inplace(torch.randn(4, 64), torch.randn(4, 64), w, 1e-6)
    memo = op._last_choice
    assert memo is not None
    op.maybe_inplace(torch.randn(4, 64), torch.randn(4, 64), w, 1e-6)
    op(torch.randn(4, 64), torch.randn(4, 64), w, 1e-6)
    assert op._last_choice is memo
    with pytest.raises(ValueError, match="x_residual"):
        op.maybe_inplace(torch.randn(4, 64), torch.randn(5, 64), w, 1e-6)


@pytest.mark.usefixtures("picky")
def test_bad_arguments_after_a_good_call_still_raise() -> None:
    x, w = torch.randn(4, 64), torch.randn(64)
    assert picked(x, w)
    with pytest.raises(ValueError, match="weight"):
        ops.rms_norm(x, torch.randn(32), 1e-6)
    with pytest.raises((ValueError, TypeError)):
        ops.rms_norm([1.0, 2.0], w, 1e-6)  # type: ignore[arg-type]


@pytest.mark.usefixtures("picky")
def test_a_leading_size_that_changes_contiguity_misses() -> None:
    """One row of a wider buffer is contiguous; two rows of it, with the same strides, are not:
    the guard may not leave the leading size free for such a tensor."""
    buffer, w = torch.randn(4, 128), torch.randn(64)
    assert picked(buffer[:1, :64], w)
    assert not picked(buffer[:2, :64], w)


@pytest.fixture
def rows_only(prefer: Callable[[str], None], temporary_impls: list[Any]) -> None:
    """Provider `test_rows` (fills 7) takes rows one stride apart (`ir_spec.row_view`), as the
    kernel providers do."""

    def supports(
        x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
    ) -> bool:
        return row_view(x) is not None

    ops.rms_norm.register_impl("test_rows", supports_args=supports)(marker(7.0))
    temporary_impls.append((ops.rms_norm, "test_rows"))
    prefer("test_rows")


@pytest.mark.usefixtures("rows_only")
def test_rows_that_do_not_collapse_are_chosen_for_again() -> None:
    """Neither contiguous: rows 128 apart in a [2, 4, 128] buffer collapse into one row index,
    rows of a [2, 8, 64] buffer's first four do not. The key must tell them apart, and so must
    the guard where the leading size would make the difference."""
    w = torch.randn(64)
    collapsing = torch.randn(2, 4, 128)[..., :64]
    split = torch.randn(2, 8, 64)[:, :4]
    assert row_view(collapsing) is not None
    assert row_view(split) is None
    assert picked(collapsing, w)
    assert not picked(split, w)
    assert picked(collapsing, w)
    one_batch = torch.randn(2, 8, 64)
    assert picked(one_batch[:1, :4], w)  # a single leading row collapses whatever its stride
    assert not picked(one_batch[:, :4], w)
