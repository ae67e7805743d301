"""The ir-stack command."""

import json
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
    assert "unknown op 'rms_nrom'; known ops: dynamic_quant_fp8" in done.stderr
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
    """It had ended in a traceback of the ValueError."""
    done = run("explain", flag)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_explain_takes_a_priority_flag_in_two_arguments() -> None:
    """``--ir-op-priority.<op> <providers>``: the value is the flag's, not the op to explain
    (the command read it as the op name and failed on "unknown op 'native'"). GPUs hidden:
    on a GPU the platform's defaults, Triton among them, follow the flag's list."""
    done = run("explain", "rms_norm", "--ir-op-priority.rms_norm", "native", gpus=False)
    assert done.returncode == 0, done.stderr
    rows = explained_rows(done.stdout)
    assert rows["native"][1].startswith("used, unless its supports_args")
    assert rows["triton"][0] == "-"


def test_bench_of_kernels_alone_fails_without_a_gpu(tmp_path: Path) -> None:
    """Asked for by name, a kernel benchmark that cannot run here fails rather than skips."""
    done = run("bench", "--only", "kernels", "--out", str(tmp_path / "unused"), gpus=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no CUDA GPU here" in done.stdout
    assert not (tmp_path / "unused").exists()


def test_e2e_benchmark_writes_json_markdown_and_plot(tmp_path: Path) -> None:
    """On the CPU (GPUs hidden), where the tiny model's modes agree within 1e-4."""
    modes = "eager native,eager best kernels,torch.compile,ir_stack"
    done = run(
        "--out", str(tmp_path), "--model", "tiny", "--batches", "1,3", "--prefill", "8",
        "--context", "8", "--iters", "1", "--modes", modes, "--skip-startup",
        module="ir_stack.bench.e2e", gpus=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    result = json.loads((tmp_path / "e2e-tiny-cpu.json").read_text())
    cells = {(r["mode"], r["workload"]) for r in result["rows"]}
    assert cells == {
        (m, w) for m in modes.split(",") for w in ("decode b=1", "decode b=3", "prefill 8")
    }
    assert all(r["max_abs_error"] < 1e-4 for r in result["rows"])
    table = (tmp_path / "e2e-tiny-cpu.md").read_text()
    assert "| ir_stack |" in table
    assert (tmp_path / "e2e-tiny-cpu.png").stat().st_size > 0


def test_e2e_benchmark_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    from ir_stack.bench import e2e

    with pytest.raises(SystemExit):
        e2e.main(["--out", "x", "--modes", "eager native,warp drive"])
    assert "--modes: unknown ['warp drive']" in capsys.readouterr().err


def fusion_rows(stdout: str) -> dict[str, list[str]]:
    """The rows of explain's fusions table: switch to on, from, max tokens."""
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
        "fuse_rope_kvcache": ["on", "level 2", "256"],
        "enable_qk_norm_rope_fusion": ["on", "level 2", "256"],
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
    assert rows["fuse_rope_kvcache"] == ["off", "level 1", "256"]
    assert rows["enable_qk_norm_rope_fusion"] == ["on", "set", "no limit"]


def test_a_bad_pass_flag_is_a_usage_error() -> None:
    done = run("explain", "--pass.level=x")
    assert done.returncode == 2
    assert "pass setting 'level' got 'x'; expected an integer" in done.stderr
    assert "Traceback" not in done.stderr
