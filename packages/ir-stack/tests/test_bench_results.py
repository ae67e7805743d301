"""The one result schema of the benchmark suites: JSON that reads back as written, clear errors
for anything else, device slugs, the generic table, and the comparison of two results."""

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ir_stack.bench import results
from ir_stack.bench.results import Device, Metric, Result


def e2e(rows: list[dict[str, Any]], slug: str = "test") -> Result:
    result = results.new_result(
        "e2e",
        "End to end",
        Device(f"{slug} GPU", slug, "cuda"),
        {"model": "tiny"},
        ["model", "mode", "workload"],
        [Metric("ms", "ms")],
    )
    result.rows = rows
    return result


def random_rows(rng: random.Random, count: int = 12) -> list[dict[str, Any]]:
    return [
        {"model": "tiny", "mode": f"mode {i % 4}", "workload": f"decode b={i // 4}"}
        | {"ms": rng.uniform(0.5, 50.0), "max_abs_error": rng.uniform(0, 1e-3)}
        for i in range(count)
    ]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "model": st.sampled_from(["tiny", "1b"]),
                "mode": st.text(min_size=1, max_size=20),
                "workload": st.text(max_size=20),
                "ms": st.floats(min_value=1e-6, max_value=1e6),
                "batch": st.integers(1, 1024),
            }
        ),
        max_size=20,
    )
)
def test_a_result_reads_back_as_written(rows: list[dict[str, Any]]) -> None:
    result = e2e(rows)
    back = Result.from_json(result.to_json())
    assert dataclasses.replace(back, rows=[]) == dataclasses.replace(result, rows=[])
    assert len(back.rows) == len(rows)
    for old, new in zip(rows, back.rows, strict=True):
        assert new.keys() == old.keys()
        assert new["ms"] == pytest.approx(old["ms"], rel=1e-5)
        assert {k: v for k, v in new.items() if k != "ms"} == {
            k: v for k, v in old.items() if k != "ms"
        }


def test_one_row_a_line_in_the_file(tmp_path: Path) -> None:
    rows = random_rows(random.Random(1))
    path = results.save(e2e(rows), tmp_path, render_too=False)
    assert path == tmp_path / "e2e-test.json"
    lines = path.read_text().splitlines()
    assert sum(line.startswith('  {"model":') for line in lines) == len(rows)
    assert json.loads(path.read_text())["schema"] == results.SCHEMA


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("schema"), "schema None, expected 1"),
        (lambda d: d.pop("rows") and d.pop("key"), "missing key"),
        (lambda d: d.update(suite="warp"), "unknown suite 'warp'; expected one of"),
        (lambda d: d.update(colour="red"), "unknown fields colour"),
        (lambda d: d["device"].pop("slug"), "malformed device or metrics"),
    ],
)
def test_what_is_not_a_result_is_refused_by_name(change: Any, message: str) -> None:
    data = json.loads(e2e(random_rows(random.Random(2))).to_json())
    change(data)
    with pytest.raises(ValueError, match=message) as error:
        Result.from_json(json.dumps(data), "some.json")
    assert str(error.value).startswith("some.json: ")


def test_a_missing_or_broken_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nope\.json: cannot read it"):
        results.load(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match=r"bad\.json: not JSON"):
        results.load(tmp_path / "bad.json")


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("CPU (x86_64, 2 cores)", "cpu"),
    ],
)
def test_device_slugs(name: str, slug: str) -> None:
    assert results.device_slug(name) == slug


def test_the_generic_table_shows_every_field() -> None:
    text = results.generic_markdown(e2e([{"model": "tiny", "mode": "m", "workload": "w"}]))
    assert "| model | mode | workload | ms (ms) |" in text
    assert "| tiny | m | w | - |" in text


def test_compare_flags_what_moved_beyond_the_threshold() -> None:
    rng = random.Random(3)
    old_rows = random_rows(rng)
    new_rows = [dict(r) for r in old_rows]
    new_rows[0]["ms"] *= 1.5  # slower: a regression at 10 %
    new_rows[1]["ms"] *= 1.05  # within the threshold
    new_rows[2]["ms"] /= 2  # faster
    old, new = e2e(old_rows), e2e(new_rows)
    comparison = results.compare(old, new, threshold=0.1)
    assert [c.key for c in comparison.regressions] == [results.Result.row_key(new, old_rows[0])]
    assert comparison.regressions[0].change == pytest.approx(0.5)
    assert [c.key for c in comparison.improvements] == [old.row_key(old_rows[2])]
    assert len(comparison.changes) == len(old_rows)
    text = comparison.markdown()
    assert "**1 regression(s)** beyond 10%" in text
    assert "+50.0%" in text
    assert results.compare(old, new, threshold=0.6).regressions == []
    assert results.compare(old, old, threshold=0.0).regressions == []


def test_compare_takes_each_keys_best_and_higher_is_better_where_said() -> None:
    rows = [{"model": "m", "mode": "a", "workload": "w", "ms": v} for v in (3.0, 1.0, 2.0)]
    old, new = e2e(rows[2:]), e2e(rows)  # one run against three repeats
    assert results.compare(old, new, 0.1).improvements[0].new == 1.0  # the fastest repeat
    old.metrics = new.metrics = [Metric("ms", "GB/s", "higher")]
    better = results.compare(old, new, 0.1).improvements
    assert better[0].new == 3.0  # the highest repeat
    assert better[0].change == pytest.approx(2 / 3 - 1)
    worse = results.compare(new, old, 0.1).regressions
    assert worse[0].change == pytest.approx(0.5)


def test_compare_keeps_rows_where_told_and_names_the_rows_only_one_holds() -> None:
    rng = random.Random(4)
    old_rows = random_rows(rng)
    new_rows = [dict(r, ms=r["ms"] * 3) for r in old_rows[1:]]
    new_rows.append({"model": "tiny", "mode": "new mode", "workload": "w", "ms": 1.0})
    comparison = results.compare(
        e2e(old_rows), e2e(new_rows), 0.1, where={"mode": {"mode 1", "new mode"}}
    )
    assert {c.key[1] for c in comparison.changes} == {"mode 1"}
    assert comparison.only_new == [("tiny", "new mode", "w")]
    assert comparison.only_old == []
    assert "Only in the new (1): tiny new mode w" in comparison.markdown()


def test_compare_refuses_what_does_not_compare() -> None:
    old = e2e(random_rows(random.Random(5)))
    other = dataclasses.replace(old, suite="startup")
    with pytest.raises(ValueError, match="suites differ: old is 'e2e', new is 'startup'"):
        results.compare(old, other, 0.1)
    with pytest.raises(ValueError, match=r"threshold -0\.1: expected a fraction >= 0"):
        results.compare(old, old, -0.1)
    with pytest.raises(ValueError, match="where: e2e rows have no field 'provider'"):
        results.compare(old, old, 0.1, where={"provider": {"triton"}})
    moved = e2e(old.rows, slug="other")
    assert "The devices differ" in results.compare(old, moved, 0.1).markdown()
