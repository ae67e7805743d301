"""A platform's extra passes (`ir_dispatch.Platform.passes`) run after the fusions and before
lowering, are named in the report, and enter the selection key."""

import textwrap
from collections.abc import Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import Tensor

import ir_dispatch
import ir_passes
from ir_dispatch.platforms import PLATFORMS, detect_platform
from ir_spec import ops

PLUGIN = """
import torch
import ir_dispatch

SEEN = []

def note_ir_ops(graph):
    for node in graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            if node.target.namespace == "ir":
                SEEN.append(node.target._schema.name)

PLATFORM = ir_dispatch.Platform("pass_npu", lambda: False, passes=[note_ir_ops])
"""


@pytest.fixture
def pass_npu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The platform ``pass_npu`` from an entry point, in force (``IR_PLATFORM``)."""
    (tmp_path / "pass_npu_plugin.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    point = EntryPoint(name="pass_npu", value="pass_npu_plugin:PLATFORM", group="ir.platforms")
    installed = list(entry_points(group="ir.platforms"))
    monkeypatch.setattr(PLATFORMS, "_points", lambda: [*installed, point])
    monkeypatch.setenv("IR_PLATFORM", "pass_npu")
    PLATFORMS.reset()
    detect_platform.cache_clear()
    import pass_npu_plugin

    yield pass_npu_plugin
    monkeypatch.delenv("IR_PLATFORM")
    PLATFORMS.reset()
    detect_platform.cache_clear()


def add_then_norm(x: Tensor, r: Tensor, w: Tensor) -> Tensor:
    return ops.rms_norm(x + r, w, 1e-6) * 2


def test_platform_passes_see_the_fused_ir_ops(pass_npu: ModuleType) -> None:
    assert ir_dispatch.detect_platform().name == "pass_npu"
    x, r, w = torch.randn(6, 32), torch.randn(6, 32), torch.randn(32)
    config = ir_passes.PassConfig(force_fusion=True)
    with torch._inductor.config.patch(fx_graph_cache=False):
        out = ir_passes.compile(add_then_norm, config=config)(x, r, w)
    torch.testing.assert_close(out, add_then_norm(x, r, w))
    report = ir_passes.last_report()
    assert report is not None
    assert report.platform_passes == ["pass_npu:note_ir_ops"]
    assert pass_npu.SEEN == ["ir::fused_add_rms_norm"]  # after fusion, before lowering
    assert report.selected_impls["fused_add_rms_norm"]  # lowered after the platform's pass


def test_the_platform_and_its_passes_enter_the_selection_key(
    pass_npu: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ir_passes.PassConfig()
    on_npu = ir_passes.selection_key(config)
    monkeypatch.setenv("IR_PLATFORM", "cpu")
    detect_platform.cache_clear()
    assert ir_passes.selection_key(config) != on_npu
