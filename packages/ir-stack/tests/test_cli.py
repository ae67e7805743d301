"""The ir-stack command."""

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import ir_dispatch.discovery


def run(
    *args: str, module: str = "ir_stack.cli", gpus: bool = True, **env_vars: str
) -> subprocess.CompletedProcess[str]:
    """`module` run with `args` in a child process, `env_vars` added to its environment;
    ``gpus=False`` hides the GPUs from it, and Triton's interpreter unless `env_vars` asks for
    it, for tests of the CPU path that must hold on GPU machines and under a caller's
    ``TRITON_INTERPRET=1`` too."""
    env = {**os.environ, "COLUMNS": "200"}
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
        env.pop("TRITON_INTERPRET", None)
    env.update(env_vars)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )


def test_demo_runs_every_mode_under_the_priority_flags() -> None:
    """On the CPU with Triton's interpreter (the GPU path: `test_gpu_models.py`): every mode
    agrees with eager native, and each mode but eager native runs the provider the flag puts
    first, and says so in its column of the providers table, the compiled ones too
    (their passes run every time, not served from Inductor's caches). The demo had cleared
    the flags' priority before its modes, and printed nothing for compiled graphs a cache
    served."""
    pytest.importorskip("ir_kernels_triton")
    flag = "--ir-op-priority.silu_and_mul=triton,native"
    for attempt in ("first", "caches warm"):
        done = run("demo", flag, gpus=False, TRITON_INTERPRET="1")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "all modes agree" in done.stdout
        for mode in ("eager native", "eager, selected kernels", "ir_stack.compile", "piecewise"):
            assert mode in done.stdout
        rows = {
            cells[0]: cells[1:]
            for line in done.stdout.splitlines()
            if line.startswith("│ ")
            for cells in [[cell.strip() for cell in line.strip("│ ").split("│")]]
        }
        assert rows["silu_and_mul"] == ["native", "triton", "triton", "triton"], attempt
        assert rows["rms_norm"] == ["native"] * 4, attempt


def explained_rows(stdout: str) -> dict[str, list[str]]:
    """The rows of the providers table: first cell (op or provider) to the other two."""
    rows = {}
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if len(cells) == 3 and cells[0]:
            rows[cells[0]] = cells[1:]
    return rows


def test_explain_one_op_and_all() -> None:
    done = run("explain", "rms_norm", "--ir-op-priority.rms_norm=native")
    assert done.returncode == 0, done.stderr
    rows = explained_rows(done.stdout)
    assert rows["rms_norm"] == ["", ""]
    assert rows["native"][0] == "1"
    assert rows["native"][1].startswith("used, unless its supports_args")
    assert "silu_and_mul" not in rows
    done = run("explain")
    assert done.returncode == 0, done.stderr
    assert "silu_and_mul" in explained_rows(done.stdout)


def test_explain_names_the_platform_and_where_its_defaults_come_from() -> None:
    done = run("explain", "rms_norm", gpus=False, IR_PLATFORM="rocm")
    assert done.returncode == 0, done.stderr
    assert "platform: rocm (set by IR_PLATFORM; built into ir-dispatch)" in done.stdout
    rows = explained_rows(done.stdout)
    assert rows["triton"][0] == "1"  # ROCm's default list: triton, native
    done = run("explain", "rms_norm", gpus=False, IR_PLATFORM="")
    assert "platform: cpu (detected; built into ir-dispatch)" in done.stdout
    done = run("explain", "rms_norm", gpus=False, IR_PLATFORM="tpu")
    assert done.returncode == 2
    assert "IR_PLATFORM='tpu': unknown platform 'tpu'; installed platforms: cpu, cuda" in (
        done.stderr
    )


def test_explain_says_why_a_provider_cannot_run_here() -> None:
    """Without a GPU the kernel providers are left out of the list, each with its reason
    (the one-op form had printed the effective list alone, which named neither)."""
    done = run("explain", "rms_norm", gpus=False)
    assert done.returncode == 0, done.stderr
    rows = explained_rows(done.stdout)
    assert rows["triton"][0] == "-"
    assert rows["triton"][1].startswith("not supported here (no GPU visible to torch")
    # ir-stack imports the Triton provider itself; the CUDA one is found by its entry point
    # alone, which a source tree on PYTHONPATH (the GPU machine's runs) does not install
    if "cuda" in {ep.name for ep in entry_points(group=ir_dispatch.discovery.GROUP)}:
        assert rows["cuda"][0] == "-"
        assert rows["cuda"][1].startswith("not supported here (")


def test_explain_of_an_unknown_op_names_the_known_ones() -> None:
    done = run("explain", "rms_nrom")
    assert done.returncode == 2
    assert "unknown op 'rms_nrom'; known ops: all_gather, all_reduce," in done.stderr
    assert "rms_norm," in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--ir-op-priority.rms_nrom=native", "unknown op 'rms_nrom'; known ops:"),
        ("--ir-op-priority.rms_norm=warp", "unknown provider 'warp'; known providers:"),
        ("--ir-op-priority.rms_norm", "missing the list of providers"),
    ],
)
def test_a_bad_priority_flag_is_a_usage_error(flag: str, message: str) -> None:
    """It had ended in a traceback of the ValueError. (The broken test provider, where
    installed, is disabled: its load failure is logged with its own traceback.)"""
    done = run("explain", flag, IR_DISABLE_PROVIDERS="test_broken")
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "IR_STACK_CONFIG",
            "{tmp}/missing.toml",
            "IR_STACK_CONFIG='{tmp}/missing.toml': cannot read",
        ),
        (
            "IR_STACK_CONFIG",
            "{tmp}",
            "IR_STACK_CONFIG='{tmp}': cannot read the file: Is a directory",
        ),
        ("IR_STACK_CONFIG", "{tmp}/bad.toml", "IR_STACK_CONFIG='{tmp}/bad.toml': not valid TOML:"),
        ("IR_STACK_CONFIG", "{tmp}/typed.toml", "passes.fuse: got 'perhaps', expected one of"),
        ("IR_OP_PRIORITY", "rms_norm", "IR_OP_PRIORITY: entry 'rms_norm' is not of the form"),
        ("IR_OP_PRIORITY", "rms_norm=warp", "unknown provider 'warp'"),
        ("IR_BATCH_INVARIANT", "maybe", "IR_BATCH_INVARIANT: got 'maybe', expected one of 1/0"),
    ],
    ids=["missing", "a-directory", "syntax", "bad-value", "priority", "provider", "switch"],
)
def test_a_bad_configuration_variable_is_a_one_line_error(
    tmp_path: Path, variable: str, value: str, message: str
) -> None:
    """Each had ended the command with a traceback (IR_OP_PRIORITY at the import of
    ir_dispatch), or a TOML error that named neither the variable nor the file. The broken test
    provider, where installed, is disabled: its load failure is logged with its traceback."""
    (tmp_path / "bad.toml").write_text("[passes]\nfuse = true\nlower =\n")
    (tmp_path / "typed.toml").write_text('[passes]\nfuse = "perhaps"\n')
    value, message = value.format(tmp=tmp_path), message.format(tmp=tmp_path)
    done = run(
        "explain", "rms_norm", gpus=False, IR_DISABLE_PROVIDERS="test_broken", **{variable: value}
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("ir_dispatch: ")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("ir-stack: error: ")
    assert message in lines[0]
    if message.endswith("not valid TOML:"):
        assert "line 3" in lines[0]


def test_explain_takes_a_priority_flag_in_two_arguments() -> None:
    """``--ir-op-priority.<op> <providers>``: the value is the flag's, not the op to explain
    (the command read it as the op name and failed on "unknown op 'native'"). GPUs hidden:
    on a GPU the platform's defaults, Triton among them, follow the flag's list."""
    done = run("explain", "rms_norm", "--ir-op-priority.rms_norm", "native", gpus=False)
    assert done.returncode == 0, done.stderr
    rows = explained_rows(done.stdout)
    assert rows["native"][1].startswith("used, unless its supports_args")
    assert rows["triton"][0] == "-"


def fusion_rows(stdout: str) -> dict[str, list[str]]:
    """The rows of explain's fusions table: switch to on, from, tokens."""
    rows = {}
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if len(cells) == 5 and cells[0] and cells[1] in ("on", "off"):
            rows[cells[0]] = cells[1:4]
    return rows


def test_explain_shows_the_fusions_of_the_configuration_in_force() -> None:
    done = run("explain", "rms_norm")
    assert done.returncode == 0, done.stderr
    assert "fusions at -O2" in done.stdout
    rows = fusion_rows(done.stdout)
    assert rows == {
        "fuse_residual_add": ["on", "level 2", "no limit"],
        "fuse_norm_quant": ["on", "level 2", "no limit"],
        "fuse_act_quant": ["on", "level 2", "no limit"],
        "fuse_rope_kvcache": ["on", "level 2", "<= 256"],
        "enable_qk_norm_rope_fusion": ["on", "level 2", "<= 256"],
        "fuse_allreduce_rms": ["on", "level 2", "no limit"],
        "enable_sp": ["off", "off unless set", "no limit"],
        "fuse_gemm_comms": ["off", "off unless set", "no limit"],
    }
    done = run(
        "explain", "rms_norm", "-O1", "--pass.enable_qk_norm_rope_fusion=true",
        "--pass.qk_norm_rope_max_tokens=none", "--pass.fuse_act_quant=off",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "fusions at -O1" in done.stdout
    rows = fusion_rows(done.stdout)
    assert rows["fuse_norm_quant"] == ["on", "level 1", "no limit"]
    assert rows["fuse_act_quant"] == ["off", "set", "no limit"]
    assert rows["fuse_rope_kvcache"] == ["off", "level 1", "<= 256"]
    assert rows["enable_qk_norm_rope_fusion"] == ["on", "set", "no limit"]
    done = run("explain", "rms_norm", "--pass.fuse_gemm_comms=true", "--pass.sp_min_token_num=512")
    assert done.returncode == 0, done.stderr
    rows = fusion_rows(done.stdout)
    assert rows["enable_sp"] == ["on", "fuse_gemm_comms", ">= 512"]
    assert rows["fuse_gemm_comms"] == ["on", "set", ">= 512"]


def test_a_bad_pass_flag_is_a_usage_error() -> None:
    done = run("explain", "--pass.level=x")
    assert done.returncode == 2
    assert "passes.level: got 'x', expected an integer" in done.stderr
    assert "Traceback" not in done.stderr


def test_demo_over_two_ranks_agrees_with_the_single_device_model() -> None:
    """``demo --tp 2`` starts two gloo processes on the CPU; every mode of the tensor-parallel
    model agrees with the single-device model, and the all-reduces ran."""
    done = run("demo", "--tp", "2", gpus=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tiny Llama over 2 ranks (gloo, cpu)" in done.stdout
    assert "all modes agree" in done.stdout
    assert "│ all_reduce " in done.stdout


def test_demo_refuses_a_world_the_model_does_not_divide_into() -> None:
    done = run("demo", "--tp", "3", gpus=False)
    assert done.returncode == 2
    assert "num_heads=4 does not divide among them" in done.stdout
