"""Config from code, TOML, environment and command line."""

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    with pytest.raises(ValueError, match="unknown pass setting 'fuse_everything'"):
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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('fuse_norm_quant = "off"', PassConfig(fuse_norm_quant=False)),
        ('fuse_norm_quant = "No"', PassConfig(fuse_norm_quant=False)),
        ("fuse_norm_quant = 0", PassConfig(fuse_norm_quant=False)),
        ('force_fusion = "on"', PassConfig(force_fusion=True)),
        ("force_fusion = true", PassConfig(force_fusion=True)),
    ],
)
def test_pass_switches_given_as_strings(tmp_path: Path, text: str, expected: PassConfig) -> None:
    """A switch given as ``"off"`` had been kept as the string "off", which counts as on."""
    path = tmp_path / "ir.toml"
    path.write_text(f"[passes]\n{text}\n")
    assert Config.from_toml(path).passes == expected


def test_piecewise_switches_given_as_strings(tmp_path: Path) -> None:
    from ir_piecewise import CompilationConfig

    path = tmp_path / "ir.toml"
    path.write_text('[piecewise]\ncache = "off"\ncheck_guards = "yes"\n')
    assert Config.from_toml(path).piecewise == CompilationConfig(cache=False, check_guards=True)


EXPECTED_SWITCH = "expected one of 1/0, true/false"
EXPECTED_PROVIDERS = "expected a list of provider names"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[passes]\nfuse_norm_quant = "maybe"',
            rf"passes\.fuse_norm_quant: got 'maybe', {EXPECTED_SWITCH}",
        ),
        ("[passes]\nlower = 2", rf"passes\.lower: got 2, {EXPECTED_SWITCH}"),
        ("[passes]\ndebug_dir = 3", r"passes\.debug_dir: got 3, expected a str or none"),
        (
            '[piecewise]\ncache = "sometimes"',
            rf"piecewise\.cache: got 'sometimes', {EXPECTED_SWITCH}",
        ),
        ('[piecewise]\ncompile_sizes = "8"', r"piecewise\.compile_sizes: got '8', expected a list"),
        ('[piecewise]\ncompile_sizes = [1, "8"]', r"piecewise\.compile_sizes: got \[1, '8'\]"),
        ('[piecewise]\nmax_capture_size = "256"', r"piecewise\.max_capture_size: got '256'"),
        ("[piecewise]\nbackend = 3", r"piecewise\.backend: got 3, expected a str"),
        (
            '[piecewise]\nbackend = "tvm"',
            r"piecewise\.backend: unknown piece compiler 'tvm'; installed piece compilers: eager, "
            r"inductor",
        ),
        (
            "[piecewise]\ninductor_compile_config = 3",
            r"piecewise\.inductor_compile_config: got 3, expected a table of names to values",
        ),
        (
            "[piecewise.inductor_compile_config]\nmax_autotuen = true",
            r"piecewise\.inductor_compile_config: unknown Inductor option 'max_autotuen'",
        ),
        ("[piecewise]\ncache_dir = 5", r"piecewise\.cache_dir: got 5, expected a path"),
        ("[piecewise]\nsplitting_ops = 5", r"piecewise\.splitting_ops: got 5, expected a list"),
        (
            '[priority]\nrms_norm = "native"',
            rf"priority\.rms_norm: got 'native', {EXPECTED_PROVIDERS}",
        ),
        ("[priority]\nrms_norm = [1]", rf"priority\.rms_norm: got \[1\], {EXPECTED_PROVIDERS}"),
        ('priority = "native"', r"priority: got 'native', expected a table"),
    ],
)
def test_toml_values_of_the_wrong_type_are_refused(tmp_path: Path, text: str, message: str) -> None:
    """Such values had reached the dataclasses as they were (``compile_sizes = "8"``) or been
    misread (``rms_norm = "native"`` as the providers n, a, t, i, v, e)."""
    path = tmp_path / "ir.toml"
    path.write_text(text + "\n")
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: {message}"):
        Config.from_toml(path)


def test_a_toml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "ir.toml"
    path.write_text('[passes]\nfuse_norm_quant = true\nforce_fusion = "on\n')
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: not valid TOML: .*line 3"):
        Config.from_toml(path)


def _unchecked_passes(**fields: Any) -> PassConfig:
    """A PassConfig holding values its own checks would refuse, as code that bypasses them
    (``object.__setattr__`` on the frozen dataclass) leaves it."""
    passes = PassConfig()
    for name, value in fields.items():
        object.__setattr__(passes, name, value)
    return passes


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"priority": {"rms_norm": "native"}},
            r"\.priority\['rms_norm'\]: got 'native', expected a",
        ),
        (
            {"priority": {"rms_norm": ["native", 3]}},
            r"\.priority\['rms_norm'\]: got \['native', 3\]",
        ),
        ({"priority": ["rms_norm"]}, r"\.priority: got \['rms_norm'\], expected a mapping"),
        ({"priority": {3: ["native"]}}, r"\.priority: got the key 3, expected an op name"),
        ({"passes": {"lower": True}}, r"\.passes: got \{'lower': True\}, expected an"),
        (
            {"passes": _unchecked_passes(lower="off")},
            r"\.passes\.lower: got 'off', expected a bool",
        ),
        ({"piecewise": "graphs"}, r"\.piecewise: got 'graphs', expected an ir_piecewise\.Compila"),
    ],
)
def test_config_checks_its_value_types(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=f"^Config{message}"):
        Config(**kwargs)


def test_config_checks_piecewise_switch_types() -> None:
    from ir_piecewise import CompilationConfig

    with pytest.raises(TypeError, match=r"^Config\.piecewise\.cache: got 'no', expected a bool"):
        Config(piecewise=CompilationConfig(cache="no"))  # type: ignore[arg-type]


def test_config_takes_ops_as_priority_keys() -> None:
    from ir_spec import ops

    config = Config(priority={ops.rms_norm: ("native",)})  # type: ignore[dict-item]
    assert config.priority == {"rms_norm": ["native"]}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "cannot read the file: .*No such file"),
        (lambda p: p.mkdir(), "cannot read the file: .*Is a directory"),
        (lambda p: p.write_text("[passes\n"), "not valid TOML: .*line 1"),
        (
            lambda p: p.write_text('[passes]\nfuse_norm_quant = "perhaps"\n'),
            r"passes\.fuse_norm_quant: got 'perhaps'",
        ),
    ],
    ids=["missing", "a-directory", "syntax", "bad-value"],
)
def test_load_names_the_variable_of_a_bad_config_file(
    tmp_path: Path, make: Callable[[Path], object], message: str
) -> None:
    path = tmp_path / "ir.toml"
    make(path)
    with pytest.raises(
        ValueError, match=f"^IR_STACK_CONFIG={re.escape(repr(str(path)))}: {message}"
    ):
        Config.load([], env={"IR_STACK_CONFIG": str(path)})


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
        "fuse_residual_add", "fuse_norm_quant", "fuse_rope_kvcache", "fuse_allreduce_rms",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("level = 7", "level got 7; expected one of 0, 1, 2, 3"),
        ('level = "2"', r"passes\.level: got '2', expected an integer$"),
        ('fuse_norm_quant = "perhaps"', r"passes\.fuse_norm_quant: got 'perhaps', expected one of"),
        ("rope_kvcache_max_tokens = 0", "rope_kvcache_max_tokens got 0; expected a positive"),
        ("force_fusion = 2", r"passes\.force_fusion: got 2, expected one of"),
        ('lower = "none"', r"passes\.lower: got 'none', expected a value \(not none\)"),
        ("token_range = [1, 8]", "unknown pass setting 'token_range'"),
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
