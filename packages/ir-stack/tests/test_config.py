"""Config from code, TOML, environment and command line."""

from pathlib import Path

import pytest
import torch

import ir_dispatch
from ir_passes import PassConfig
from ir_stack import Config


def test_toml_then_env_then_cli(tmp_path: Path) -> None:
    path = tmp_path / "ir.toml"
    path.write_text(
        '[priority]\nrms_norm = ["triton", "native"]\nsilu_and_mul = ["native"]\n'
        "[passes]\nforce_fusion = true\n"
    )
    env = {"IR_STACK_CONFIG": str(path), "IR_OP_PRIORITY": "silu_and_mul=triton"}
    config = Config.load(["--ir-op-priority.rms_norm=native"], env=env)
    assert config.priority == {"rms_norm": ["native"], "silu_and_mul": ["triton"]}
    assert config.passes == PassConfig(force_fusion=True)


def test_bad_toml_names_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "ir.toml"
    path.write_text("[priorities]\nrms_norm = ['native']\n")
    with pytest.raises(ValueError, match="unknown sections \\['priorities'\\]"):
        Config.from_toml(path)
    path.write_text("[passes]\nfuse_everything = true\n")
    with pytest.raises(ValueError, match="unknown pass switches \\['fuse_everything'\\]"):
        Config.from_toml(path)
    path.write_text("[priority]\nrms_norm = ['tritn']\n")
    with pytest.raises(ValueError, match="unknown provider 'tritn'"):
        Config.from_toml(path)


def test_apply_sets_process_priorities() -> None:
    Config(priority={"rms_norm": ["triton"]}).apply()
    try:
        assert ir_dispatch.effective_priority("rms_norm")[0] == "triton"
    finally:
        ir_dispatch.set_priority()


def test_compile_keeps_the_priority_in_force_unless_its_config_names_one() -> None:
    """`ir_stack.compile` with no config (or one without priorities) leaves what
    `set_priority` set; a config that names priorities replaces it, as `Config.apply`."""
    import ir_stack

    def model(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    ir_dispatch.set_priority(rms_norm=["native"])
    try:
        ir_stack.compile(model)
        ir_stack.compile(model, Config())
        assert ir_dispatch.user_priority() == {"rms_norm": ["native"]}
        ir_stack.compile(model, Config(priority={"silu_and_mul": ["native"]}))
        assert ir_dispatch.user_priority() == {"silu_and_mul": ["native"]}
    finally:
        ir_dispatch.set_priority()


def test_piecewise_table(tmp_path: Path) -> None:
    from ir_piecewise import CompilationConfig, CUDAGraphMode

    path = tmp_path / "ir.toml"
    path.write_text(
        '[piecewise]\ncudagraph_mode = "piecewise"\ncompile_sizes = [1, 8]\n'
        "cudagraph_capture_sizes = [1, 2, 4]\n"
    )
    config = Config.from_toml(path)
    assert config.piecewise == CompilationConfig(
        cudagraph_mode=CUDAGraphMode.PIECEWISE,
        compile_sizes=(1, 8),
        cudagraph_capture_sizes=(1, 2, 4),
    )
    path.write_text('[piecewise]\ncudagraph_mode = "sometimes"\n')
    with pytest.raises(ValueError, match="cudagraph_mode: got 'sometimes'"):
        Config.from_toml(path)
    path.write_text("[piecewise]\ngraphs = true\n")
    with pytest.raises(ValueError, match="unknown piecewise settings \\['graphs'\\]"):
        Config.from_toml(path)
