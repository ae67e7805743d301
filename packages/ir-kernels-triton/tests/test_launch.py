"""Programmatic dependent launch of the Triton kernels: the setting, and on a GPU that chains of
launches, each reading what the one before wrote, give the same bits with it as without."""

import pytest
import torch

from ir_kernels_triton.launch import tuning
from ir_kernels_triton.launch.programmatic import (
    launch_options,
    programmatic_launch,
    set_programmatic_launch,
)
from ir_spec import ops

GPU = torch.cuda.is_available()


def test_the_setting_is_kept_and_checked() -> None:
    assert set_programmatic_launch(False) is False  # off by default
    with programmatic_launch(True):
        assert set_programmatic_launch(True) is True
    assert set_programmatic_launch(False) is False
    with pytest.raises(TypeError, match="enabled must be a bool, got 1"):
        set_programmatic_launch(1)  # type: ignore[arg-type]


@pytest.mark.skipif(GPU, reason="the interpreter case")
def test_the_interpreter_launches_plainly() -> None:
    with programmatic_launch(True):
        assert launch_options(torch.empty(1), (1,), 4) == {}


def chains(
    programmatic: bool, rows: int, width: int, graph: bool, steps: int = 24
) -> list[torch.Tensor]:
    """The fused add and rotary in place and the plain norm out of place, `steps` launches
    each, every launch on the results of the one before (captured in a CUDA graph and replayed
    once where `graph`)."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to("cuda", torch.bfloat16)

    x, residual, weight = randn(rows, width), randn(rows, width), randn(width)
    query, key = randn(rows, width), randn(rows, 256)
    angles = torch.rand(64, 64, generator=g) * 6.0
    cache = torch.cat([angles.cos(), angles.sin()], dim=1).to("cuda")
    position = torch.randint(0, 64, (rows,), generator=g).to("cuda")
    state = [x, residual, query, key, randn(rows, width)]
    norm_weight = (torch.rand(width, generator=g) + 0.5).to("cuda", torch.bfloat16)
    fused_add = ops.fused_add_rms_norm.impls["triton_inplace"].fn
    rotary = ops.rotary_embedding.impls["triton_inplace"].fn
    norm = ops.rms_norm.impls["triton"].fn

    def run() -> torch.Tensor:
        for _ in range(steps):
            fused_add(x, residual, weight, 1e-6, None)
        for _ in range(steps):
            rotary(position, query, key, 128, cache, True)
        y = state[4]
        for _ in range(steps):
            y = norm(y, norm_weight, 1e-6, None)
        return y

    torch.cuda.synchronize()
    with programmatic_launch(programmatic):
        if graph:  # compile and warm up outside the graph
            start = [t.clone() for t in state]
            run()
            for t, first in zip(state, start, strict=True):
                t.copy_(first)
            captured = torch.cuda.CUDAGraph()
            with torch.cuda.graph(captured):
                y = run()
            captured.replay()
        else:
            y = run()
        torch.cuda.synchronize()
    return [*state[:4], y]


@pytest.mark.skipif(not GPU, reason="needs a GPU")
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize(("rows", "width"), [(1, 4096), (16, 8192), (7, 2048), (4096, 4096)])
def test_programmatic_launches_wait_for_the_kernel_before(
    rows: int, width: int, graph: bool
) -> None:
    """4096 x 4096: grids past one wave, launched plainly among programmatic ones."""
    if torch.cuda.get_device_capability()[0] >= 9:
        hint = torch.empty(1, device="cuda")
        one_wave = (tuning.COMMON.programmatic.max_threads // (4 * 32),)
        assert launch_options(hint, one_wave, 4) == {}
        with programmatic_launch(True):
            assert launch_options(hint, one_wave, 4) == {"PDL": True, "launch_pdl": True}
            assert launch_options(hint, (one_wave[0] + 1,), 4) == {}  # launched plainly
    expected = chains(False, rows, width, graph=False)
    got = chains(True, rows, width, graph=graph)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)
