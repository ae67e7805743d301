"""The Triton tuning script's logic on the CPU, with fake timings: the tie rule, the sweep, the
table it prints, and that the table it puts in force reaches the provider's rules.

The script is ``benchmarks/tuning/tune_triton.py``.
"""

import dataclasses
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ir_kernels_triton.launch import tuning
from ir_kernels_triton.norms import rules


def _load_script() -> ModuleType:
    """The script, loaded from the repository's benchmarks folder."""
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "tuning" / "tune_triton.py"
    spec = importlib.util.spec_from_file_location("triton_tuning_script", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


script = _load_script()
DEEP = tuning.device_class(37.2)


def table() -> Any:
    return script.Table(tuning.COMMON, DEEP)


def test_shapes_read_as_they_print() -> None:
    for entry in script.entries():
        for shape in entry.shapes:
            assert script.Shape.parse(str(shape)) == shape
    shape = script.Shape.parse("rms_norm 16x4096 float16 strided triton_inplace programmatic")
    assert (shape.tokens, shape.hidden, shape.dtype, shape.layout) == (
        16,
        4096,
        "float16",
        "strided",
    )
    assert shape.provider == "triton_inplace"
    assert shape.programmatic
    with pytest.raises(ValueError, match="unknown flag 'fast'"):
        script.Shape.parse("rms_norm 16x4096 fast")
    with pytest.raises(ValueError, match="expected TOKENSxHIDDEN"):
        script.Shape.parse("rms_norm 4096")


def test_every_table_entry_is_swept_once() -> None:
    """The sweep covers every field of `COMMON` and of a device class (but the class's name and
    floor), each once, with distinct candidates, on shapes of catalog ops."""
    from ir_spec import ops

    paths = [entry.path for entry in script.entries()]
    expected = {
        f"{group.name}.{field.name}"
        for group in dataclasses.fields(tuning.COMMON)
        for field in dataclasses.fields(getattr(tuning.COMMON, group.name))
    } | {
        f"device.{field.name}"
        for field in dataclasses.fields(tuning.DeviceClass)
        if field.name not in ("name", "min_gbps_per_sm")
    }
    assert len(paths) == len(set(paths))
    assert set(paths) == expected
    for entry in script.entries():
        assert len(set(entry.candidates)) == len(entry.candidates), entry.path
        assert entry.shapes, entry.path
        for shape in entry.shapes:
            assert hasattr(ops, shape.op), shape


@pytest.mark.parametrize(
    ("timings", "current", "expected"),
    [
        ({1: 10.0, 2: 9.9, 4: 9.0}, 1, 4),  # 10 % faster: taken
        ({1: 10.0, 2: 9.85, 4: 9.9}, 1, 1),  # within 2 %: a tie keeps the current value
        ({1: 1.0, 2: 0.95, 4: 0.92}, 1, 1),  # within 0.1 µs a shape: a tie
        ({1: 12.0, 2: 10.1, 4: 10.0}, 1, 2),  # 2 and 4 tie: the first listed (simpler)
        ({1: 12.0, 2: 10.0, 4: 10.0}, 4, 4),  # the current value among the fastest
    ],
)
def test_the_tie_rule(timings: dict[int, float], current: int, expected: int) -> None:
    assert script.choose(timings, current, 1) == expected


def test_a_tie_allows_a_tenth_of_a_microsecond_a_shape() -> None:
    assert script.ties(2.0, 2.25, 3)
    assert not script.ties(2.0, 2.35, 3)


def test_the_sweep_keeps_each_choice_for_the_entries_after_it() -> None:
    """Fake timings: the row split of 2 wins (10 % faster); the next entry is timed with it in
    the table; a candidate that cannot launch is left out."""
    seen: list[tuple[str, int, int]] = []

    def measure(trial: Any, shape: Any) -> float:
        split, rows_ = trial.get("norms.row_split"), trial.get("norms.wide_split_rows")
        seen.append((shape.op, split, rows_))
        if rows_ == 32:
            raise ValueError("too many programs")
        if split == 2:
            return 0.9 * 10.0 - (0.5 if rows_ == 8 else 0.0)
        return 10.0

    entries = [
        script.Entry("norms.row_split", (1, 2, 4), (script.Shape.parse("rms_norm 1x8192"),)),
        script.Entry(
            "norms.wide_split_rows", (8, 16, 32), (script.Shape.parse("rms_norm 8x8192"),)
        ),
    ]
    logged: list[str] = []
    tuned, results = script.sweep(entries, table(), measure, log=logged.append)
    assert tuned.get("norms.row_split") == 2
    assert tuned.get("norms.wide_split_rows") == 8
    assert tuned.common == dataclasses.replace(
        tuning.COMMON,
        norms=dataclasses.replace(tuning.COMMON.norms, row_split=2, wide_split_rows=8),
    )
    assert [r.chosen for r in results] == [2, 8]
    assert results[0].gain() == pytest.approx(0.1)
    # the second entry timed only with the first's choice
    assert {split for op, split, rows_ in seen[3:]} == {2}
    assert any("wide_split_rows=32: not launchable" in line for line in logged)
    assert dict(results[1].timings).keys() == {8, 16}


def test_the_printed_table_builds_the_tuned_table() -> None:
    """The report is Python: the device class and `COMMON` it prints evaluate, in the table's
    module, to the tuned values, with each re-measured entry's rationale as a comment."""
    entries = [
        script.Entry(
            "device.reload_block", (None, 8192), (script.Shape.parse("rms_norm 16384x8192"),)
        ),
        script.Entry("rotary.warps", (2, 4, 8), (script.Shape.parse("rotary_embedding 1x4096"),)),
    ]
    fake = {("device.reload_block", None): 130.0, ("device.reload_block", 8192): 126.0}
    fake |= {("rotary.warps", 2): 1.5, ("rotary.warps", 4): 2.0, ("rotary.warps", 8): 2.1}

    def measure(trial: Any, shape: Any) -> float:
        entry = next(e for e in entries if shape in e.shapes)
        return fake[(entry.path, trial.get(entry.path))]

    tuned, results = script.sweep(entries, table(), measure, log=lambda line: None)
    text = script.report(tuned, results, "Some GPU")
    device_part, common_part = text.split("\n# COMMON")
    namespace = vars(tuning)
    device_source = device_part.split("\n", 1)[1]
    assert eval(device_source, namespace) == tuned.device
    assert "# Some GPU: kept, no candidate faster beyond a tie (rms_norm 16384x8192)" in text
    common_source = common_part.split("\n", 1)[1]
    assert eval(common_source, namespace) == tuned.common
    assert tuned.common.rotary.warps == 2
    assert "# Some GPU: 25.0% faster than 4 (rotary_embedding 1x4096)" in text
    assert eval(script.render(tuning.COMMON), namespace) == tuning.COMMON


def test_the_live_table_reaches_the_rules() -> None:
    """In force, a table's entries are what the provider's rules read; afterwards the module's
    own table is back."""
    split_table = table().with_value("norms.row_split", 2)
    assert rules.split_for(1, 8192, rules.QUANT_NONE, True, 132) == 4
    with script.live(split_table):
        assert rules.split_for(1, 8192, rules.QUANT_NONE, True, 132) == 2
    assert rules.split_for(1, 8192, rules.QUANT_NONE, True, 132) == 4
    far = tuning.COMMON.norms.reload_l2_share + 1.0
    many = tuning.COMMON.norms.few_rows + 1
    assert rules.reload_for(many, rules.QUANT_NONE, 8192, far, 2, 37.2)
    with script.live(table().with_value("device.reload_block", None)):
        assert not rules.reload_for(many, rules.QUANT_NONE, 8192, far, 2, 37.2)
        assert rules.reload_for(many, rules.QUANT_NONE, 8192, far, 2, None) is False
    assert rules.reload_for(many, rules.QUANT_NONE, 8192, far, 2, 37.2)


def test_the_command_line_checks_its_arguments() -> None:
    with pytest.raises(SystemExit) as exit_:
        script.main(["--ops", "norms,bogus"])
    assert exit_.value.code == 2
    import torch

    if not torch.cuda.is_available():
        assert script.main(["--ops", "rotary"]) == 2
