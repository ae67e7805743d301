"""``python -m ir_dispatch``: the table, restricted to some ops, with priority flags in force."""

import pytest

import ir_dispatch
from ir_dispatch.report import main


def _exit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, str, str]:
    """The exit status of a command that exits (help, refusals), then its stdout and stderr."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    out, err = capsys.readouterr()
    return stop.value.code, out, err


def test_help_names_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = _exit(["-h"], capsys)
    assert code == 0
    assert "python -m ir_dispatch" in text
    assert "OP" in text
    assert "--ir-op-priority" in text


def test_one_op_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["silu_and_mul"]) == 0
    text = capsys.readouterr().out
    assert "silu_and_mul" in text
    assert "rms_norm" not in text
    assert "rotary_embedding" not in text


def test_priority_flag_is_shown_in_force(capsys: pytest.CaptureFixture[str], markers: None) -> None:
    assert main(["rms_norm", "--ir-op-priority.rms_norm", "t_one,native"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "│" in line]
    t_one = next(row for row in rows if "t_one" in row)
    assert "│ 1 │" in t_one
    assert "used" in t_one
    # the flag was scoped to the command: the process-wide priority is untouched
    assert ir_dispatch.effective_priority("rms_norm")[0] != "t_one"


def test_unknown_op_is_refused_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _exit(["rms_norms"], capsys)
    assert code == 2
    assert "unknown op 'rms_norms'" in err
    assert "fused_add_rms_norm" in err


def test_bad_priority_flag_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _exit(["--ir-op-priority.rms_norm=no_such_provider"], capsys)
    assert code == 2
    assert "no_such_provider" in err
