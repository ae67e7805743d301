"""One result schema for every suite: a JSON file, and the markdown table and plot made from it.

A `Result` names its suite, the device (`Device`, with the short `slug` its file names use),
the software that ran, the options of the run (`params`), and rows: flat dicts whose `key`
fields identify a row and whose `metrics` fields are measured (each with its unit and whether
lower or higher is better). Rows that share a key are repeats of one measurement; `compare`
takes the best of them. `facts` holds what a run measures once (the copy bandwidth, an empty
kernel's time, a start-up time) and `notes` sentences the markdown repeats.

Files: ``<suite>-<device slug>.json``, ``.md`` and ``.png`` under the output directory, so a new
run on the same kind of device overwrites the old one (`save`). The markdown and the plot of
each suite come from its report module (`ir_stack.bench.suites`); `render` redoes both from a
JSON. `compare` lists the rows whose metric moved by more than a threshold, which
``ir-stack bench compare`` turns into an exit status.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import math
import os
import platform
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

from .suites import SUITES

logger = logging.getLogger("ir_stack.bench")

#: Version of the JSON layout; `Result.from_json` refuses another.
SCHEMA = 1
#: Distributions whose versions every result records, where installed.
SOFTWARE = (
    "torch",
    "triton",
    "transformers",
    "liger-kernel",
    "ir-spec",
    "ir-dispatch",
    "ir-passes",
    "ir-kernels-triton",
    "ir-kernels-cuda",
    "ir-piecewise",
    "ir-stack",
)
#: The import name of each ir-stack distribution (a source tree on PYTHONPATH has no metadata).
_MODULES = {name: name.replace("-", "_") for name in SOFTWARE if name.startswith("ir-")}

Better = Literal["lower", "higher"]


@dataclasses.dataclass(frozen=True)
class Metric:
    """A measured field of the rows: its name, unit and which direction is better."""

    name: str
    unit: str
    better: Better = "lower"


@dataclasses.dataclass(frozen=True)
class Device:
    """Where a result was measured: the full name, its file-name slug, ``cuda`` or ``cpu``."""

    name: str
    slug: str
    kind: str


@dataclasses.dataclass
class Result:
    """One run of one suite (see the module's docstring)."""

    suite: str
    title: str
    device: Device
    software: dict[str, str]
    date: str
    params: dict[str, Any]
    key: list[str]
    metrics: list[Metric]
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    schema: int = SCHEMA

    @property
    def file_stem(self) -> str:
        """``<suite>-<device slug>``: the name of its files, without the suffix."""
        return f"{self.suite}-{self.device.slug}"

    def row_key(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        """The values of `row`'s key fields."""
        return tuple(row.get(name) for name in self.key)

    def metric(self, name: str) -> Metric:
        """The metric called `name`; ValueError names the known ones."""
        for metric in self.metrics:
            if metric.name == name:
                return metric
        known = ", ".join(m.name for m in self.metrics)
        raise ValueError(f"metric {name!r}: the {self.suite} suite measures {known}")

    def to_json(self) -> str:
        """The result as JSON: one row a line, so that a diff of two runs reads row by row."""
        head = dataclasses.asdict(self)
        rows = head.pop("rows")
        text = json.dumps(head, indent=1, sort_keys=False)
        body = ",\n".join("  " + json.dumps(_rounded(row), separators=(",", ":")) for row in rows)
        return text[:-2] + ',\n "rows": [\n' + body + "\n ]\n}\n"

    @classmethod
    def from_json(cls, text: str, source: str = "result") -> Result:
        """Read a result; ValueError, naming `source` and the problem, for anything else."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{source}: not JSON ({error})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{source}: expected a JSON object, got {type(data).__name__}")
        if data.get("schema") != SCHEMA:
            raise ValueError(
                f"{source}: schema {data.get('schema')!r}, expected {SCHEMA} (a result of "
                "`ir-stack bench`; results of older versions have no such field)"
            )
        fields = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(fields - data.keys() - {"facts", "notes", "rows"})
        if missing:
            raise ValueError(f"{source}: missing {', '.join(missing)}")
        unknown = sorted(data.keys() - fields)
        if unknown:
            raise ValueError(f"{source}: unknown fields {', '.join(unknown)}")
        try:
            data["device"] = Device(**data["device"])
            data["metrics"] = [Metric(**m) for m in data["metrics"]]
        except TypeError as error:
            raise ValueError(f"{source}: malformed device or metrics ({error})") from None
        if data["suite"] not in SUITES:
            raise ValueError(
                f"{source}: unknown suite {data['suite']!r}; expected one of {sorted(SUITES)}"
            )
        return cls(**data)


def _rounded(row: Mapping[str, Any]) -> dict[str, Any]:
    """`row` with floats cut to 6 significant digits (more is noise, and bytes in the file)."""
    return {k: float(f"{v:.6g}") if isinstance(v, float) else v for k, v in row.items()}


def device_slug(name: str) -> str:
    """A short lower-case name for a device's files: ``NVIDIA H100 80GB HBM3`` -> ``h100``,
    ``NVIDIA GeForce RTX 4090`` -> ``rtx-4090``, anything on the CPU -> ``cpu``."""
    if name.lower().startswith("cpu"):
        return "cpu"
    words = [w for w in name.replace("-", " ").split() if w not in ("NVIDIA", "GeForce", "AMD")]
    if not words:
        raise ValueError(f"device name {name!r}: expected a GPU's name, e.g. 'NVIDIA H100'")
    # a product line ahead of the model number (RTX 4090, Tesla V100) keeps both
    count = 2 if len(words) > 1 and words[0].upper() in ("RTX", "GTX", "TESLA", "QUADRO") else 1
    return "-".join(words[:count]).lower()


def current_device(kind: str | None = None) -> Device:
    """The device a suite runs on: the current CUDA GPU where one is visible (or `kind` says
    ``cuda``), else the CPU."""
    import torch

    if kind is None:
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda":
        name = torch.cuda.get_device_name()
        return Device(name, device_slug(name), "cuda")
    name = f"CPU ({platform.machine()}, {os.cpu_count()} cores)"
    return Device(name, "cpu", "cpu")


def software_versions() -> dict[str, str]:
    """Python and each distribution of `SOFTWARE` that is present: its installed version, or an
    ir-stack package's ``__version__`` where it runs from a source tree."""
    found = {"python": platform.python_version()}
    for name in SOFTWARE:
        module = _MODULES.get(name)
        if module is not None:
            try:  # the version of the code that runs, which a source tree may not install
                found[name] = str(importlib.import_module(module).__version__)
                continue
            except (ImportError, AttributeError):
                pass
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def new_result(
    suite: str,
    title: str,
    device: Device,
    params: Mapping[str, Any],
    key: Sequence[str],
    metrics: Sequence[Metric],
) -> Result:
    """An empty result of `suite` stamped with the software and the date of this run."""
    if suite not in SUITES:
        raise ValueError(f"suite {suite!r}: expected one of {sorted(SUITES)}")
    return Result(
        suite=suite,
        title=title,
        device=device,
        software=software_versions(),
        date=time.strftime("%Y-%m-%d %H:%M"),
        params=dict(params),
        key=list(key),
        metrics=list(metrics),
    )


def load(path: Path) -> Result:
    """The result in the JSON file at `path`; ValueError names the file and the problem."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ValueError(f"{path}: cannot read it ({error.strerror})") from None
    return Result.from_json(text, str(path))


def save(result: Result, out: Path, *, render_too: bool = True) -> Path:
    """Write ``<out>/<suite>-<slug>.json`` and, with `render_too`, its ``.md`` and ``.png``
    (`render`); returns the JSON's path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{result.file_stem}.json"
    path.write_text(result.to_json())
    if render_too:
        render(result, path)
    return path


def render(result: Result, path: Path) -> Path:
    """Write `result`'s markdown to `path` with suffix ``.md`` and its plot to ``.png`` (where
    matplotlib is installed; ``pip install ir-stack[bench]``); returns the markdown's path."""
    report = importlib.import_module(SUITES[result.suite].report)
    table = path.with_suffix(".md")
    table.write_text(report.markdown(result))
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        logger.warning("matplotlib is not installed: no plot (pip install ir-stack[bench])")
        return table
    report.plot(result, path.with_suffix(".png"))
    return table


# -- markdown helpers shared by the report modules


def header(result: Result, method: str = "") -> list[str]:
    """The title and the line saying where, with what and how the result was measured."""
    software = ", ".join(
        f"{name} {result.software[name]}"
        for name in ("torch", "triton", "transformers", "liger-kernel", "ir-stack")
        if name in result.software
    )
    line = f"{result.device.name}; {software}; {result.date}."
    if method:
        line += " " + method
    return [f"# {result.title}", "", line, ""]


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], align: str = "") -> list[str]:
    """A markdown table; `align` holds one character a column (``l`` or ``r``, default left)."""
    marks = ["---:" if a == "r" else "---" for a in align.ljust(len(headers), "l")]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return [*lines, ""]


def number(value: Any, digits: int = 3) -> str:
    """A measured value for a table: ``-`` where missing, else `digits` significant digits
    (whole numbers in full)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if abs(value) >= 10 ** (digits - 1):
            return f"{value:.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def generic_markdown(result: Result) -> str:
    """Every row with its key, metrics and other fields: the table of a suite without a
    report of its own, and of a result whose rows a report does not know."""
    fields = list(result.key) + [m.name for m in result.metrics]
    fields += sorted({k for row in result.rows for k in row} - set(fields))
    units = {m.name: f"{m.name} ({m.unit})" for m in result.metrics}
    lines = header(result)
    lines += table(
        [units.get(f, f) for f in fields],
        ([number(row.get(f)) for f in fields] for row in result.rows),
    )
    lines += [f"- {note}" for note in result.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


# -- comparing two results


@dataclasses.dataclass(frozen=True)
class Change:
    """One row's metric in both results: `change` is how much worse the new value is, as a
    fraction (negative where it improved)."""

    key: tuple[Any, ...]
    metric: Metric
    old: float
    new: float

    @property
    def change(self) -> float:
        ratio = self.new / self.old if self.metric.better == "lower" else self.old / self.new
        return ratio - 1


@dataclasses.dataclass
class Comparison:
    """`new` against `old`: each row and metric both hold, and the rows only one holds."""

    suite: str
    key: list[str]
    threshold: float
    changes: list[Change]
    only_old: list[tuple[Any, ...]]
    only_new: list[tuple[Any, ...]]
    notes: list[str]

    @property
    def regressions(self) -> list[Change]:
        """The changes worse than the threshold, largest first."""
        worse = [c for c in self.changes if c.change > self.threshold]
        return sorted(worse, key=lambda c: c.change, reverse=True)

    @property
    def improvements(self) -> list[Change]:
        """The changes better than the threshold, largest first."""
        better = [c for c in self.changes if -c.change / (1 + c.change) > self.threshold]
        return sorted(better, key=lambda c: c.change)

    def markdown(self, most: int = 20) -> str:
        """The comparison for a reader: a verdict, the median change per metric, the
        regressions and improvements beyond the threshold (the `most` largest of each)."""
        verdict = (
            f"**{len(self.regressions)} regression(s)** beyond {self.threshold:.0%}"
            if self.regressions
            else f"no regression beyond {self.threshold:.0%}"
        )
        lines = [
            f"# {self.suite}: new against old",
            "",
            f"{len(self.changes)} measurements in both results; {verdict}; "
            f"{len(self.improvements)} improvement(s) beyond it.",
            "",
            *self.notes,
            *([""] if self.notes else []),
        ]
        by_metric: dict[str, list[float]] = {}
        for change in self.changes:
            by_metric.setdefault(change.metric.name, []).append(change.change)
        if by_metric:
            lines += table(
                ["metric", "median change", "worst", "best"],
                (
                    (name, f"{statistics.median(v):+.1%}", f"{max(v):+.1%}", f"{min(v):+.1%}")
                    for name, v in by_metric.items()
                ),
            )
        for title, changes in (
            ("Regressions", self.regressions),
            ("Improvements", self.improvements),
        ):
            if changes:
                lines += [f"{title} ({len(changes)}, the {min(most, len(changes))} largest):", ""]
                lines += table(
                    [*self.key, "metric", "old", "new", "change"],
                    (
                        (*c.key, c.metric.name, number(c.old), number(c.new), f"{c.change:+.1%}")
                        for c in changes[:most]
                    ),
                )
        for title, keys in (
            ("Only in the old result", self.only_old),
            ("Only in the new", self.only_new),
        ):
            if keys:
                shown = "; ".join(" ".join(str(v) for v in k) for k in keys[:most])
                lines += [f"{title} ({len(keys)}): {shown}", ""]
        return "\n".join(lines).rstrip("\n") + "\n"


def best_values(
    result: Result, where: Mapping[str, set[str]]
) -> dict[tuple[Any, ...], dict[str, float]]:
    """Each key's best value of each metric over its repeated rows, for the rows whose fields
    match `where` (field -> allowed values, compared as text)."""
    found: dict[tuple[Any, ...], dict[str, float]] = {}
    for row in result.rows:
        if any(str(row.get(f)) not in allowed for f, allowed in where.items()):
            continue
        values = found.setdefault(result.row_key(row), {})
        for metric in result.metrics:
            value = row.get(metric.name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                continue
            pick = min if metric.better == "lower" else max
            values[metric.name] = pick(values.get(metric.name, value), float(value))
    return found


def compare(
    old: Result, new: Result, threshold: float, where: Mapping[str, set[str]] | None = None
) -> Comparison:
    """`new` against `old`, row by row (matched by key, each key's best over its repeats) and
    metric by metric; a change worse than `threshold` (a fraction) is a regression. `where`
    keeps the rows whose fields hold one of the given values (e.g. ``{"provider": {"triton"}}``
    to leave other columns' drift out). ValueError where the suites or keys differ."""
    if threshold < 0:
        raise ValueError(f"threshold {threshold}: expected a fraction >= 0")
    if old.suite != new.suite:
        raise ValueError(f"suites differ: old is {old.suite!r}, new is {new.suite!r}")
    if old.key != new.key:
        raise ValueError(f"row keys differ: old {old.key}, new {new.key}")
    where = where or {}
    for field in where:
        if field not in {k for row in new.rows for k in row}:
            raise ValueError(f"where: {new.suite} rows have no field {field!r}")
    before, after = best_values(old, where), best_values(new, where)
    changes = [
        Change(key, new.metric(name), before[key][name], value)
        for key, values in after.items()
        if key in before
        for name, value in values.items()
        if name in before[key]
    ]
    notes = []
    if old.device.slug != new.device.slug:
        notes.append(f"The devices differ: old {old.device.name}, new {new.device.name}.")
    if old.params != new.params:
        notes.append(f"The options differ: old {old.params}, new {new.params}.")
    return Comparison(
        suite=new.suite,
        key=list(new.key),
        threshold=threshold,
        changes=changes,
        only_old=sorted((k for k in before if k not in after), key=str),
        only_new=sorted((k for k in after if k not in before), key=str),
        notes=notes,
    )
