"""The launch table (``csrc/tuning.cuh``) and the script that re-measures it on a GPU
(``benchmarks/tuning/tune_cuda.py``): its reading and writing of the table and its choice between
candidates, with made-up timings, on the CPU."""

import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from ir_kernels_cuda.build import csrc_dir

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "benchmarks" / "tuning" / "tune_cuda.py"
PACKAGE = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tuning() -> ModuleType:
    """The script, imported under a name of its own (``cuda``, its file's, is too generic a
    module name)."""
    spec = importlib.util.spec_from_file_location("ir_cuda_tuning_script", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def text() -> str:
    return (csrc_dir() / "tuning.cuh").read_text()


def test_every_entry_has_a_line_of_rationale(tuning: ModuleType, text: str) -> None:
    table = tuning.parse_table(text)
    assert len(table) >= 40
    assert all(entry.rationale for entry in table.values())
    per_class = {name for name, entry in table.items() if entry.per_class}
    assert {"kReloadWideRows", "kStreamedGroupTeam", "kStreamedSiluThreads"} <= per_class
    assert all(len(table[name].values) == len(tuning.DeviceClass) for name in per_class)
    assert table["kFewRows"].values == (256,)
    assert table["kStreamedGroupThreads"].values == (128, 512)
    assert table["kReloadWideRows"].values == (False, True)
    assert table["kEvictFirstL2Sizes"].values == (1.3,)


def test_an_entry_without_rationale_is_refused(tuning: ModuleType) -> None:
    with pytest.raises(ValueError, match="kLonely: no line of rationale"):
        tuning.parse_table("// a table\n\nconstexpr int kLonely = 3;\n")


def test_writing_the_current_values_changes_nothing(tuning: ModuleType, text: str) -> None:
    """Every entry's literal is written as the script writes it, so that a rewrite of one
    entry leaves every other byte of the file alone."""
    table = tuning.parse_table(text)
    assert tuning.with_values(text, {}) == text
    for entry in table.values():
        for device_class in tuning.DeviceClass:
            same = {entry.name: entry.value(device_class)}
            assert tuning.with_values(text, same, device_class) == text, entry.name


def test_a_per_class_value_goes_into_its_column(tuning: ModuleType, text: str) -> None:
    deep = tuning.DeviceClass.DEEP_LOADS
    changed = tuning.with_values(text, {"kStreamedGroupThreads": 256}, deep)
    differing = [
        (a, b) for a, b in zip(text.splitlines(), changed.splitlines(), strict=True) if a != b
    ]
    assert differing == [
        (
            "constexpr PerClass<int> kStreamedGroupThreads{128, 512};",
            "constexpr PerClass<int> kStreamedGroupThreads{128, 256};",
        )
    ]
    shallow = tuning.DeviceClass.SHALLOW_LOADS
    changed = tuning.with_values(text, {"kReloadWideRows": True}, shallow)
    assert tuning.parse_table(changed)["kReloadWideRows"].values == (True, True)
    with pytest.raises(ValueError, match="kReloadWideRows is set per device class"):
        tuning.with_values(text, {"kReloadWideRows": True})


def test_a_value_for_every_class_is_written_once(tuning: ModuleType, text: str) -> None:
    changed = tuning.with_values(text, {"kFewRows": 512, "kEvictFirstL2Sizes": 1.5})
    table = tuning.parse_table(changed)
    assert table["kFewRows"].values == (512,)
    assert table["kEvictFirstL2Sizes"].values == (1.5,)
    assert "constexpr int64_t kFewRows = 512;" in changed.splitlines()
    assert len(changed.splitlines()) == len(text.splitlines())


def test_bad_values_are_named(tuning: ModuleType, text: str) -> None:
    with pytest.raises(KeyError, match="no entry 'kNoSuch'"):
        tuning.with_values(text, {"kNoSuch": 1})
    with pytest.raises(TypeError, match="a bool entry takes True or False, got 1"):
        tuning.with_values(text, {"kReloadWideRows": 1}, tuning.DeviceClass.DEEP_LOADS)
    with pytest.raises(TypeError, match=r"an integer entry \(int\) takes an int, got 2.5"):
        tuning.with_values(text, {"kRowSplit": 2.5})


def test_the_device_classes_match_the_header(tuning: ModuleType, text: str) -> None:
    """The script's classes are the header's, in the order of the per-class columns."""
    for device_class in tuning.DeviceClass:
        name = "k" + device_class.name.title().replace("_", "")
        assert re.search(rf"^\s*{name} = {device_class.value},", text, re.M), name
    table = tuning.parse_table(text)
    assert tuning.device_class_of(25.4, table) is tuning.DeviceClass.SHALLOW_LOADS
    assert tuning.device_class_of(30.0, table) is tuning.DeviceClass.DEEP_LOADS
    assert tuning.device_class_of(37.0, table) is tuning.DeviceClass.DEEP_LOADS


def test_bandwidth_per_sm_from_the_device_properties(tuning: ModuleType) -> None:
    card = SimpleNamespace(
        memory_clock_rate=2_619_000, memory_bus_width=5120, multi_processor_count=132
    )
    assert tuning.gbps_per_sm(card) == pytest.approx(25.4, abs=0.05)
    no_clock = SimpleNamespace(
        memory_clock_rate=0, memory_bus_width=5120, multi_processor_count=132
    )
    assert tuning.gbps_per_sm(no_clock) == 0.0


def test_a_faster_candidate_replaces_the_current_value(tuning: ModuleType) -> None:
    timings = {(4,): [10.0, 100.0], (2,): [9.0, 97.0], (8,): [9.5, 90.0]}
    assert tuning.choose((4,), timings) == (8,)  # lower sum of ratios of the two winners


def test_a_tie_keeps_the_current_value(tuning: ModuleType) -> None:
    within_two_percent = {(4,): [10.0, 100.0], (8,): [9.85, 98.5]}
    assert tuning.choose((4,), within_two_percent) == (4,)
    within_a_tenth = {(4,): [1.0, 1.2], (8,): [0.91, 1.11]}
    assert tuning.choose((4,), within_a_tenth) == (4,)
    just_past = {(4,): [1.0, 1.2], (8,): [0.85, 1.2]}
    assert tuning.choose((4,), just_past) == (8,)


def test_a_candidate_slower_at_one_shape_is_not_taken(tuning: ModuleType) -> None:
    timings = {(False,): [10.0, 100.0, 50.0], (True,): [5.0, 80.0, 52.0]}
    assert tuning.choose((False,), timings) == (False,)
    timings[(True,)][2] = 50.9  # within the 2 % tie
    assert tuning.choose((False,), timings) == (True,)


def test_choose_needs_the_current_values_timings(tuning: ModuleType) -> None:
    with pytest.raises(KeyError, match=r"no timings for the current value \(4,\)"):
        tuning.choose((4,), {(8,): [1.0]})
    with pytest.raises(ValueError, match=r"\(8,\): 1 times, 2 shapes expected"):
        tuning.choose((4,), {(4,): [1.0, 2.0], (8,): [1.0]})


def fake_measure(faster: dict[str, Any]) -> Any:
    """A `Measure` under which the candidate `faster[probe name]` of each probe takes half the
    current value's time at every shape, every other candidate the same time."""

    def measure(probe: Any, candidates: Sequence[Any]) -> dict[Any, list[float]]:
        shapes = len(probe.ops) * len(probe.shapes)
        return {c: [5.0 if c == faster.get(probe.name) else 10.0] * shapes for c in candidates}

    return measure


def test_retune_writes_this_class_column_and_reports_the_rest(
    tuning: ModuleType, text: str
) -> None:
    group = "kStreamedGroupTeam+kStreamedGroupVectors+kStreamedGroupThreads"
    probes = tuning.probes_for(["kStreamedGroupTeam", "kRowSplit", "kReloadWideRows"])
    faster = {group: (8, 2, 256), "kRowSplit": (2,)}
    shallow = tuning.DeviceClass.SHALLOW_LOADS
    new, outcomes = tuning.retune(text, shallow, probes, fake_measure(faster))
    table = tuning.parse_table(new)
    assert table["kStreamedGroupTeam"].values == (8, 8)
    assert table["kStreamedGroupVectors"].values == (2, 2)
    assert table["kStreamedGroupThreads"].values == (256, 512)
    assert table["kRowSplit"].values == (4,)  # every class's: reported, not written
    assert table["kReloadWideRows"].values == (False, True)  # no candidate faster: kept
    found = {o.probe.name: o for o in outcomes}
    assert found[group].current == (16, 1, 128)
    assert found[group].written
    assert found["kRowSplit"].chosen == (2,)
    assert not found["kRowSplit"].written
    assert found["kReloadWideRows"].chosen == found["kReloadWideRows"].current == (False,)
    assert "kRowSplit: (4,) -> (2,) (reported)" in tuning.report(outcomes)

    new, _ = tuning.retune(text, shallow, probes, fake_measure(faster), common=True)
    assert tuning.parse_table(new)["kRowSplit"].values == (2,)


def test_every_probe_sets_entries_of_the_table(tuning: ModuleType, text: str) -> None:
    table = tuning.parse_table(text)
    for probe in tuning.PROBES:
        assert set(probe.entries) <= set(table), probe.name
        assert all(len(c) == len(probe.entries) for c in probe.candidates), probe.name
        probe.per_class(table)  # raises where a probe mixes per-class and common entries
    measured = {name for probe in tuning.PROBES for name in probe.entries}
    assert {name for name, entry in table.items() if entry.per_class} <= measured
    with pytest.raises(ValueError, match="no probe measures kMaxTeam"):
        tuning.probes_for(["kMaxTeam"])


def test_the_script_lists_the_table_without_a_gpu(
    tuning: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert tuning.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert "kStreamedGroupThreads = (128, 512) (per class, measured)" in listed
    assert "kMaxTeam = (512,) (every class, no probe)" in listed


def test_card_names_and_timings_live_in_the_table_only() -> None:
    """Comments and docstrings of the package's sources say what the code does and why; card
    names belong to the launch table's device classes, and measured times to benchmark
    results."""
    pattern = re.compile(r"round [0-9]|H100|H200|µs", re.I)
    sources = [*(PACKAGE / "csrc").iterdir(), *(PACKAGE / "src").rglob("*.py")]
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sources
        if path.name != "tuning.cuh"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
