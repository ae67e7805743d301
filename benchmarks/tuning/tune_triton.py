"""Re-measure the Triton provider's launch table on this GPU and print it for the card's class.

Every entry of `ir_kernels_triton.launch.tuning` (the `COMMON` entries every card shares, and
the entries of this card's `DeviceClass`) has candidates and the shapes it decides. For each
entry in turn the script puts each candidate into the live table, times the provider's op on
those shapes (CUDA-graph replay, medians) and keeps the fastest under the tie rule: candidates
within 2 % or 0.1 µs a shape of each other tie, and a tie keeps the current value, else the
first (simplest) candidate listed. Each choice stays in the table for the entries after it.

The result is printed as Python to paste into ``launch/tuning.py``: this card's `DeviceClass`,
and the `COMMON` entries whose fastest value here differs from the table (the table keeps one
value for every card: such an entry either moves into the device classes or keeps its value).
Each line carries its rationale, the card and the gain over the current value.

Usage, on a GPU::

    python benchmarks/tuning/tune_triton.py [--ops norms,gates,...] [--out FILE] [--rep MS]

``--ops`` picks entry families (default: all of them): rows, norms, clusters, gates,
static_quant, row_blocks, group_quant, rotary, rotary_cache, qk_norm, kv_cache, programmatic,
device.
``--out FILE`` writes the printed table to FILE and every timing to FILE with a ``.json``
suffix.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: Two timings tie within this fraction of the smaller one...
TIE_FRACTION = 0.02
#: ... or within this many microseconds a shape.
TIE_US_PER_SHAPE = 0.1


@dataclasses.dataclass(frozen=True)
class Shape:
    """One timed call: the provider's `op` on `tokens` rows of `hidden` (`ir_spec.testing`'s
    sample inputs; for the gates `hidden` is the output width), written as
    ``"op TOKENSxHIDDEN [dtype] [strided] [triton_inplace] [programmatic]"``."""

    op: str
    tokens: int
    hidden: int
    dtype: str = "bfloat16"
    layout: str = "contiguous"
    provider: str = "triton"
    programmatic: bool = False

    @classmethod
    def parse(cls, text: str) -> Shape:
        """The shape `text` writes (`Shape`'s form); a ValueError names what does not fit."""
        op, size, *flags = text.split()
        tokens, _, hidden = size.partition("x")
        if not (tokens.isdigit() and hidden.isdigit()):
            raise ValueError(f"shape {text!r}: expected TOKENSxHIDDEN after the op, got {size!r}")
        fields: dict[str, Any] = {}
        for flag in flags:
            if flag in ("bfloat16", "float16", "float32"):
                fields["dtype"] = flag
            elif flag == "strided":
                fields["layout"] = flag
            elif flag == "triton_inplace":
                fields["provider"] = flag
            elif flag == "programmatic":
                fields["programmatic"] = True
            else:
                raise ValueError(
                    f"shape {text!r}: unknown flag {flag!r}; expected a dtype, strided, "
                    "triton_inplace or programmatic"
                )
        return cls(op, int(tokens), int(hidden), **fields)

    def __str__(self) -> str:
        flags = [
            flag
            for flag, on in (
                (self.dtype, self.dtype != "bfloat16"),
                (self.layout, self.layout != "contiguous"),
                (self.provider, self.provider != "triton"),
                ("programmatic", self.programmatic),
            )
            if on
        ]
        return " ".join([self.op, f"{self.tokens}x{self.hidden}", *flags])


@dataclasses.dataclass(frozen=True)
class Entry:
    """A table entry (`path`: ``family.field`` of `COMMON`, or ``device.field`` of the card's
    `DeviceClass`), its candidates, simplest first, and the shapes it decides."""

    path: str
    candidates: tuple[Any, ...]
    shapes: tuple[Shape, ...]

    @property
    def family(self) -> str:
        return self.path.split(".")[0]


@dataclasses.dataclass(frozen=True)
class Table:
    """The table being tuned: `COMMON` and this card's device class."""

    common: Any
    device: Any

    def get(self, path: str) -> Any:
        family, name = path.split(".")
        if family == "device":
            return getattr(self.device, name)
        return getattr(getattr(self.common, family), name)

    def with_value(self, path: str, value: Any) -> Table:
        family, name = path.split(".")
        if family == "device":
            return dataclasses.replace(
                self, device=dataclasses.replace(self.device, **{name: value})
            )
        group = dataclasses.replace(getattr(self.common, family), **{name: value})
        return dataclasses.replace(self, common=dataclasses.replace(self.common, **{family: group}))


@dataclasses.dataclass(frozen=True)
class Result:
    """What the sweep of one entry found: microseconds per candidate (summed over its shapes)."""

    path: str
    current: Any
    chosen: Any
    timings: tuple[tuple[Any, float], ...]
    shapes: tuple[str, ...]

    def gain(self) -> float:
        """How much faster the chosen value is than the current one (a fraction)."""
        times: dict[Any, float] = dict(self.timings)
        return 1.0 - times[self.chosen] / times[self.current]


def ties(a: float, b: float, shapes: int) -> bool:
    """Whether two timings (microseconds summed over `shapes` shapes) tie."""
    return abs(a - b) <= max(TIE_FRACTION * min(a, b), TIE_US_PER_SHAPE * shapes)


def choose(timings: Mapping[Any, float], current: Any, shapes: int) -> Any:
    """The candidate to keep: the current one where it ties with the fastest, else the first
    (in `timings`' order, simplest first) that ties with the fastest."""
    fastest = min(timings.values())
    if current in timings and ties(timings[current], fastest, shapes):
        return current
    return next(value for value, time in timings.items() if ties(time, fastest, shapes))


def sweep(
    entries: Sequence[Entry],
    table: Table,
    measure: Callable[[Table, Shape], float],
    log: Callable[[str], None] = print,
) -> tuple[Table, list[Result]]:
    """Sweep `entries` in order from `table`: `measure(table, shape)` times a shape with that
    table live (microseconds). Returns the table with every entry's choice and the results."""
    results = []
    for entry in entries:
        current = table.get(entry.path)
        candidates = (
            entry.candidates if current in entry.candidates else (current, *entry.candidates)
        )
        timings = {}
        for value in candidates:
            trial = table.with_value(entry.path, value)
            try:
                timings[value] = sum(measure(trial, s) for s in entry.shapes)
            except Exception as error:  # a candidate the kernels cannot launch is left out
                log(f"{entry.path}={value!r}: not launchable ({type(error).__name__}: {error})")
        if current not in timings:
            raise RuntimeError(f"{entry.path}: the current value {current!r} did not launch")
        chosen = choose(timings, current, len(entry.shapes))
        table = table.with_value(entry.path, chosen)
        result = Result(
            entry.path,
            current,
            chosen,
            tuple(timings.items()),
            tuple(str(s) for s in entry.shapes),
        )
        results.append(result)
        verdict = "kept" if chosen == current else f"{result.gain():.1%} faster"
        log(f"{entry.path}: {chosen!r} ({verdict}; {current!r} before)")
    return table, results


def render(
    value: Any, notes: Mapping[str, str] | None = None, path: str = "", indent: int = 0
) -> str:
    """`value` as the Python that builds it (dataclasses by keyword, one field a line), each
    field whose dotted `path` has a note preceded by it as a comment."""
    notes = notes or {}
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return repr(value)
    pad = " " * (indent + 4)
    lines = [f"{type(value).__name__}("]
    for field in dataclasses.fields(value):
        name = f"{path}.{field.name}" if path else field.name
        if name in notes:
            lines.append(f"{pad}# {notes[name]}")
        inner = render(getattr(value, field.name), notes, name, indent + 4)
        lines.append(f"{pad}{field.name}={inner},")
    lines.append(" " * indent + ")")
    return "\n".join(lines)


def note_for(result: Result, card: str) -> str:
    """The rationale line of a re-measured entry."""
    shapes = ", ".join(result.shapes)
    if result.chosen == result.current:
        return f"{card}: kept, no candidate faster beyond a tie ({shapes})"
    return f"{card}: {result.gain():.1%} faster than {result.current!r} ({shapes})"


def report(table: Table, results: Sequence[Result], card: str) -> str:
    """The printed table: this card's device class, then the `COMMON` entries whose fastest
    value here differs from the table."""
    device_notes = {
        r.path.split(".", 1)[1]: note_for(r, card) for r in results if r.path.startswith("device.")
    }
    text = [f"# {card}: device class {table.device.name!r}", render(table.device, device_notes)]
    moved = {
        r.path: note_for(r, card)
        for r in results
        if not r.path.startswith("device.") and r.chosen != r.current
    }
    if moved:
        text.append(
            "# COMMON, where the entries noted are faster here with another value than the "
            "table's: move them into the device classes, or keep them"
        )
        text.append(render(table.common, moved))
    else:
        text.append("# every COMMON entry measured keeps its value on this card")
    return "\n".join(text) + "\n"


def entries() -> list[Entry]:
    """Every entry of the table with its candidates and shapes (`Shape.parse`'s form)."""

    def e(path: str, candidates: tuple[Any, ...], *shapes: str) -> Entry:
        return Entry(path, candidates, tuple(Shape.parse(text) for text in shapes))

    norm, add = "rms_norm", "fused_add_rms_norm"
    static, dynamic = "rms_norm_static_quant_fp8", "rms_norm_dynamic_quant_fp8"
    add_static = "fused_add_rms_norm_static_quant_fp8"
    silu, gelu, silu_q = "silu_and_mul", "gelu_and_mul", "silu_and_mul_static_quant_fp8"
    squant, dquant, gquant = "static_quant_fp8", "dynamic_quant_fp8", "group_quant_fp8"
    rotary = "rotary_embedding"
    qk_rotary, rotary_cache = "qk_norm_rotary_embedding", "rotary_embedding_write_kv_cache"
    cache = "write_kv_cache"
    return [
        e("rows.max_single_pass", (8192, 16384, 32768), f"{norm} 1024x16384", f"{norm} 1024x20000"),
        e("rows.loop_block", (2048, 4096, 8192), f"{norm} 16x32768", f"{norm} 1024x32768"),
        e(
            "rows.elements_per_warp",
            (256, 512, 1024),
            f"{dquant} 16x4096",
            f"{dquant} 1024x4096",
            f"{norm} 1024x8192",
        ),
        e("rows.max_warps", (8, 16, 32), f"{norm} 1024x16384", f"{dquant} 1024x16384"),
        e(
            "norms.few_rows",
            (128, 256, 512),
            f"{add} 256x4096",
            f"{add} 512x4096",
            f"{static} 512x4096",
        ),
        e("norms.quant_warps", (2, 4, 8), f"{static} 16x2048", f"{dynamic} 4096x2048"),
        e("norms.wide_quant_warps", (4, 8, 16), f"{dynamic} 1x8192", f"{dynamic} 4096x8192"),
        e(
            "norms.wide_quant_block",
            (4096, 8192, 16384),
            f"{dynamic} 1x4096",
            f"{dynamic} 4096x4096",
            f"{static} 4096x8192",
        ),
        e(
            "norms.wide_static_quant_block",
            (2048, 4096, 8192),
            f"{static} 16x4096",
            f"{static} 4096x4096",
        ),
        e(
            "norms.residual_elements_per_warp",
            (128, 256, 512),
            f"{add} 16x2048",
            f"{add} 16x4096",
            f"{add} 1024x4096",
        ),
        e("norms.residual_min_warps", (2, 4, 8), f"{add} 16x512", f"{add} 1024x512"),
        e("norms.late_weight_l2_share", (1.0, 2.0, 4.0), f"{add} 1024x4096", f"{add} 2048x8192"),
        e("norms.registers", (32, 40, 48), f"{norm} 1024x8192", f"{norm} 2048x4096"),
        e("norms.registers_l2_share", (0.125, 0.25, 0.5), f"{norm} 512x4096", f"{norm} 1024x8192"),
        e("norms.residual_registers", (32, 48, 64), f"{add} 4096x8192", f"{add} 16384x8192"),
        e(
            "norms.residual_registers_block",
            (4096, 8192, 16384),
            f"{add} 16384x4096",
            f"{add} 4096x8192",
        ),
        e(
            "norms.residual_registers_l2_share",
            (1.0, 2.0, 4.0),
            f"{add} 2048x8192",
            f"{add} 4096x8192",
        ),
        e(
            "norms.reload_l2_share",
            (2.0, 4.0, 8.0),
            f"{norm} 4096x8192",
            f"{norm} 16384x8192",
            f"{add} 16384x8192",
        ),
        e(
            "norms.evict_first_l2_share",
            (1.0, 1.2, 1.5),
            f"{norm} 4096x4096",
            f"{static} 4096x4096",
        ),
        e(
            "norms.evict_first_l2_share_residual",
            (1.0, 1.3, 1.5),
            f"{add} 4096x4096",
            f"{add_static} 1024x8192",
        ),
        e(
            "norms.row_split",
            (1, 2, 4, 8),
            f"{norm} 1x8192",
            f"{static} 1x8192",
            f"{static} 16x8192",
        ),
        e("norms.wide_split_block", (4096, 8192, 16384), f"{norm} 4x4096", f"{static} 4x8192"),
        e("norms.wide_split_rows", (8, 16, 32), f"{static} 8x8192", f"{static} 16x8192"),
        e("norms.wide_half_split_rows", (16, 32, 64), f"{static} 32x8192", f"{static} 64x8192"),
        e("norms.split_block", (2048, 4096, 8192), f"{norm} 4x2048", f"{norm} 4x4096"),
        e("norms.split_rows", (4, 8, 16), f"{norm} 8x4096", f"{norm} 16x4096"),
        e("norms.split_rows_fp8", (2, 4, 8), f"{add_static} 4x4096", f"{dynamic} 4x4096"),
        e("norms.half_split_rows", (8, 16, 32), f"{norm} 16x4096", f"{norm} 32x4096"),
        e("norms.static_split", (1, 2, 4), f"{static} 1x4096", f"{static} 16x4096"),
        e(
            "clusters.max_rows",
            (8, 16, 32),
            f"{add} 16x8192",
            f"{add} 32x8192",
            f"{dynamic} 32x8192",
        ),
        e("clusters.norm_blocks", (4, 8), f"{add} 16x8192", f"{dynamic} 16x8192"),
        e(
            "clusters.norm_widths",
            ((8192,), (4096, 8192), (2048, 4096, 8192)),
            f"{add} 16x4096 triton_inplace",
            f"{add} 16x2048 triton_inplace",
        ),
        e("clusters.wide_norm_width", (4096, 8192), f"{add} 16x4096", f"{dynamic} 16x4096"),
        e("clusters.plain_norm_past_rows", (2, 4, 8, 16), f"{norm} 4x8192", f"{norm} 8x8192"),
        e("clusters.quant_blocks", (2, 4, 8), f"{dquant} 1x8192", f"{dquant} 16x8192"),
        e("clusters.quant_block_warps", (1, 2), f"{dquant} 1x8192", f"{dquant} 16x8192"),
        e(
            "clusters.quant_widths",
            (frozenset({8192}), frozenset({4096, 8192})),
            f"{dquant} 16x4096",
            f"{dquant} 16x8192",
        ),
        e(
            "gates.decode_outputs",
            (1 << 16, 1 << 17, 1 << 18),
            f"{silu} 8x14336",
            f"{silu} 16x14336",
        ),
        e(
            "gates.decode_launch",
            ((256, 4), (512, 4), (512, 8), (1024, 8)),
            f"{silu} 1x14336",
            f"{silu} 16x5632",
        ),
        e(
            "gates.silu_mid_outputs",
            (1 << 18, 1 << 19, 1 << 20),
            f"{silu} 16x28672",
            f"{silu} 32x28672",
        ),
        e(
            "gates.silu_mid_launch",
            ((1024, 4), (1024, 8), (2048, 8)),
            f"{silu} 16x14336",
            f"{silu_q} 16x28672",
        ),
        e(
            "gates.launch",
            ((512, 4), (1024, 4), (1024, 8), (2048, 8)),
            f"{silu} 128x28672",
            f"{silu_q} 128x28672",
        ),
        e("gates.streamed_silu", ((1024, 4), (1024, 8), (2048, 8)), f"{silu} 4096x28672"),
        e("gates.streamed_gelu", ((1024, 8), (2048, 8), (2048, 4)), f"{gelu} 4096x28672"),
        e(
            "gates.gelu_narrow_outputs",
            (1 << 12, 1 << 13, 1 << 14),
            f"{gelu} 1x5632",
            f"{gelu} 1x14336",
        ),
        e(
            "gates.gelu_narrow_launch",
            ((128, 4), (256, 4), (256, 2)),
            f"{gelu} 1x5632",
            f"{gelu} 1x8192",
        ),
        e(
            "gates.gelu_decode_launch",
            ((512, 4), (512, 8), (1024, 8)),
            f"{gelu} 1x14336",
            f"{gelu} 16x5632",
        ),
        e(
            "gates.gelu_mid_outputs",
            (1 << 19, 1 << 20, 1 << 21),
            f"{gelu} 64x14336",
            f"{gelu} 128x14336",
        ),
        e(
            "gates.gelu_mid_launch",
            ((512, 4), (512, 8), (1024, 4)),
            f"{gelu} 16x28672",
            f"{gelu} 32x28672",
        ),
        e(
            "gates.gelu_wide_launch",
            ((512, 1), (512, 2), (1024, 4)),
            f"{gelu} 128x28672",
            f"{gelu} 1024x14336",
        ),
        e(
            "static_quant.decode_outputs",
            (1 << 16, 1 << 17, 1 << 18),
            f"{squant} 16x8192",
            f"{squant} 32x8192",
        ),
        e(
            "static_quant.decode_launch",
            ((256, 4), (512, 4), (512, 8), (1024, 8)),
            f"{squant} 1x8192",
            f"{squant} 16x4096",
        ),
        e(
            "static_quant.launch",
            ((1024, 4), (2048, 4), (2048, 8), (4096, 8)),
            f"{squant} 128x8192",
            f"{squant} 1024x8192",
        ),
        e(
            "static_quant.streamed_launch",
            ((2048, 4), (2048, 8), (4096, 8)),
            f"{squant} 16384x8192",
        ),
        e(
            "row_blocks.few_rows",
            (32, 64, 128),
            f"{silu} 64x4096 strided",
            f"{squant} 128x4096 strided",
        ),
        e(
            "row_blocks.few_block",
            (256, 512, 1024),
            f"{silu} 16x4096 strided",
            f"{squant} 16x4096 strided",
        ),
        e(
            "row_blocks.few_warps",
            (2, 4, 8),
            f"{silu} 16x4096 strided",
            f"{squant} 16x4096 strided",
        ),
        e(
            "row_blocks.block",
            (1024, 2048, 4096),
            f"{silu} 1024x14336 strided",
            f"{squant} 1024x8192 strided",
        ),
        e("row_blocks.warps", (4, 8, 16), f"{silu} 1024x14336 strided"),
        e(
            "row_blocks.warps_fp8",
            (2, 4, 8),
            f"{silu_q} 1024x14336 strided",
            f"{squant} 1024x8192 strided",
        ),
        e("row_blocks.warps_heavy", (1, 2, 4), f"{gelu} 1024x14336 strided"),
        e("group_quant.decode_rows", (8, 16, 32), f"{gquant} 16x4096", f"{gquant} 32x4096"),
        e(
            "group_quant.decode_launch",
            ((4, 4), (8, 4), (8, 2), (16, 4)),
            f"{gquant} 1x4096",
            f"{gquant} 16x8192",
        ),
        e("group_quant.mid_rows", (512, 1024, 2048), f"{gquant} 1024x4096", f"{gquant} 2048x4096"),
        e(
            "group_quant.mid_launch",
            ((8, 4), (16, 2), (16, 4), (32, 8)),
            f"{gquant} 128x4096",
            f"{gquant} 1024x8192",
        ),
        e("group_quant.narrow_groups", (8, 16, 32), f"{gquant} 16384x2048", f"{gquant} 4096x4096"),
        e("group_quant.narrow_launch", ((8, 4), (16, 4), (16, 8)), f"{gquant} 16384x2048"),
        e(
            "group_quant.program_elements",
            (2048, 4096, 8192),
            f"{gquant} 4096x4096",
            f"{gquant} 4096x8192",
        ),
        e("rotary.warps", (2, 4, 8), f"{rotary} 1x4096", f"{rotary} 1024x4096"),
        e("rotary.few_tokens", (32, 64, 128), f"{rotary} 64x4096", f"{rotary} 128x4096"),
        # the QK-norm kernel takes the rotary's heads a program too
        e(
            "rotary.few_heads",
            (2, 4, 8),
            f"{rotary} 1x8192",
            f"{rotary} 16x4096",
            f"{qk_rotary} 16x4096",
        ),
        e("rotary.mid_tokens", (1024, 2048, 4096), f"{rotary} 2048x4096", f"{rotary} 4096x4096"),
        e(
            "rotary.mid_heads",
            (4, 8, 16),
            f"{rotary} 256x4096",
            f"{rotary} 1024x8192",
            f"{qk_rotary} 1024x4096",
        ),
        e(
            "rotary_cache.warps",
            (2, 4, 8),
            f"{rotary_cache} 1x4096",
            f"{rotary_cache} 1024x4096",
            f"{rotary_cache} 8192x4096",
        ),
        e(
            "rotary_cache.few_tokens",
            (32, 64, 128),
            f"{rotary_cache} 64x4096",
            f"{rotary_cache} 128x4096",
        ),
        e(
            "rotary_cache.few_heads",
            (2, 4, 8),
            f"{rotary_cache} 16x4096",
            f"{rotary_cache} 16x8192",
        ),
        e(
            "rotary_cache.mid_tokens",
            (1024, 2048, 4096),
            f"{rotary_cache} 2048x4096",
            f"{rotary_cache} 4096x4096",
        ),
        e(
            "rotary_cache.mid_heads",
            (8, 16, 32),
            f"{rotary_cache} 1024x4096",
            f"{rotary_cache} 2048x4096",
            f"{rotary_cache} 1024x8192",
            f"{rotary_cache} 2048x8192",
        ),
        e(
            "qk_norm.tile_elements",
            (256, 512, 1024),
            f"{qk_rotary} 1x4096",
            f"{qk_rotary} 1024x4096",
            f"{qk_rotary} 16384x8192",
        ),
        e("qk_norm.warps", (2, 4, 8), f"{qk_rotary} 16x4096", f"{qk_rotary} 16384x4096"),
        e("kv_cache.block", (512, 1024, 2048), f"{cache} 1x1024", f"{cache} 16384x1024"),
        e("kv_cache.warps", (2, 4, 8), f"{cache} 16x1024", f"{cache} 16384x1024"),
        e(
            "programmatic.max_threads",
            (64 * 1024, 128 * 1024, 256 * 1024),
            f"{squant} 1024x8192 programmatic",
            f"{gquant} 4096x2048 programmatic",
        ),
        e(
            "device.streamed_gates",
            (None, (1024, 4), (1024, 8), (2048, 8)),
            f"{silu} 4096x28672",
            f"{gelu} 4096x28672",
        ),
        e(
            "device.streamed_norm_cap_block",
            (None, 4096, 8192),
            f"{norm} 4096x8192",
            f"{norm} 16384x4096",
        ),
        e("device.reload_block", (None, 4096, 8192), f"{norm} 16384x8192", f"{add} 16384x8192"),
        e(
            "device.streamed_group_elements",
            (None, 4096, 8192, 16384),
            f"{gquant} 16384x4096",
            f"{gquant} 16384x8192",
        ),
        e(
            "device.streamed_group_launch",
            (None, (8, 4), (16, 4), (16, 8)),
            f"{gquant} 16384x4096",
            f"{gquant} 16384x8192",
        ),
    ]


@contextmanager
def live(table: Table) -> Iterator[None]:
    """`table` in force in the provider (its `COMMON` and this card's class), launch plans
    dropped on the way in and out so that the rules run again."""
    from ir_kernels_triton import clear_launch_plans
    from ir_kernels_triton.launch import tuning

    saved = tuning.COMMON, tuning.DEVICE_CLASSES, tuning.UNKNOWN_BANDWIDTH
    name = table.device.name
    tuning.COMMON = table.common
    tuning.DEVICE_CLASSES = tuple(table.device if c.name == name else c for c in saved[1])
    if saved[2].name == name:
        tuning.UNKNOWN_BANDWIDTH = table.device
    clear_launch_plans()
    try:
        yield
    finally:
        tuning.COMMON, tuning.DEVICE_CLASSES, tuning.UNKNOWN_BANDWIDTH = saved
        clear_launch_plans()


def gpu_measure(rep_ms: int) -> Callable[[Table, Shape], float]:
    """A `measure` for `sweep`: the median of CUDA-graph replays of the provider's op on fresh
    sample inputs, in microseconds, with the table live."""
    import torch
    from triton.testing import do_bench_cudagraph

    from ir_kernels_triton import programmatic_launch
    from ir_spec import ops
    from ir_spec.testing import matrix_spec, sample_inputs

    def measure(table: Table, s: Shape) -> float:
        op = getattr(ops, s.op)
        spec = matrix_spec(getattr(torch, s.dtype), s.hidden, s.tokens, s.layout, device="cuda")
        args = sample_inputs(op, spec)
        fn = op.impls[s.provider].fn
        with live(table), programmatic_launch(s.programmatic):
            fn(*args)  # compiled outside the graph
            ms = do_bench_cudagraph(lambda: fn(*args), rep=rep_ms, return_mode="median")
        return float(ms) * 1000.0

    return measure


def this_card() -> tuple[str, Table]:
    """The GPU's description and the table as it stands for its class."""
    import torch

    from ir_kernels_triton.launch import tuning
    from ir_kernels_triton.launch.device import dram_gbps_per_sm, sm_count

    probe = torch.empty(1, device="cuda")
    gbps = dram_gbps_per_sm(probe)
    card = torch.cuda.get_device_name()
    described = f"{card}, {sm_count(probe)} SMs, " + (
        f"{gbps:.1f} GB/s per SM" if gbps is not None else "bandwidth not reported"
    )
    return described, Table(tuning.COMMON, tuning.device_class(gbps))


def main(argv: Sequence[str] | None = None) -> int:
    all_entries = entries()
    families = sorted({entry.family for entry in all_entries})
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--ops", default=",".join(families), help="entry families, comma-separated")
    parser.add_argument("--out", type=Path, help="write the table here (timings beside, .json)")
    parser.add_argument("--rep", type=int, default=20, help="milliseconds of replays a timing")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.ops.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(families))
    if unknown:
        parser.error(f"--ops: unknown families {unknown}; expected some of {families}")
    import torch

    if not torch.cuda.is_available():
        print(
            "benchmarks/tuning/tune_triton.py times kernels on a GPU; none is visible",
            file=sys.stderr,
        )
        return 2
    card, table = this_card()
    print(f"# {card}", file=sys.stderr)
    picked = [entry for entry in all_entries if entry.family in chosen]
    tuned, results = sweep(
        picked, table, gpu_measure(args.rep), log=lambda s: print(s, file=sys.stderr)
    )
    text = report(tuned, results, card.split(",")[0])
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)
        timings = [
            {**dataclasses.asdict(r), "timings": [[repr(v), t] for v, t in r.timings]}
            for r in results
        ]
        args.out.with_suffix(".json").write_text(
            json.dumps({"card": card, "results": timings}, indent=1, default=repr)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
