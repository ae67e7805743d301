"""What a bad call says, and that it says it whatever came before: a missing or unknown argument
names the op, an argument error carries no unrelated exception, and a call whose scalar
arguments equal an earlier call's but differ in type is checked again."""

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from ir_spec import ops


def rows(hidden: int = 64, tokens: int = 4) -> Tensor:
    return torch.randn(tokens, hidden)


def test_missing_argument_names_the_op() -> None:
    """The generated entry point had been called ``__call__``: the message named no op."""
    with pytest.raises(
        TypeError, match=r"^ir\.rms_norm\(\) missing 1 required positional argument: 'epsilon'"
    ):
        ops.rms_norm(rows(), None)
    with pytest.raises(
        TypeError, match=r"^ir\.rms_norm\(\) got an unexpected keyword argument 'eps'"
    ):
        ops.rms_norm(rows(), None, 1e-6, eps=1e-5)
    with pytest.raises(TypeError, match=r"^ir\.fused_add_rms_norm\.maybe_inplace\(\) missing"):
        ops.fused_add_rms_norm.maybe_inplace(rows())


def test_argument_error_has_no_unrelated_context() -> None:
    """A first call with bad arguments misses the choice cache; its error had been raised while
    handling the cache's KeyError, and tracebacks showed that KeyError first."""
    x = rows()
    for _ in range(2):  # a miss, then a miss after the rejected call cached nothing
        ops.rms_norm.forget_choices()
        with pytest.raises(ValueError, match="epsilon") as caught:
            ops.rms_norm(x, None, -1.0)
        assert caught.value.__context__ is None
        assert not caught.value.__suppress_context__


def _rotary(head_size: Any) -> Any:
    q = torch.randn(4, 128)
    return ops.rotary_embedding(
        torch.randint(0, 16, (4,)), q, q.clone(), head_size, torch.randn(16, 64), True
    )


#: (name, good call, bad call whose scalar equals the good one's, argument named by the error)
TYPED_PAIRS: list[tuple[str, Callable[[Tensor], Any], Callable[[Tensor], Any], str]] = [
    (
        "epsilon-tensor",
        lambda x: ops.rms_norm(x, None, 1e-6),
        lambda x: ops.rms_norm(x, None, torch.tensor(1e-6)),
        "epsilon",
    ),
    (
        "variance_size-bool",
        lambda x: ops.rms_norm(x, None, 1e-6, 1),
        lambda x: ops.rms_norm(x, None, 1e-6, True),
        "variance_size",
    ),
    (
        "group_size-float",
        lambda x: ops.group_quant_fp8(x, 64),
        lambda x: ops.group_quant_fp8(x, 64.0),
        "group_size",
    ),
    (
        "column_major_scales-int",
        lambda x: ops.group_quant_fp8(x, 64, False),
        lambda x: ops.group_quant_fp8(x, 64, 0),
        "column_major_scales",
    ),
    # an op with its own dispatch key
    ("head_size-float", lambda x: _rotary(64), lambda x: _rotary(64.0), "head_size"),
]


@pytest.mark.parametrize(
    ("good", "bad", "argument"), [p[1:] for p in TYPED_PAIRS], ids=[p[0] for p in TYPED_PAIRS]
)
def test_equal_scalars_of_another_type_are_checked_again(
    good: Callable[[Tensor], Any], bad: Callable[[Tensor], Any], argument: str
) -> None:
    """``1e-6 == torch.tensor(1e-6)``, ``64 == 64.0`` and ``False == 0``: the choice caches had
    treated such arguments as the earlier call's and skipped the check, so the same call was
    accepted after a good one and refused in a fresh process."""
    for op in ops:
        op.forget_choices()
    with pytest.raises(ValueError, match=f"argument '{argument}'"):
        bad(rows())  # refused on its own
    good(rows())
    for _ in range(3):  # after a good call: through the cache, and the last choice's memo
        with pytest.raises(ValueError, match=f"argument '{argument}'"):
            bad(rows())
        good(rows())
