"""Config from code, TOML, environment and command line."""

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('fuse = "off"', PassConfig(fuse=False)),
        ('fuse = "No"', PassConfig(fuse=False)),
        ("fuse = 0", PassConfig(fuse=False)),
        ('force_fusion = "on"', PassConfig(force_fusion=True)),
        ("force_fusion = true", PassConfig(force_fusion=True)),
    ],
)
def test_pass_switches_given_as_strings(tmp_path: Path, text: str, expected: PassConfig) -> None:
    """``fuse = "off"`` had been kept as the string "off", which counts as on."""
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
        ('[passes]\nfuse = "maybe"', rf"passes\.fuse: got 'maybe', {EXPECTED_SWITCH}"),
        ("[passes]\nlower = 2", rf"passes\.lower: got 2, {EXPECTED_SWITCH}"),
        ("[passes]\ndebug_dir = 3", r"passes\.debug_dir: got 3, expected a str or none"),
        (
            '[piecewise]\ncache = "sometimes"',
            rf"piecewise\.cache: got 'sometimes', {EXPECTED_SWITCH}",
        ),
        ('[piecewise]\ncompile_sizes = "8"', r"piecewise\.compile_sizes: got '8', expected a list"),
        ('[piecewise]\ncompile_sizes = [1, "8"]', r"piecewise\.compile_sizes: got \[1, '8'\]"),
        ('[piecewise]\nmax_capture_size = "256"', r"piecewise\.max_capture_size: got '256'"),
        ("[piecewise]\nbackend = 3", r"piecewise\.backend: got 3, expected 'inductor' or 'eager'"),
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
    path.write_text('[passes]\nfuse = true\nforce_fusion = "on\n')
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: not valid TOML: .*line 3"):
        Config.from_toml(path)


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
        ({"passes": {"fuse": True}}, r"\.passes: got \{'fuse': True\}, expected an"),
        ({"passes": PassConfig(fuse="off")}, r"\.passes\.fuse: got 'off', expected a bool"),  # type: ignore[arg-type]
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
        (lambda p: p.write_text('[passes]\nfuse = "perhaps"\n'), r"passes\.fuse: got 'perhaps'"),
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
