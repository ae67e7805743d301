"""ir-passes lowering IR ops to the Triton provider (its kernels as torch ops), in the Triton
interpreter on CPU: a chain of maybe_inplace residual steps with the in-place kernel; the
provider chosen through ir-dispatch, in eager calls and through the torch op; and the in-place
kernel, compiled, on arguments that alias, as in eager mode."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from typing import Any

import pytest
from torch import Tensor

import ir_dispatch
import ir_kernels_triton  # noqa: F401
import ir_passes
from ir_spec import ops
from ir_spec.testing import SampleSpec, assert_close, clone_args, sample_inputs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def steps(x: Tensor, r: Tensor, w: Tensor) -> Any:
    x, r = x * 1.0, r * 1.0
    for _ in range(4):
        x, r = ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
    return x, r


@pytest.mark.parametrize("provider", ["triton", "triton_inplace"])
def test_compiled_chain_lowers_to_triton(provider: str) -> None:
    ir_dispatch.set_priority(fused_add_rms_norm=[provider])
    try:
        x, r, w = (
            torch.randn(8, 64, device=DEVICE),
            torch.randn(8, 64, device=DEVICE),
            torch.randn(64, device=DEVICE),
        )
        with torch._inductor.config.patch(fx_graph_cache=False):
            out = ir_passes.compile(steps)(x, r, w)
        torch.testing.assert_close(out, steps(x, r, w), atol=1e-5, rtol=1e-5)
        report = ir_passes.last_report()
        assert report is not None
        assert set(report.selected_impls["fused_add_rms_norm"].values()) == {provider}
        if provider == "triton_inplace":
            assert report.clones_inserted == 8
            assert report.clones_removed == 8
    finally:
        ir_dispatch.set_priority()


def spec_for(dtype: torch.dtype, hidden: int, tokens: int, layout: str) -> SampleSpec:
    return SampleSpec(
        batch_shape=(tokens,),
        hidden_size=hidden,
        dtype=dtype,
        device=DEVICE,
        row_padding=13 if layout == "strided" else 0,
    )


def test_selected_through_dispatch_and_torch_op() -> None:
    ir_dispatch.set_priority(rms_norm=["triton"])
    try:
        args = sample_inputs(ops.rms_norm, spec_for(torch.float16, 769, 7, "strided"))
        assert ir_dispatch.select("rms_norm", *args).provider == "triton"
        assert_close(ops.rms_norm, ops.rms_norm(*args), ops.rms_norm.native(*args))
        torch.library.opcheck(ops.rms_norm.torch_op.default, args)
    finally:
        ir_dispatch.set_priority()


def test_maybe_inplace_through_dispatch() -> None:
    ir_dispatch.set_priority(fused_add_rms_norm=["triton_inplace"])
    try:
        x, r, w, eps, _ = sample_inputs(
            ops.fused_add_rms_norm, spec_for(torch.float16, 769, 7, "contiguous")
        )
        expected = ops.fused_add_rms_norm.native(x, r, w, eps)
        before = clone_args((x, r))
        out = ops.fused_add_rms_norm(x, r, w, eps)
        assert torch.equal(x, before[0])  # default overload: inputs untouched
        assert_close(ops.fused_add_rms_norm, out, expected)
        out2, res2 = ops.fused_add_rms_norm.maybe_inplace(x, r, w, eps)
        assert out2 is x
        assert res2 is r
        assert_close(ops.fused_add_rms_norm, (out2, res2), expected)
    finally:
        ir_dispatch.set_priority()


def one_step(x: Tensor, r: Tensor, w: Tensor) -> Any:
    return ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)


def same_intermediate_twice(x: Tensor, w: Tensor) -> Any:
    h = x * 2
    return ops.fused_add_rms_norm.maybe_inplace(h, h, w, 1e-6)


def overlapping_rows() -> tuple[Tensor, Tensor, Tensor]:
    base = torch.randn(8, 64, device=DEVICE)
    return base[:4], base[2:6], torch.randn(64, device=DEVICE)


def disjoint_columns() -> tuple[Tensor, Tensor, Tensor]:
    base = torch.randn(4, 128, device=DEVICE)
    return base[:, :64], base[:, 64:], torch.randn(64, device=DEVICE)


def expanded_residual() -> tuple[Tensor, Tensor, Tensor]:
    row = torch.randn(1, 64, device=DEVICE)
    return torch.randn(4, 64, device=DEVICE), row.expand(4, 64), torch.randn(64, device=DEVICE)


def separate() -> tuple[Tensor, Tensor, Tensor]:
    return (
        torch.randn(4, 64, device=DEVICE),
        torch.randn(4, 64, device=DEVICE),
        torch.randn(64, device=DEVICE),
    )


@pytest.mark.parametrize(
    ("fn", "make", "first"),
    [
        (one_step, overlapping_rows, None),
        (one_step, overlapping_rows, separate),  # compiled for separate inputs first
        (same_intermediate_twice, lambda: (torch.randn(4, 64), torch.randn(64)), None),
        (one_step, disjoint_columns, None),
        (one_step, expanded_residual, None),
    ],
    ids=["overlapping", "overlapping-later", "same-intermediate", "disjoint", "expanded"],
)
def test_compiled_inplace_kernel_on_aliased_arguments_behaves_as_eager(
    fn: Any, make: Any, first: Any
) -> None:
    """The Triton in-place kernel, compiled, on arguments that alias: the eager ValueError where
    they overlap, the eager results where they do not (or where a copy is needed)."""
    ir_dispatch.set_priority(fused_add_rms_norm=["triton_inplace"])
    try:

        def build() -> tuple[Tensor, ...]:
            torch.manual_seed(7)
            return tuple(a.to(DEVICE) for a in make())

        try:
            expected: Any = fn(*build())
        except ValueError as err:
            expected = err
        compiled = ir_passes.compile(fn)
        with torch._inductor.config.patch(fx_graph_cache=False):
            if first is not None:
                compiled(*first())
            if isinstance(expected, ValueError):
                with pytest.raises(ValueError, match="maybe_inplace: arguments") as caught:
                    compiled(*build())
                assert str(caught.value) == str(expected)
            else:
                torch.testing.assert_close(compiled(*build()), expected)
    finally:
        ir_dispatch.set_priority()
