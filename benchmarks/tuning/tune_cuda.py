"""Re-measure the ``cuda`` provider's launch table on this GPU and write its device class's column.

The table is ``packages/ir-kernels-cuda/csrc/tuning.cuh``: entries that hold for every device
class (``constexpr int kName = value;``) and a per-class table (``constexpr PerClass<int>
kName{shallow, deep};``), each under its line of rationale. For every entry it can measure
(`PROBES`: the entries a probe sets together, their candidate values, and the ops and shapes
whose launches they decide), the script builds the kernels once per candidate, each build beside
the others in a namespace of its own (``torch.ops.ir_cuda_tune_<hash>``, cached in the work
folder), checks that every candidate gives the bits of the current value (an entry changes
launches, never arithmetic), and times every shape by CUDA-graph replay, the candidates in
rotated order over ``--rounds`` rounds, the fastest round kept.

A candidate replaces the current value only where it is faster than the current value beyond a
tie at some shape and slower beyond a tie at none, a tie being within 2 % or 0.1 µs of the
current value's time; of several such candidates, the one with the lowest sum of time ratios
wins (`choose`). Per-class entries are written into the column of this card's device class;
entries that hold for every class are reported, and written only with ``--common`` (a new value
there should hold on a card of every class). Without ``--write`` the script prints the changes
as a diff.

Usage (a GPU machine, from the repository root, the packages importable):

    python benchmarks/tuning/tune_cuda.py [--entries NAME,...] [--all] [--rounds 5] [--write]
        [--common] [--json OUT] [--work DIR]
    python benchmarks/tuning/tune_cuda.py --list
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import enum
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import statistics
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger("tuning.cuda")

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "packages" / "ir-kernels-cuda" / "csrc" / "tuning.cuh"
#: Two times are a tie within this fraction of the current value's time ...
TIE_FRACTION = 0.02
#: ... or within this many microseconds.
TIE_US = 0.1

#: A value of an entry, as Python sees it.
Value = bool | int | float
#: The values of a probe's entries, in the probe's order.
Candidate = tuple[Value, ...]


class DeviceClass(enum.IntEnum):
    """The table's device classes (``DeviceClass`` in tuning.cuh), its columns in this order."""

    SHALLOW_LOADS = 0
    DEEP_LOADS = 1


# ------------------------------------------------------------------------------ the table
_COMMON = re.compile(r"^constexpr (?P<type>[A-Za-z_][\w: ]*?) (?P<name>k\w+) = (?P<value>[^;]+);$")
_PER_CLASS = re.compile(
    r"^constexpr PerClass<(?P<type>[\w: ]+)> (?P<name>k\w+)\{(?P<values>[^}]*)\};$"
)


@dataclass(frozen=True)
class Entry:
    """One entry of the table: its C++ type, its value (one, or one per device class in
    `DeviceClass` order), its line of rationale and its line's index in the file."""

    name: str
    cxx_type: str
    values: tuple[Value, ...]
    rationale: str
    line: int

    @property
    def per_class(self) -> bool:
        return len(self.values) > 1

    def value(self, device_class: DeviceClass) -> Value:
        """The value this entry gives a card of `device_class`."""
        return self.values[device_class] if self.per_class else self.values[0]


def parse_value(text: str, cxx_type: str) -> Value:
    """A C++ literal of the table as a Python value."""
    text = text.strip()
    if cxx_type == "bool":
        if text not in ("true", "false"):
            raise ValueError(f"a bool entry's value must be true or false, got {text!r}")
        return text == "true"
    if cxx_type in ("double", "float"):
        return float(text)
    return int(text)


def cxx_literal(value: Value, cxx_type: str) -> str:
    """`value` written as the table writes an entry of `cxx_type`."""
    if cxx_type == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"a bool entry takes True or False, got {value!r}")
        return "true" if value else "false"
    if cxx_type in ("double", "float"):
        return repr(float(value))
    if isinstance(value, bool) or int(value) != value:
        raise TypeError(f"an integer entry ({cxx_type}) takes an int, got {value!r}")
    return str(int(value))


def parse_table(text: str) -> dict[str, Entry]:
    """The entries of tuning.cuh's text, by name. Each must sit right under a comment line (its
    rationale): a `ValueError` names the first that does not."""
    lines = text.splitlines()
    entries: dict[str, Entry] = {}
    for index, line in enumerate(lines):
        common, per_class = _COMMON.match(line), _PER_CLASS.match(line)
        match = common or per_class
        if match is None:
            continue
        name, cxx_type = match["name"], match["type"].strip()
        raw = [match["value"]] if common else match["values"].split(",")
        if per_class and len(raw) != len(DeviceClass):
            raise ValueError(f"{name}: {len(raw)} values, one per device class expected")
        above = lines[index - 1].strip() if index > 0 else ""
        if not above.startswith("//") or above == "//":
            raise ValueError(f"{name}: no line of rationale above it (line {index + 1})")
        entries[name] = Entry(
            name=name,
            cxx_type=cxx_type,
            values=tuple(parse_value(v, cxx_type) for v in raw),
            rationale=above.removeprefix("//").strip(),
            line=index,
        )
    return entries


def with_values(
    text: str, values: Mapping[str, Value], device_class: DeviceClass | None = None
) -> str:
    """`text` with the entries of `values` set: the column of `device_class` for per-class
    entries (which need it), the value itself for the others. Every other byte stays."""
    entries = parse_table(text)
    lines = text.splitlines(keepends=True)
    for name, value in values.items():
        if name not in entries:
            raise KeyError(f"no entry {name!r} in the table (it has {', '.join(sorted(entries))})")
        entry = entries[name]
        line = lines[entry.line]
        body, newline = line.rstrip("\r\n"), line[len(line.rstrip("\r\n")) :]
        literal = cxx_literal(value, entry.cxx_type)
        if entry.per_class:
            if device_class is None:
                raise ValueError(f"{name} is set per device class: name the class")
            column = [cxx_literal(v, entry.cxx_type) for v in entry.values]
            column[device_class] = literal
            body = re.sub(r"\{[^}]*\}", "{" + ", ".join(column) + "}", body, count=1)
        else:
            body = re.sub(r"= [^;]+;", f"= {literal};", body, count=1)
        lines[entry.line] = body + newline
    return "".join(lines)


def device_class_of(gbps_per_sm: float, table: Mapping[str, Entry]) -> DeviceClass:
    """The device class of a card with `gbps_per_sm` of DRAM bandwidth per SM, by the table's
    line between the classes (as ``device_class()`` in device.cuh)."""
    line = float(table["kDeepLoadsGbpsPerSm"].values[0])
    return DeviceClass.DEEP_LOADS if gbps_per_sm >= line else DeviceClass.SHALLOW_LOADS


def gbps_per_sm(properties: Any) -> float:
    """Peak DRAM bandwidth per SM in GB/s of a device with these torch properties (memory clock
    in kHz, double data rate, and bus width in bits), as device.cuh's `dram_gbps_per_sm`; 0
    where the driver reports no clock."""
    khz = getattr(properties, "memory_clock_rate", 0)
    bits = getattr(properties, "memory_bus_width", 0)
    if not (khz and bits):
        return 0.0
    return 2.0 * khz * 1e3 * bits / 8 / 1e9 / int(properties.multi_processor_count)


# ----------------------------------------------------------------------------- the probes
@dataclass(frozen=True)
class Probe:
    """Entries measured together: their candidate values, and the ops and shapes (tokens, the
    op's hidden size: the output width of the gated ops) whose launches they decide."""

    entries: tuple[str, ...]
    candidates: tuple[Candidate, ...]
    ops: tuple[str, ...]
    shapes: tuple[tuple[int, int], ...]
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return "+".join(self.entries)

    def current(self, table: Mapping[str, Entry], device_class: DeviceClass) -> Candidate:
        return tuple(table[name].value(device_class) for name in self.entries)

    def per_class(self, table: Mapping[str, Entry]) -> bool:
        kinds = {table[name].per_class for name in self.entries}
        if len(kinds) > 1:
            raise ValueError(f"probe {self.name}: per-class and common entries mixed")
        return kinds.pop()


_DECODE = ((1, 4096), (16, 4096), (1, 8192), (16, 8192))
PROBES: tuple[Probe, ...] = (
    # per device class
    Probe(
        ("kReloadWideRows",),
        ((False,), (True,)),
        ("rms_norm", "fused_add_rms_norm"),
        ((4096, 8192), (16384, 8192), (8192, 16384)),
    ),
    Probe(
        ("kStreamedGroupTeam", "kStreamedGroupVectors", "kStreamedGroupThreads"),
        (
            (16, 1, 128),
            (16, 1, 256),
            (16, 1, 512),
            (8, 2, 128),
            (8, 2, 256),
            (8, 2, 512),
            (4, 4, 128),
            (4, 4, 512),
        ),
        ("group_quant_fp8",),
        ((4096, 8192), (16384, 8192), (16384, 2048)),
    ),
    Probe(
        ("kStreamedSiluElements", "kStreamedSiluThreads"),
        ((2, 256), (4, 128), (4, 256), (8, 0), (8, 64), (8, 128), (8, 256)),
        ("silu_and_mul",),
        ((4096, 14336), (16384, 14336), (16384, 28672)),
    ),
    Probe(
        ("kStreamedGelu16Threads",),
        ((0,), (64,), (128,)),
        ("gelu_and_mul",),
        ((4096, 5632), (16384, 14336), (16384, 28672)),
    ),
    # every device class
    Probe(
        ("kFewRows",),
        ((128,), (256,), (512,)),
        ("rms_norm", "fused_add_rms_norm", "rms_norm_static_quant_fp8"),
        ((128, 4096), (256, 8192), (512, 4096), (512, 8192)),
    ),
    Probe(
        ("kClusterBlocks",),
        ((2,), (4,), (8,)),
        ("rms_norm", "fused_add_rms_norm", "fused_add_rms_norm_static_quant_fp8"),
        ((1, 4096), (4, 8192), (16, 4096), (16, 8192)),
    ),
    Probe(("kRowSplit",), ((2,), (4,), (8,)), ("rms_norm", "rms_norm_static_quant_fp8"), _DECODE),
    Probe(
        ("kSplitRows",), ((8,), (16,), (32,)), ("rms_norm", "rms_norm_static_quant_fp8"), _DECODE
    ),
    Probe(
        ("kLateWeightStaticRows",),
        ((1,), (16,), (64,)),
        ("rms_norm_static_quant_fp8",),
        ((16, 8192), (64, 8192), (1024, 8192)),
    ),
    Probe(
        ("kEvictFirstL2Sizes",),
        ((1.0,), (1.3,), (2.0,)),
        ("fused_add_rms_norm", "fused_add_rms_norm_static_quant_fp8"),
        ((4096, 2048), (1024, 8192), (2048, 8192)),
    ),
    Probe(
        ("kDecodeThreads",),
        ((128,), (256,)),
        ("silu_and_mul", "gelu_and_mul", "static_quant_fp8"),
        ((1, 2048), (16, 5632), (1, 14336)),
    ),
    Probe(
        ("kSiluFewRowsElements", "kSiluFewRowsThreads"),
        ((2, 256), (4, 128), (4, 256), (8, 256)),
        ("silu_and_mul",),
        ((16, 28672), (32, 14336)),
    ),
    Probe(
        ("kGeluFewRowsElements", "kGeluFewRowsThreads"),
        ((2, 128), (4, 128), (4, 256), (8, 128)),
        ("gelu_and_mul",),
        ((32, 14336), (64, 5632)),
    ),
    Probe(
        ("kStaticL2Vectors", "kStaticL2Threads"),
        ((1, 256), (2, 128), (2, 256)),
        ("static_quant_fp8",),
        ((1024, 4096), (4096, 4096)),
    ),
    Probe(
        ("kRotaryDecodeThreads",),
        ((64,), (128,), (256,)),
        ("rotary_embedding",),
        ((1, 4096), (16, 4096), (64, 4096)),
    ),
)


def probes_for(names: Sequence[str]) -> list[Probe]:
    """The probes that set any of the entries `names`; a `ValueError` names an entry no probe
    measures."""
    known = {name for probe in PROBES for name in probe.entries}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(
            f"no probe measures {', '.join(unknown)}; measured: {', '.join(sorted(known))}"
        )
    return [probe for probe in PROBES if set(probe.entries) & set(names)]


# ---------------------------------------------------------------------------- the choice
def choose(current: Candidate, timings: Mapping[Candidate, Sequence[float]]) -> Candidate:
    """The candidate to keep, from each candidate's time at every shape (µs, in one order;
    `current` among them). Another candidate replaces `current` only where it is faster beyond
    a tie at some shape and slower beyond a tie at none, a tie being within `TIE_FRACTION` or
    `TIE_US` of `current`'s time; of several, the lowest sum of time ratios to `current` wins,
    and in a tie of those sums the first in `timings`' order."""
    if current not in timings:
        raise KeyError(f"no timings for the current value {current!r}")
    base = timings[current]
    best, best_score = current, float(len(base))
    for candidate, times in timings.items():
        if candidate == current:
            continue
        if len(times) != len(base):
            raise ValueError(f"{candidate!r}: {len(times)} times, {len(base)} shapes expected")
        margins = [max(TIE_FRACTION * b, TIE_US) for b in base]
        faster = any(t < b - m for t, b, m in zip(times, base, margins, strict=True))
        slower = any(t > b + m for t, b, m in zip(times, base, margins, strict=True))
        score = sum(t / b for t, b in zip(times, base, strict=True))
        if faster and not slower and score < best_score:
            best, best_score = candidate, score
    return best


@dataclass
class Outcome:
    """What a probe found: the times per candidate (µs, per shape), and the values kept."""

    probe: Probe
    current: Candidate
    chosen: Candidate
    timings: dict[Candidate, list[float]]
    written: bool = False


#: Times each candidate of a probe (given its current value first): µs per shape, in the
#: probe's order of ops and shapes. Candidates that cannot be built or measured are left out.
Measure = Callable[[Probe, Sequence[Candidate]], dict[Candidate, list[float]]]


def retune(
    text: str,
    device_class: DeviceClass,
    probes: Sequence[Probe],
    measure: Measure,
    common: bool = False,
) -> tuple[str, list[Outcome]]:
    """tuning.cuh's `text` with the winners of `probes` (`choose`) written: into the column of
    `device_class` for per-class entries, and for the entries of every class only where
    `common`. Returns the new text and what each probe found."""
    table = parse_table(text)
    values: dict[str, Value] = {}
    outcomes = []
    for probe in probes:
        current = probe.current(table, device_class)
        candidates = [current, *(c for c in probe.candidates if c != current)]
        timings = measure(probe, candidates)
        chosen = choose(current, timings)
        outcome = Outcome(probe, current, chosen, timings)
        if chosen != current and (common or probe.per_class(table)):
            values.update(zip(probe.entries, chosen, strict=True))
            outcome.written = True
        outcomes.append(outcome)
    return with_values(text, values, device_class), outcomes


# ------------------------------------------------------------------------ on the GPU
@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous


class Builds:
    """Builds of the kernel sources in `csrc` with other tables, each loaded as
    ``torch.ops.<namespace>`` and cached in `work` by the table's hash."""

    def __init__(self, csrc: Path, work: Path) -> None:
        self.csrc = csrc
        self.work = work
        self.loaded: dict[str, str] = {}

    def namespace(self, table_text: str) -> str:
        """The namespace of the kernels built with `table_text` as tuning.cuh (built or loaded
        now where not yet)."""
        from torch.utils import cpp_extension

        from ir_kernels_cuda import build

        digest = hashlib.sha256(table_text.encode()).hexdigest()[:12]
        namespace = f"ir_cuda_tune_{digest}"
        if digest in self.loaded:
            return self.loaded[digest]
        directory = self.work / namespace
        source = directory / "csrc"
        if not source.exists():
            shutil.copytree(self.csrc, source)
            (source / "tuning.cuh").write_text(table_text)
            ops = source / "ops.cpp"
            plain = "#define IR_CUDA_LIBRARY ir_cuda\n"
            if ops.read_text().count(plain) != 1:
                raise RuntimeError(f"{ops}: no single line {plain.strip()!r} to rename")
            ops.write_text(ops.read_text().replace(plain, f"#define IR_CUDA_LIBRARY {namespace}\n"))
        logger.info("building %s", namespace)
        with _environ("TORCH_CUDA_ARCH_LIST", build.architecture()), build.ninja_on_path():
            cpp_extension.load(
                name=namespace,
                sources=[str(source / name) for name in build.SOURCES],
                extra_include_paths=[str(source)],
                extra_cflags=["-O3"],
                extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr"],
                extra_ldflags=build.runtime_link_flags(),
                build_directory=str(directory),
                is_python_module=False,
            )
        self.loaded[digest] = namespace
        return namespace


@contextlib.contextmanager
def kernels(namespace: str) -> Iterator[None]:
    """The ``cuda`` implementations calling ``torch.ops.<namespace>`` inside the block."""
    import torch

    from ir_kernels_cuda import impls

    previous = impls.KERNELS
    impls.KERNELS = getattr(torch.ops, namespace)
    try:
        yield
    finally:
        impls.KERNELS = previous


def replay_us(fn: Callable[[], Any], calls: int = 20, replays: int = 15) -> float:
    """Median µs of a call of `fn`, replayed from a CUDA graph of `calls` calls."""
    import torch

    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times: list[float] = []
    for _ in range(replays):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)) * 1e3 / calls)
    return statistics.median(times)


def gpu_measure(builds: Builds, text: str, device_class: DeviceClass, rounds: int) -> Measure:
    """`Measure` on this GPU: each candidate built with `text`'s table so changed, its outputs
    checked bitwise against the first candidate's (the current value), then timed (bf16)."""
    import torch

    from ir_kernels_cuda.testing import assert_same_bits
    from ir_spec import ops
    from ir_spec.testing import clone_args, matrix_spec, sample_inputs

    def measure(probe: Probe, candidates: Sequence[Candidate]) -> dict[Candidate, list[float]]:
        spaces: dict[Candidate, str] = {}
        for candidate in candidates:
            changed = with_values(
                text, dict(zip(probe.entries, candidate, strict=True)), device_class
            )
            try:
                spaces[candidate] = builds.namespace(changed)
            except Exception as exc:  # a candidate the kernels cannot take
                logger.warning(
                    "%s = %s: the build failed (%s); left out", probe.name, candidate, exc
                )
        times: dict[Candidate, list[float]] = {c: [] for c in spaces}
        for name in probe.ops:
            op = getattr(ops, name)
            fn = op.impls["cuda"].fn
            for tokens, hidden in probe.shapes:
                spec = matrix_spec(
                    torch.bfloat16, hidden, tokens, "contiguous", device="cuda", **probe.options
                )
                args = sample_inputs(op, spec)
                expected = None
                for namespace in spaces.values():
                    with kernels(namespace):
                        got = fn(*clone_args(args))
                    if expected is None:
                        expected = got
                    else:
                        assert_same_bits(expected, got)
                best = dict.fromkeys(spaces, float("inf"))
                order = list(spaces)
                for r in range(rounds):
                    for candidate in order[r % len(order) :] + order[: r % len(order)]:
                        with kernels(spaces[candidate]):
                            t = replay_us(functools.partial(fn, *args))
                        best[candidate] = min(best[candidate], t)
                for candidate, t in best.items():
                    times[candidate].append(t)
                    logger.info(
                        "%s %s %dx%d %s: %.2f µs", probe.name, name, tokens, hidden, candidate, t
                    )
        return times

    return measure


def report(outcomes: Sequence[Outcome]) -> str:
    lines = []
    for o in outcomes:
        verdict = "kept" if o.chosen == o.current else ("written" if o.written else "reported")
        lines.append(f"{o.probe.name}: {o.current} -> {o.chosen} ({verdict})")
        for candidate, times in o.timings.items():
            shown = ", ".join(f"{t:.2f}" for t in times)
            lines.append(f"    {candidate}: {shown} µs")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", default="", help="comma-separated entries to measure")
    parser.add_argument(
        "--all", action="store_true", help="every probe (default: the per-class entries')"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="write the table (else a diff)")
    parser.add_argument(
        "--common", action="store_true", help="also write entries that hold for every class"
    )
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--json", type=Path, help="the timings, as JSON")
    parser.add_argument("--work", type=Path, help="where the builds go (default: the cache)")
    parser.add_argument("--list", action="store_true", help="list the entries and their probes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    text = args.table.read_text()
    table = parse_table(text)
    if args.list:
        measured = {name for probe in PROBES for name in probe.entries}
        for entry in table.values():
            kind = "per class" if entry.per_class else "every class"
            probe = "measured" if entry.name in measured else "no probe"
            print(f"{entry.name} = {entry.values} ({kind}, {probe}): {entry.rationale}")
        return 0
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.entries:
        try:
            probes = probes_for([n.strip() for n in args.entries.split(",") if n.strip()])
        except ValueError as exc:
            parser.error(str(exc))
    else:
        probes = [p for p in PROBES if args.all or p.per_class(table)]

    import torch

    from ir_kernels_cuda import build

    if not torch.cuda.is_available():
        print("tuning/tune_cuda.py: needs a CUDA device", file=sys.stderr)
        return 1
    device_class = device_class_of(gbps_per_sm(torch.cuda.get_device_properties(0)), table)
    logger.info("%s: device class %s", torch.cuda.get_device_name(), device_class.name)
    builds = Builds(args.table.parent, args.work or build.cache_root() / "tuning")
    new_text, outcomes = retune(
        text,
        device_class,
        probes,
        gpu_measure(builds, text, device_class, args.rounds),
        common=args.common,
    )
    print(report(outcomes))
    if args.json:
        records = [
            {
                "entries": o.probe.entries,
                "current": o.current,
                "chosen": o.chosen,
                "written": o.written,
                "shapes": [[op, *shape] for op in o.probe.ops for shape in o.probe.shapes],
                "times_us": {json.dumps(c): t for c, t in o.timings.items()},
            }
            for o in outcomes
        ]
        payload = {
            "device": torch.cuda.get_device_name(),
            "device_class": device_class.name,
            "probes": records,
        }
        args.json.write_text(json.dumps(payload, indent=1))
    if args.write:
        args.table.write_text(new_text)
    else:
        sys.stdout.writelines(
            difflib.unified_diff(
                text.splitlines(keepends=True),
                new_text.splitlines(keepends=True),
                str(args.table),
                f"{args.table} ({device_class.name})",
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
