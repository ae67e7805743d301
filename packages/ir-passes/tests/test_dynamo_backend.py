"""The ``ir_passes`` Dynamo backend: ``torch.compile(fn, backend="ir_passes", options=...)``
runs Inductor with the IR passes, found through the ``torch_dynamo_backends`` entry point
with nothing imported first."""

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import pytest
import torch
from torch import Tensor

import ir_dispatch
import ir_passes
from ir_passes.dynamo import backend, split_options
from ir_spec import ops


def add_then_norm(x: Tensor, r: Tensor, w: Tensor) -> Tensor:
    return ops.rms_norm(x + r, w, 1e-6) * 2


def test_backend_runs_the_passes_with_its_options() -> None:
    x, r, w = torch.randn(6, 64), torch.randn(6, 64), torch.randn(64)
    options = {"force_fusion": True, "fx_graph_cache": False}  # a PassConfig field, an Inductor one
    compiled = torch.compile(add_then_norm, backend=backend, options=options)
    torch.testing.assert_close(compiled(x, r, w), add_then_norm(x, r, w))
    report = ir_passes.last_report()
    assert report is not None
    assert report.passes_ran
    assert report.fusions[ir_passes.RESIDUAL_ADD_PATTERN] == 1
    assert set(report.selected_impls) == {"fused_add_rms_norm"}


def test_backend_lowers_to_the_priority_in_force() -> None:
    ir_dispatch.set_priority(fused_add_rms_norm=["t_outofplace"])
    x, r, w = torch.randn(5, 32), torch.randn(5, 32), torch.randn(32)
    options = ir_passes.PassConfig(force_fusion=True)
    with torch._inductor.config.patch(fx_graph_cache=False):
        out = torch.compile(add_then_norm, backend=backend, options=options)(x, r, w)
    torch.testing.assert_close(out, add_then_norm(x, r, w))
    report = ir_passes.last_report()
    assert report is not None
    assert set(report.selected_impls["fused_add_rms_norm"].values()) == {"t_outofplace"}


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"levle": 2}, r"unknown option 'levle'; did you mean level"),
        (
            {"max_autotuen": True},
            r"unknown option 'max_autotuen'; did you mean max_autotune",
        ),
        ({"level": 7}, r"level got 7; expected one of 0, 1, 2, 3"),
        ({"post_grad_custom_post_pass": None}, r"installs the IR passes and cannot be set"),
        ("O2", r"got 'O2'; expected an ir_passes.PassConfig or a mapping"),
    ],
)
def test_bad_options_are_named(options: object, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        split_options(options, "options")


def test_options_split_into_passes_and_inductor() -> None:
    passes, inductor = split_options({"level": 1, "max-autotune": True}, "options")
    assert passes == ir_passes.PassConfig(level=1)
    assert inductor == {"max_autotune": True}


SCRIPT = """
import sys
import torch
from ir_spec import ops

def add_then_norm(x, r, w):
    return ops.rms_norm(x + r, w, 1e-6) * 2

loaded = sorted(m for m in sys.modules if m.startswith(("ir_passes", "ir_dispatch")))
assert not loaded, loaded
x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
compiled = torch.compile(
    add_then_norm, backend="ir_passes", options={"force_fusion": True, "fx_graph_cache": False}
)
torch.testing.assert_close(compiled(x, r, w), add_then_norm(x, r, w))
import ir_passes
report = ir_passes.last_report()
assert report.fusions["add+rms_norm"] == 1, report
print("ir_passes backend ok:", dict(report.fusions))
"""


@pytest.mark.skipif(
    "ir_passes" not in {ep.name for ep in entry_points(group="torch_dynamo_backends")},
    reason="ir-passes is not installed with its entry points (nox installs it)",
)
def test_backend_by_name_in_a_fresh_process() -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "IR_PLATFORM": "cpu"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ir_passes backend ok: {'add+rms_norm': 1}" in result.stdout
