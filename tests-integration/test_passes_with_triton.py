"""ir-passes lowering IR ops to the Triton provider (its kernels as torch ops), in the Triton
interpreter on CPU: a chain of maybe_inplace residual steps with the in-place kernel."""

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
