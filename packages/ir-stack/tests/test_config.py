"""Config from code, TOML, environment and command line."""

import dataclasses
from pathlib import Path

import pytest
import torch

import ir_dispatch
from ir_passes import FUSION_SWITCHES, PassConfig
from ir_piecewise import CompilationConfig as Piecewise
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


def test_pass_configuration_from_code_toml_and_flags(tmp_path: Path) -> None:
    """Every PassConfig field from the ``[passes]`` table (a threshold of "none": no limit),
    then ``-O<level>`` and ``--pass.<field>=<value>`` flags; code builds the same object."""
    import ir_stack

    in_code = Config(passes=PassConfig(level=2, enable_qk_norm_rope_fusion=True))
    assert in_code.passes.fusion_on("enable_qk_norm_rope_fusion")
    compiled = ir_stack.compile(lambda x: x, dataclasses.replace(in_code, piecewise=Piecewise()))
    assert compiled.config.passes == in_code.passes  # type: ignore[attr-defined]

    path = tmp_path / "ir.toml"
    path.write_text(
        "[passes]\nlevel = 1\nfuse_rope_kvcache = true\nenable_qk_norm_rope_fusion = false\n"
        'rope_kvcache_max_tokens = "none"\nnorm_quant_max_tokens = 512\nforce_fusion = true\n'
        'eliminate_clones = false\ndebug_dir = "dumps"\n'
    )
    expected = PassConfig(
        level=1,
        fuse_rope_kvcache=True,
        enable_qk_norm_rope_fusion=False,
        rope_kvcache_max_tokens=None,
        norm_quant_max_tokens=512,
        force_fusion=True,
        eliminate_clones=False,
        debug_dir="dumps",
    )
    assert Config.from_toml(path).passes == expected
    env = {"IR_STACK_CONFIG": str(path)}
    flags = ["-O3", "--pass.fuse_act_quant=false", "--pass.norm_quant_max_tokens=none"]
    passes = Config.load(flags, env=env).passes
    assert passes == dataclasses.replace(
        expected, level=3, fuse_act_quant=False, norm_quant_max_tokens=None
    )
    assert [s for s in FUSION_SWITCHES if passes.fusion_on(s)] == [
        "fuse_residual_add", "fuse_norm_quant", "fuse_rope_kvcache",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("level = 7", "level got 7; expected one of 0, 1, 2, 3"),
        ('level = "2"', r"'level' got '2'; expected an integer$"),
        ('fuse_norm_quant = "yes"', "'fuse_norm_quant' got 'yes'; expected true or false"),
        ("rope_kvcache_max_tokens = 0", "rope_kvcache_max_tokens got 0; expected a positive"),
        ("force_fusion = 1", "'force_fusion' got 1; expected true or false$"),
        ('lower = "none"', "'lower' got 'none'; it takes no None"),
        ("token_range = [1, 8]", r"unknown pass switches \['token_range'\]"),
    ],
)
def test_pass_table_type_checks_name_the_file_and_field(
    tmp_path: Path, table: str, message: str
) -> None:
    path = tmp_path / "ir.toml"
    path.write_text(f"[passes]\n{table}\n")
    with pytest.raises(ValueError, match=message) as raised:
        Config.from_toml(path)
    assert str(path) in str(raised.value)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("-O4", "level got 4"),
        ("--pass.fuse_act_quant", "has no value; expected --pass.fuse_act_quant=<value>"),
        ("--pass.fuse_everything=true", "unknown pass setting 'fuse_everything'"),
        ("--pass.qk_norm_rope_max_tokens=many", "expected an integer .or none: no limit."),
    ],
)
def test_bad_pass_flags_name_the_problem(flag: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Config.load([flag], env={})
