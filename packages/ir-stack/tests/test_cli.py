"""The ir-stack command."""

import os
import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ir_stack.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def test_demo_runs_every_mode_and_agrees() -> None:
    done = run("demo")
    assert done.returncode == 0, done.stdout + done.stderr
    for mode in ("eager native", "eager, selected kernels", "ir_stack.compile"):
        assert mode in done.stdout
    assert "all modes agree" in done.stdout


def test_explain_one_op_and_all() -> None:
    done = run("explain", "rms_norm", "--ir-op-priority.rms_norm=native")
    assert done.returncode == 0, done.stderr
    assert "ir.rms_norm" in done.stdout
    assert "native: selected" not in done.stdout  # no arguments: eligibility only
    assert "native: eligible" in done.stdout
    done = run("explain")
    assert done.returncode == 0, done.stderr
    assert "silu_and_mul" in done.stdout
