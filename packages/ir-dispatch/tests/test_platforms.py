"""Platforms: ir-dispatch's own and out-of-tree ones through the ``ir.platforms`` entry points
(name, detection, default priorities per mode, extra passes), failures logged and skipped."""

import logging
import textwrap
from collections.abc import Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import pytest
import torch

import ir_dispatch
from ir_dispatch.platforms import PLATFORMS, Platform, detect_platform

PLUGIN = """
import os
import ir_dispatch

def count(graph):
    pass

NPU = ir_dispatch.Platform(
    "fake_npu",
    lambda: os.environ.get("FAKE_NPU") == "1",
    {"eager": {"rms_norm": ["t_two", "native"]}, "inductor": {"rms_norm": ["native", "t_one"]}},
    passes=[count],
    description="a device that is not there",
)

def make():
    return ir_dispatch.Platform("made_npu", lambda: False)

WRONG_NAME = ir_dispatch.Platform("other_name", lambda: False)
CLAIMS_CPU = ir_dispatch.Platform("cpu", lambda: True)
NOT_A_PLATFORM = {"name": "dict_npu"}

def explodes():
    raise RuntimeError("the NPU driver is missing")

ALWAYS = ir_dispatch.Platform("always_npu", lambda: True, detect_rank=5)
def fails():
    raise OSError("no device file")
BROKEN_DETECT = ir_dispatch.Platform("broken_detect", fails, detect_rank=500)
"""


def _point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group="ir.platforms")


@pytest.fixture
def plugin_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[EntryPoint]]:
    """A module of platforms importable as ``fake_npu_plugin``; the entry points listed in the
    returned list join the installed ones when the registry loads."""
    module = tmp_path / "fake_npu_plugin.py"
    module.write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    extra: list[EntryPoint] = []
    installed = list(entry_points(group="ir.platforms"))
    monkeypatch.setattr(
        PLATFORMS, "_points", lambda: sorted(installed + extra, key=lambda e: e.name)
    )
    PLATFORMS.reset()
    detect_platform.cache_clear()
    yield extra
    PLATFORMS.reset()
    detect_platform.cache_clear()


def test_ir_dispatch_platforms_are_installed_and_named_with_their_origin() -> None:
    names = {p.name for p in ir_dispatch.installed_platforms()}
    assert {"cpu", "cuda", "rocm", "xpu"} <= names
    assert ir_dispatch.detect_platform().name == "cpu"  # conftest sets IR_PLATFORM=cpu
    assert ir_dispatch.platform_origin() == "cpu (set by IR_PLATFORM; built into ir-dispatch)"


def test_builtin_defaults_are_the_platforms_own() -> None:
    cuda = PLATFORMS.get("cuda")
    assert cuda.default_priority("eager", "rms_norm") == ["triton", "cuda", "native"]
    assert cuda.default_priority("inductor", "dynamic_quant_fp8") == ["triton", "cuda", "native"]
    assert PLATFORMS.get("cpu").default_priority("eager", "rms_norm") == ["native"]


@pytest.mark.parametrize("op", ["write_kv_cache", "rotary_embedding_write_kv_cache"])
def test_cuda_writes_the_kv_cache_with_kernels_in_both_modes(op: str) -> None:
    # a cache write stays an opaque call in a compiled graph: native would run there as a
    # dozen eager ATen kernels, so both modes start with the kernels
    cuda = PLATFORMS.get("cuda")
    assert cuda.default_priority("eager", op)[:2] == ["triton", "cuda"]
    assert cuda.default_priority("inductor", op)[:2] == ["triton", "cuda"]


def test_cuda_compiles_qk_norm_rope_in_place_and_the_cache_writes_out_of_place() -> None:
    # the lowering of an op that stores into its arguments clones an in-place kernel's
    # activations for good (no clone elimination there): out of place saves a copy a layer
    cuda = PLATFORMS.get("cuda")
    assert cuda.default_priority("inductor", "qk_norm_rotary_embedding") == [
        "triton_inplace", "triton", "cuda_inplace", "cuda", "native",
    ]  # fmt: skip
    for op in ("rotary_embedding_write_kv_cache", "write_kv_cache"):
        assert cuda.default_priority("inductor", op) == ["triton", "cuda", "native"]
    for op in ("qk_norm_rotary_embedding", "rotary_embedding_write_kv_cache"):
        assert cuda.default_priority("eager", op) == ["triton", "cuda", "native"]


@pytest.mark.parametrize(
    "op",
    [
        "fused_add_rms_norm_dynamic_quant_fp8",
        "rms_norm_group_quant_fp8",
        "fused_add_rms_norm_group_quant_fp8",
        "silu_and_mul_group_quant_fp8",
    ],
)
def test_every_fused_quant_op_is_kernels_first(op: str) -> None:
    for name in ("cuda", "rocm", "xpu"):
        priority = PLATFORMS.get(name).default_priority("inductor", op)
        assert (priority[0], priority[-1]) == ("triton", "native")


def test_detection_without_ir_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IR_PLATFORM")
    detect_platform.cache_clear()
    expected = "cuda" if torch.cuda.is_available() and not torch.version.hip else None
    found = ir_dispatch.detect_platform().name
    assert found == (expected or found)
    if not torch.cuda.is_available():
        assert found == "cpu"
        assert ir_dispatch.platform_origin() == "cpu (detected; built into ir-dispatch)"


@pytest.mark.usefixtures("markers")
def test_an_entry_point_platform_brings_its_defaults(
    plugin_points: list[EntryPoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin_points.append(_point("fake_npu", "fake_npu_plugin:NPU"))
    monkeypatch.setenv("IR_PLATFORM", "fake_npu")
    platform = ir_dispatch.detect_platform()
    assert platform.name == "fake_npu"
    assert len(platform.passes) == 1
    origin = ir_dispatch.platform_origin()
    assert origin.startswith("fake_npu (set by IR_PLATFORM; entry point 'fake_npu'")
    assert "fake_npu_plugin:NPU" in origin
    x = torch.randn(4, 16)
    assert ir_dispatch.effective_priority("rms_norm") == ["t_two", "native"]
    assert ir_dispatch.select("rms_norm", x, None, 1e-6).provider == "t_two"
    with ir_dispatch.mode("inductor"):
        assert ir_dispatch.effective_priority("rms_norm") == ["native", "t_one"]
    ir_dispatch.set_priority(rms_norm=["t_one"])
    assert ir_dispatch.effective_priority("rms_norm") == ["t_one", "t_two", "native"]
    assert ir_dispatch.explain("rms_norm", x, None, 1e-6).platform is platform


def test_detection_tries_out_of_tree_platforms_first(
    plugin_points: list[EntryPoint], monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin_points.append(_point("fake_npu", "fake_npu_plugin:NPU"))
    plugin_points.append(_point("always_npu", "fake_npu_plugin:ALWAYS"))
    monkeypatch.delenv("IR_PLATFORM")
    monkeypatch.setenv("FAKE_NPU", "1")
    assert ir_dispatch.detect_platform().name == "fake_npu"  # rank 100 before always_npu's 5
    monkeypatch.setenv("FAKE_NPU", "0")
    detect_platform.cache_clear()
    expected = "always_npu" if not torch.cuda.is_available() else "cuda"
    assert ir_dispatch.detect_platform().name == expected  # rank 5: after CUDA, before CPU


def test_a_failing_detection_is_logged_and_taken_as_absent(
    plugin_points: list[EntryPoint],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugin_points.append(_point("broken_detect", "fake_npu_plugin:BROKEN_DETECT"))
    monkeypatch.delenv("IR_PLATFORM")
    with caplog.at_level(logging.WARNING, logger="ir_dispatch"):
        platform = ir_dispatch.detect_platform()
    assert platform.name != "broken_detect"
    assert "detecting platform 'broken_detect' failed (OSError: no device file)" in caplog.text


def test_a_factory_entry_point_is_called(plugin_points: list[EntryPoint]) -> None:
    plugin_points.append(_point("made_npu", "fake_npu_plugin:make"))
    assert "made_npu" in {p.name for p in ir_dispatch.installed_platforms()}


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("dead_npu", "fake_npu_plugin:explodes", "RuntimeError: the NPU driver is missing"),
        ("gone_npu", "no_such_module_anywhere:NPU", "ModuleNotFoundError"),
        ("wrong_name", "fake_npu_plugin:WRONG_NAME", "supplies platform 'other_name'"),
        ("cpu", "fake_npu_plugin:CLAIMS_CPU", "platform 'cpu' is built into ir-dispatch"),
        ("dict_npu", "fake_npu_plugin:NOT_A_PLATFORM", "expected an ir_dispatch.Platform"),
    ],
)
def test_a_bad_platform_plugin_is_logged_and_skipped(
    plugin_points: list[EntryPoint],
    caplog: pytest.LogCaptureFixture,
    name: str,
    value: str,
    error: str,
) -> None:
    plugin_points.append(_point(name, value))
    with caplog.at_level(logging.ERROR, logger="ir_dispatch"):
        loads = {(load.name, load.value): load for load in ir_dispatch.platform_loads()}
    load = loads[(name, value)]
    assert load.status == "failed"
    assert error in load.error
    assert any(name in record.getMessage() for record in caplog.records)
    # the process goes on, on the platform it had
    assert PLATFORMS.get("cpu").name == "cpu"
    assert ir_dispatch.detect_platform().name == "cpu"
    assert ir_dispatch.select("rms_norm", torch.randn(2, 8), None, 1e-6).provider == "native"


def test_unknown_ir_platform_lists_the_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IR_PLATFORM", "tpu")
    detect_platform.cache_clear()
    with pytest.raises(ValueError, match=r"IR_PLATFORM='tpu': unknown platform 'tpu'; installed "
                       r"platforms: cpu, cuda, rocm, (\w+, )*xpu"):  # fmt: skip
        ir_dispatch.detect_platform()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"name": "NPU"}, r"Platform.name: got 'NPU', expected lowercase"),
        ({"detect": True}, r"detect: got True, expected a callable"),
        ({"defaults": {"aot": {}}}, r"unknown mode 'aot'"),
        ({"defaults": {"eager": {"rms_norm": "triton"}}}, r"expected a non-empty list"),
        ({"defaults": {"eager": {"rms_norm": ["a", "a"]}}}, r"provider listed twice"),
        ({"passes": [1]}, r"passes: got \[1\], expected a sequence of callables"),
        ({"detect_rank": "1"}, r"detect_rank: got '1', expected an int"),
    ],
)
def test_platform_refuses_bad_fields(kwargs: dict[str, object], error: str) -> None:
    fields: dict[str, object] = {"name": "npu", "detect": lambda: False, **kwargs}
    with pytest.raises((TypeError, ValueError), match=error):
        Platform(**fields)  # type: ignore[arg-type]


INSTALLED = {ep.name for ep in entry_points(group="ir.platforms")}


@pytest.mark.skipif(
    "test_npu" not in INSTALLED,
    reason="the test platform distribution is not installed (nox installs it)",
)
def test_the_installed_test_platform_is_detected_and_its_kernels_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("IR_PLATFORM")
    monkeypatch.setenv("IR_TEST_NPU", "1")
    PLATFORMS.reset()
    detect_platform.cache_clear()
    with caplog.at_level(logging.ERROR, logger="ir_dispatch"):
        platform = ir_dispatch.detect_platform()
    assert platform.name == "test_npu"
    assert "ir-test-platform 0.1.0" in ir_dispatch.platform_origin()
    x = torch.randn(5, 32)
    assert ir_dispatch.select("rms_norm", x, None, 1e-6).provider == "test_npu"
    assert ir_dispatch.select("silu_and_mul", x).provider == "test_npu"
    with ir_dispatch.mode("inductor"):
        assert ir_dispatch.select("rms_norm", x, None, 1e-6).provider == "native"
    loads = {load.name: load for load in ir_dispatch.platform_loads()}
    assert loads["test_npu"].status == "loaded"
    assert loads["cuda"].status == "failed"  # the impostor: the name is ir-dispatch's
    assert PLATFORMS.get("cuda").description.startswith("NVIDIA")
    assert loads["test_broken"].status == "failed"
    assert "libfancykernels.so" in loads["test_broken"].error
    PLATFORMS.reset()
