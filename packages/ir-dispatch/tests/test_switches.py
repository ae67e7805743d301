"""Boolean switches: one parser for environment variables and configuration files, which says
``off`` is off and refuses what it does not know, naming where the value came from."""

import os
import re
import subprocess
import sys

import pytest

import ir_dispatch


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        *[(v, True) for v in ("1", "true", "TRUE", "yes", "Yes", "on", " ON ", True, 1)],
        *[(v, False) for v in ("0", "false", "False", "no", "NO", "off", "Off ", False, 0)],
    ],
)
def test_switch_values(value: object, expected: bool) -> None:
    assert ir_dispatch.parse_switch(value, "SOME_SWITCH") is expected


@pytest.mark.parametrize("value", ["maybe", "", "2", "enabled", 2, -1, 0.0, None, ["on"]])
def test_other_values_are_refused_naming_the_origin(value: object) -> None:
    expected = re.escape(f"passes.fuse in ir.toml: got {value!r}, expected one of 1/0, ")
    with pytest.raises(ValueError, match=f"^{expected}true/false, yes/no, on/off"):
        ir_dispatch.parse_switch(value, "passes.fuse in ir.toml")


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v for k, v in os.environ.items() if k not in ("IR_BATCH_INVARIANT", "IR_DISPATCH_STATS")
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**base, "IR_DISABLE_PROVIDERS": "test_broken", **env},
        timeout=120,
        check=False,
    )


READ_SWITCHES = (
    "import ir_dispatch, ir_spec, torch\n"
    "x = torch.randn(2, 8)\n"
    "ir_spec.ops.rms_norm(x, None, 1e-6); ir_spec.ops.rms_norm(x, None, 1e-6)\n"
    "print(ir_dispatch.batch_invariant(), ir_dispatch.stats())\n"
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("off", "False {}"), ("No", "False {}"), ("0", "False {}"), ("", "False {}"),
     ("on", "True {('rms_norm', 'native'): 2}"), ("YES", "True {('rms_norm', 'native'): 2}")],
)  # fmt: skip
def test_environment_switches(value: str, expected: str) -> None:
    """``IR_BATCH_INVARIANT=off`` had turned batch-invariant mode on (any value but "", 0,
    false and no did)."""
    done = run_python(READ_SWITCHES, IR_BATCH_INVARIANT=value, IR_DISPATCH_STATS=value)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


@pytest.mark.parametrize("variable", ["IR_BATCH_INVARIANT", "IR_DISPATCH_STATS"])
def test_a_bad_environment_switch_is_refused_naming_the_variable(variable: str) -> None:
    done = run_python(READ_SWITCHES, **{variable: "maybe"})
    assert done.returncode != 0
    assert f"ValueError: {variable}: got 'maybe', expected" in done.stderr


def test_environment_read_before_a_change_is_not_lost() -> None:
    """The variables apply before the first selection or change: a `set_priority` made first
    replaces IR_OP_PRIORITY's lists, as it did when they were read at import, and
    IR_BATCH_INVARIANT still holds."""
    code = (
        "import ir_dispatch\n"
        "ir_dispatch.set_priority(silu_and_mul=['native'])\n"
        "print(ir_dispatch.user_priority(), ir_dispatch.batch_invariant())\n"
    )
    done = run_python(code, IR_OP_PRIORITY="rms_norm=native", IR_BATCH_INVARIANT="on")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{'silu_and_mul': ['native']} True"
