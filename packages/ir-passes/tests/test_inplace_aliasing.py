"""In-place implementations under ``ir_passes.compile``: providers written in plain PyTorch (their
in-place ATen ops compile and give the native results)."""

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
