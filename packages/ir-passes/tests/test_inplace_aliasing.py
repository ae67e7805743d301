"""In-place implementations under ``ir_passes.compile``: providers written in plain PyTorch (their
in-place ATen ops compile and give the native results), and ``maybe_inplace`` with activations
that alias, which must behave as in eager mode: refused with the same `ValueError` where an
activation overlaps another tensor argument, computed out of place where an activation's own
elements share memory, in place where views of one buffer are disjoint."""

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import Tensor

import ir_dispatch
import ir_passes
from ir_spec import ops
from ir_spec.catalog.rotary import make_cos_sin_cache
from ir_spec.testing import fused_add_rms_norm_inplace, rotary_embedding_inplace

FADD = ops.fused_add_rms_norm
ROTARY = ops.rotary_embedding
EPS = 1e-6


def fadd_via_native(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """An out-of-tree in-place provider in plain PyTorch: the native function, its results
    copied into the activations."""
    out, residual = FADD.native(x, x_residual, weight, epsilon, variance_size)
    x.copy_(out)
    x_residual.copy_(residual)
    return x, x_residual


PLAIN_FADD: dict[str, Callable[..., Any]] = {
    "t_plain_via_native": fadd_via_native,
    "t_plain_add_copy": fused_add_rms_norm_inplace,
}


@pytest.fixture(autouse=True)
def plain_providers() -> Iterator[None]:
    for name, fn in PLAIN_FADD.items():
        FADD.register_impl(name, inplace=True)(fn)
    ROTARY.register_impl("t_plain_rotary", inplace=True)(rotary_embedding_inplace)
    with torch._inductor.config.patch(fx_graph_cache=False):
        yield
    for name in PLAIN_FADD:
        FADD.unregister_impl(name)
    ROTARY.unregister_impl("t_plain_rotary")


def fadd_args(tokens: int = 8, hidden: int = 64) -> tuple[Tensor, Tensor, Tensor]:
    return torch.randn(tokens, hidden), torch.randn(tokens, hidden), torch.randn(hidden)


def one_step(x: Tensor, r: Tensor, w: Tensor) -> Any:
    return FADD.maybe_inplace(x, r, w, EPS)


def chain(x: Tensor, r: Tensor, w: Tensor) -> Any:
    x, r = x * 1.5, r * 0.5
    for _ in range(3):
        x, r = FADD.maybe_inplace(x, r, w, EPS)
        x = x * 2
    return x, r


# ---------------------------------------------------- item 3: plain-PyTorch in-place providers
@pytest.mark.parametrize("provider", sorted(PLAIN_FADD))
@pytest.mark.parametrize("fn", [one_step, chain, lambda x, r, w: FADD(x, r, w, EPS)])
def test_plain_pytorch_inplace_fused_add_compiles(provider: str, fn: Callable[..., Any]) -> None:
    ir_dispatch.set_priority(fused_add_rms_norm=[provider])
    x, r, w = fadd_args()
    expected = fn(x.clone(), r.clone(), w)  # eager, with the same provider
    out = ir_passes.compile(fn)(x.clone(), r.clone(), w)
    torch.testing.assert_close(out, expected)
    report = ir_passes.last_report()
    assert report is not None
    assert set(report.selected_impls["fused_add_rms_norm"].values()) == {provider}


def rotary_inputs(tokens: int = 6) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    positions = torch.randint(0, 128, (tokens,))
    return positions, torch.randn(tokens, 64), torch.randn(tokens, 32), make_cos_sin_cache(128, 16)


@pytest.mark.parametrize("inplace", [True, False])
def test_plain_pytorch_inplace_rotary_compiles(inplace: bool) -> None:
    ir_dispatch.set_priority(rotary_embedding=["t_plain_rotary"])
    call = ROTARY.maybe_inplace if inplace else ROTARY

    def fn(positions: Tensor, q: Tensor, k: Tensor, cache: Tensor) -> Any:
        return call(positions, q, k, 16, cache, True)

    positions, q, k, cache = rotary_inputs()
    expected = ROTARY.native(positions, q, k, 16, cache, True)
    out = ir_passes.compile(fn)(positions, q.clone(), k.clone(), cache)
    torch.testing.assert_close(out, expected)
    report = ir_passes.last_report()
    assert report is not None
    assert set(report.selected_impls["rotary_embedding"].values()) == {"t_plain_rotary"}


def test_plain_pytorch_inplace_compiles_with_dynamic_tokens() -> None:
    ir_dispatch.set_priority(fused_add_rms_norm=["t_plain_via_native"])
    compiled = ir_passes.compile(chain, dynamic=True)
    for tokens in (3, 9):
        x, r, w = fadd_args(tokens)
        torch.testing.assert_close(compiled(x.clone(), r.clone(), w), chain(x, r, w))


# ------------------------------------------------------------- item 2: aliasing, compiled
#: in-place providers of fused_add_rms_norm: opaque custom ops (as kernels are; one row by row)
#: and plain PyTorch
INPLACE_PROVIDERS = ["t_inplace", "t_inplace_rows", "t_plain_via_native"]


def same_twice(x: Tensor, w: Tensor) -> Any:
    return FADD.maybe_inplace(x, x, w, EPS)


def same_intermediate_twice(x: Tensor, w: Tensor) -> Any:
    h = x * 2
    return FADD.maybe_inplace(h, h, w, EPS)


def overlapping_views_of_an_intermediate(base: Tensor, w: Tensor) -> Any:
    h = base * 2
    return FADD.maybe_inplace(h[:4], h[2:6], w, EPS)


def disjoint_views_of_an_intermediate(base: Tensor, w: Tensor) -> Any:
    h = base * 2
    return FADD.maybe_inplace(h[:4], h[4:], w, EPS)


def weight_from_the_activation(base: Tensor, r: Tensor) -> Any:
    h = base * 2
    return FADD.maybe_inplace(h[:4], r, h[3], EPS)


Factory = Callable[[], tuple[Any, ...]]


def seeded(make: Callable[[], tuple[Any, ...]]) -> Factory:
    """`make` under a fixed seed: each call builds the same values, aliased the same way."""

    def build() -> tuple[Any, ...]:
        torch.manual_seed(1234)
        return make()

    return build


def assert_same_outcome(
    fn: Callable[..., Any], make: Factory, *, compile_with: Factory | None = None
) -> tuple[Any, ...]:
    """Compiled `fn` (first called on ``compile_with()`` where given) on ``make()`` raises the
    `ValueError` eager `fn` raises on ``make()``, or returns its results. Returns the arguments
    of the compiled call."""
    try:
        expected: Any = fn(*make())
    except ValueError as err:
        expected = err
    compiled = ir_passes.compile(fn)
    if compile_with is not None:
        compiled(*compile_with())
    args = make()
    if isinstance(expected, ValueError):
        with pytest.raises(ValueError, match="maybe_inplace: arguments") as caught:
            compiled(*args)
        assert str(caught.value) == str(expected)
    else:
        torch.testing.assert_close(compiled(*args), expected)
    return args


@pytest.fixture(params=INPLACE_PROVIDERS)
def inplace_provider(request: pytest.FixtureRequest) -> str:
    provider: str = request.param
    ir_dispatch.set_priority(fused_add_rms_norm=[provider])
    return provider


def overlapping_rows() -> tuple[Any, ...]:
    base = torch.randn(8, 64)
    return base[:4], base[2:6], torch.randn(64)


def separate() -> tuple[Any, ...]:
    return torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)


def weight_in_x() -> tuple[Any, ...]:
    base = torch.randn(5, 64)
    return base[:4], torch.randn(4, 64), base[3]


@pytest.mark.usefixtures("inplace_provider")
class TestCompiledAliasing:
    def test_same_tensor_twice_is_refused(self) -> None:
        x, w = seeded(lambda: (torch.randn(8, 64), torch.randn(64)))()
        before = x.clone()
        with pytest.raises(ValueError, match=r"'x' and 'x_residual'.*the same tensor"):
            ir_passes.compile(same_twice)(x, w)
        assert torch.equal(x, before)
        assert_same_outcome(same_twice, seeded(lambda: (torch.randn(8, 64), torch.randn(64))))

    def test_same_intermediate_twice_is_refused(self) -> None:
        assert_same_outcome(
            same_intermediate_twice, seeded(lambda: (torch.randn(8, 64), torch.randn(64)))
        )

    def test_overlapping_input_views_are_refused(self) -> None:
        base = assert_same_outcome(one_step, seeded(overlapping_rows))[0]._base
        assert torch.equal(base, seeded(overlapping_rows)()[0]._base)  # nothing written

    def test_inputs_that_overlap_only_later_are_refused(self) -> None:
        # compiled for separate tensors; the same shapes and strides then overlap: Dynamo does
        # not compile again, so the compiled code itself must see it
        args = assert_same_outcome(one_step, seeded(overlapping_rows), compile_with=separate)
        assert torch.equal(args[0]._base, seeded(overlapping_rows)()[0]._base)

    def test_overlapping_views_of_an_intermediate_are_refused(self) -> None:
        assert_same_outcome(
            overlapping_views_of_an_intermediate,
            seeded(lambda: (torch.randn(8, 64), torch.randn(64))),
        )

    def test_weight_inside_an_activation_is_refused(self) -> None:
        assert_same_outcome(
            weight_from_the_activation, seeded(lambda: (torch.randn(5, 64), torch.randn(4, 64)))
        )
        assert_same_outcome(one_step, seeded(weight_in_x))
        assert_same_outcome(one_step, seeded(weight_in_x), compile_with=separate)

    def test_disjoint_views_run_in_place(self) -> None:
        assert_same_outcome(
            one_step, seeded(lambda: (*torch.randn(8, 64).split(4), torch.randn(64)))
        )
        assert_same_outcome(
            disjoint_views_of_an_intermediate, seeded(lambda: (torch.randn(8, 64), torch.randn(64)))
        )

    def test_expanded_residual_computes_out_of_place(self) -> None:
        def expanded() -> tuple[Any, ...]:
            return torch.randn(4, 64), torch.randn(1, 64).expand(4, 64), torch.randn(64)

        _, r, _ = assert_same_outcome(one_step, seeded(expanded))
        assert torch.equal(r, seeded(expanded)()[1])  # the expanded row is left alone

    def test_default_overload_computes_aliased_arguments(self) -> None:
        base, w = torch.randn(8, 64), torch.randn(64)
        before = base.clone()
        out = ir_passes.compile(lambda a, b, w: FADD(a, b, w, EPS))(base[:4], base[2:6], w)
        torch.testing.assert_close(out, FADD.native(before[:4], before[2:6], w, EPS))
        assert torch.equal(base, before)


def test_native_computes_aliased_arguments_compiled_as_eager() -> None:
    assert_same_outcome(same_twice, seeded(lambda: (torch.randn(8, 64), torch.randn(64))))
    assert_same_outcome(one_step, seeded(overlapping_rows))


def test_separate_inputs_keep_zero_copy() -> None:
    # the check that replaces Dynamo's missing guard costs no clone
    ir_dispatch.set_priority(fused_add_rms_norm=["t_inplace"])
    x, r, w = fadd_args()
    ir_passes.compile(one_step)(x.clone(), r.clone(), w)
    report = ir_passes.last_report()
    assert report is not None
    assert report.clones_inserted == 2
    assert report.clones_removed == 2
    assert report.inplace_checks == 1
    ir_passes.compile(chain)(x, r, w)  # intermediates only: nothing to check at run time
    report = ir_passes.last_report()
    assert report is not None
    assert report.inplace_checks == 0
    assert report.clones_removed == report.clones_inserted == 6


def test_dynamic_tokens_keep_zero_copy() -> None:
    # a symbolic token count leaves the rows' layout provable: the clones still go
    ir_dispatch.set_priority(fused_add_rms_norm=["t_inplace"])
    compiled = ir_passes.compile(chain, dynamic=True)
    for tokens in (3, 9):
        x, r, w = fadd_args(tokens)
        torch.testing.assert_close(compiled(x, r, w), chain(x.clone(), r.clone(), w))
    report = ir_passes.last_report()
    assert report is not None
    assert report.clones_inserted == 6
    assert report.clones_removed == 6


# ------------------------------------------- with a symbolic token count, as piecewise compiles
def same_input_twice(x: Tensor, w: Tensor) -> Any:
    return FADD.maybe_inplace(x, x, w, EPS)


def overlapping_columns_of_an_intermediate(x: Tensor, w: Tensor) -> Any:
    h = x * 1.5
    return FADD.maybe_inplace(h[:, :32], h[:, 16:48], w[:32], EPS)


def weight_in_the_activation(x: Tensor, w: Tensor) -> Any:
    return FADD.maybe_inplace(x[:, :32], x[:, 32:] * 1.5, x[0, :32], EPS)


def disjoint_columns_of_an_intermediate(x: Tensor, w: Tensor) -> Any:
    h = x * 1.5
    return FADD.maybe_inplace(h[:, :32], h[:, 32:], w[:32], EPS)


@pytest.mark.parametrize(
    "fn",
    [
        same_input_twice,
        same_intermediate_twice,
        overlapping_columns_of_an_intermediate,
        weight_in_the_activation,
        disjoint_columns_of_an_intermediate,
    ],
)
def test_dynamic_tokens_refuse_aliased_arguments_as_eager(inplace_provider: str, fn: Any) -> None:
    """Where the token count is symbolic, the fake tensors cannot tell whether two views of one
    buffer share an element (not when they are empty): the call's tensors decide, so compiled
    code refuses what eager refuses (and computes what eager computes) on every count."""
    compiled = ir_passes.compile(fn, dynamic=True)
    for tokens in (3, 6):
        x, w = torch.randn(tokens, 64), torch.randn(64)
        try:
            expected: Any = fn(x.clone(), w)
        except ValueError as err:
            expected = err
        if isinstance(expected, ValueError):
            with pytest.raises(ValueError, match="maybe_inplace: arguments") as caught:
                compiled(x.clone(), w)
            assert str(caught.value) == str(expected)
        else:
            torch.testing.assert_close(compiled(x.clone(), w), expected)
    report = ir_passes.last_report()
    assert report is not None
    assert report.inplace_checks == 1


def norm_then_sliced_step(x: Tensor, r: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    """An in-place call on column slices of an intermediate and of an input."""
    h = ops.rms_norm(x, w[:13], EPS)
    out, residual = FADD.maybe_inplace(h[:, :8], r[:, 1:9], w[:8], EPS)
    return out * 2, residual


@pytest.mark.parametrize("tokens", [1, 3])
def test_an_opaque_inplace_kernel_on_sliced_rows_compiles_for_one_token(tokens: int) -> None:
    """On one token a column slice is dense with the row stride of its source; the clone an
    in-place kernel writes is contiguous, which Inductor's scheduler needs (a clone that kept
    the stride made it fail with a KeyError in ``compute_ancestors``)."""
    ir_dispatch.set_priority(fused_add_rms_norm=["t_inplace"])
    x, r, w = torch.randn(tokens, 13), torch.randn(tokens, 10), torch.randn(16)
    expected = norm_then_sliced_step(x.clone(), r.clone(), w)
    got = ir_passes.compile(norm_then_sliced_step)(x.clone(), r.clone(), w)
    torch.testing.assert_close(got, expected)
    report = ir_passes.last_report()
    assert report is not None
    assert report.selected_impls["fused_add_rms_norm"] == {"fused_add_rms_norm": "t_inplace"}
