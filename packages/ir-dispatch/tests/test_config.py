"""Priorities from the command line and the environment; start-up environment variables."""

import os
import subprocess
import sys

import pytest

import ir_dispatch


@pytest.mark.usefixtures("markers")
def test_parse_args_forms() -> None:
    argv = [
        "serve",
        "--ir-op-priority.rms_norm=t_one,native",
        "--other=1",
        "--ir-op-priority.silu_and_mul",
        "native",
    ]
    assert ir_dispatch.parse_priority_args(argv) == {
        "rms_norm": ["t_one", "native"],
        "silu_and_mul": ["native"],
    }
    assert ir_dispatch.parse_priority_args(["--ir-op-priority.rms_norm= t_one , t_two "]) == {
        "rms_norm": ["t_one", "t_two"]
    }
    # the other arguments, in order, without the flags or the value of the two-argument form
    assert ir_dispatch.split_priority_args(argv) == (
        {"rms_norm": ["t_one", "native"], "silu_and_mul": ["native"]},
        ["serve", "--other=1"],
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ir-op-priority=rms_norm=native"], "op name after a dot"),
        (["--ir-op-priority.rms_norm="], "comma-separated list"),
        (["--ir-op-priority.rms_norm=native,,triton"], "comma-separated list"),
        (["--ir-op-priority.rms_norm"], "missing the list"),
        (["--ir-op-priority.rms_nrom=native"], "unknown op 'rms_nrom'"),
        (["--ir-op-priority.rms_norm=bogus"], "unknown provider 'bogus'"),
        (["--ir-op-priority.rms_norm=native", "--ir-op-priority.rms_norm=triton"], "twice"),
    ],
)
def test_parse_args_malformed(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ir_dispatch.parse_priority_args(argv)


def test_parse_env_forms() -> None:
    assert ir_dispatch.parse_priority_env("rms_norm=triton,native; silu_and_mul = native ;") == {
        "rms_norm": ["triton", "native"],
        "silu_and_mul": ["native"],
    }
    assert ir_dispatch.parse_priority_env("") == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("rms_norm", "not of the form"),
        ("=native", "not of the form"),
        ("rms_norm=", "comma-separated"),
        ("rms_norm=native;rms_norm=triton", "twice"),
        ("nope=native", "unknown op"),
        ("rms_norm=nope", "unknown provider"),
    ],
)
def test_parse_env_malformed(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ir_dispatch.parse_priority_env(value)


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )


def test_environment_read_at_startup() -> None:
    code = (
        "import ir_dispatch; print(ir_dispatch.user_priority()); "
        "print(ir_dispatch.batch_invariant())"
    )
    done = run_python(code, IR_OP_PRIORITY="rms_norm=triton,native", IR_BATCH_INVARIANT="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["{'rms_norm': ['triton', 'native']}", "True"]


def test_malformed_environment_fails_loudly() -> None:
    """At the first use of the selection state, and at every use after it (nothing applies
    while a variable is malformed); not at import, so that a command importing ir_dispatch can
    report it as an error of its own."""
    code = (
        "import ir_dispatch\n"
        "for _ in range(2):\n"
        "    try:\n"
        "        ir_dispatch.effective_priority('rms_norm')\n"
        "    except ValueError as error:\n"
        "        print(error)\n"
        "ir_dispatch.set_priority()\n"
    )
    done = run_python(code, IR_OP_PRIORITY="rms_norm")
    assert done.returncode != 0
    message = "IR_OP_PRIORITY: entry 'rms_norm' is not of the form"
    assert done.stdout.count(message) == 2
    assert message in done.stderr


def test_module_prints_table() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ir_dispatch"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "160"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "fused_add_rms_norm" in done.stdout
    assert "op, then its providers" in done.stdout
    assert "used, unless its supports_args rejects the call" in done.stdout
