"""The e2e suite's command line on the CPU: ``--append`` adds modes to a result of the same
model and sizes, and refuses one of other sizes; ``--hf`` is checked before anything runs."""

from pathlib import Path

import pytest

from ir_stack.bench import e2e, results

TINY = ["--model", "tiny", "--quick", "--no-fusion-rows", "--hf", ""]


def test_append_keeps_the_modes_not_run_again(tmp_path: Path) -> None:
    assert e2e.main(["--out", str(tmp_path), *TINY, "--modes", "eager native"]) == 0
    (path,) = tmp_path.glob("e2e-*.json")
    first = results.load(path)
    assert e2e.main(["--out", str(tmp_path), *TINY, "--modes", "ir_stack", "--append"]) == 0
    merged = results.load(path)
    assert {r["mode"] for r in merged.rows} == {"eager native", "ir_stack"}
    kept = [r for r in merged.rows if r["mode"] == "eager native"]
    assert kept == [r for r in first.rows if r["mode"] == "eager native"]


def test_append_refuses_a_result_of_other_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert e2e.main(["--out", str(tmp_path), *TINY, "--modes", "eager native"]) == 0
    other = ["--context", "8", "--modes", "ir_stack", "--append"]
    assert e2e.main(["--out", str(tmp_path), *TINY, *other]) == 2
    assert "--append:" in capsys.readouterr().out


def test_transformers_models_are_named_from_the_list_and_need_a_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        e2e.parse_args(["--hf", "llama,gpt2"])
    assert "unknown ['gpt2']; expected some of ['llama', 'qwen3']" in capsys.readouterr().err
    if not e2e.torch.cuda.is_available():
        with pytest.raises(SystemExit):
            e2e.parse_args(["--hf", "llama"])
        assert "run on a GPU" in capsys.readouterr().err
    assert e2e.parse_args(["--hf", ""]).hf == []
