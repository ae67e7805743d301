"""Random programs of IR ops, the differential fuzzer's inputs.

A `Program` is a straight-line Python function over tensors: each step calls one catalog op
(``ops.<name>(...)`` or ``ops.<name>.maybe_inplace(...)``) on the program's inputs, on earlier
steps' results, or on views of them (column slices, stride-0 rows, a row as a weight), so that
chains and diamonds form. `generate` builds one from a seed alone: the same seed gives the same
program (its source, its inputs' values) on every machine of a device type.

Inputs come from each op's input generator (`ir_spec.testing.sample_inputs`, with the option
variants of `ir_spec.testing.OPTION_VARIANTS`), so every argument is one the op's contract
allows; the caches of the ops that store into them are sized for `MAX_TOKENS` tokens, so that
one program runs on any token count up to that. The builder runs each step's native function
on the generation's tensors as it goes: a choice the op's check refuses is drawn again.

A program may carry one `Defect`: a donated tensor read again (`reuse`), the same tensor as
both activations (`same`), overlapping views as activations (`overlap`), or a weight that is a
row of an activation (`weight_row`), each at a ``maybe_inplace`` call. `docs/concepts/inplace.md`
says which runs must refuse them; `fuzz_runners` checks that they do.
"""

from __future__ import annotations

import linecache
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch
from torch import Tensor

from ir_spec import IrOp, ops
from ir_spec.catalog.kv_cache import sample_cache
from ir_spec.testing import (
    OPTION_VARIANTS,
    SampleSpec,
    catalog_ops,
    needs_process_group,
    sample_inputs,
)

#: Token counts a program is generated for (0 and 1 often: decode and empty batches).
TOKENS = (0, 1, 1, 2, 3, 4, 5, 7, 8, 11, 16)
#: The most tokens a program runs with; caches are sized for it.
MAX_TOKENS = max(TOKENS)
#: Tokens a cache holds: those of the largest leading shape, ``(2, MAX_TOKENS)``.
CACHE_TOKENS = 2 * MAX_TOKENS
#: Widths of fresh activations (odd ones included); a step consuming a value takes its width.
HIDDEN = (1, 2, 3, 5, 8, 12, 16, 24, 31, 32, 40, 48, 64, 72, 96, 100, 128, 136)
#: Extra elements after each row of a fresh activation (0: dense rows).
PADDING = (0, 0, 0, 3, 13)
DefectKind = Literal["reuse", "same", "overlap", "weight_row"]
DEFECTS: tuple[DefectKind, ...] = ("reuse", "same", "overlap", "weight_row")
#: Share of programs generated with a defect (some cannot place it and stay legal).
DEFECT_RATE = 0.3
#: Parameters other than row activations whose leading shape is the tokens'.
TOKEN_PARAMS = ("positions", "slot_mapping")
#: 1-D weight parameters a row of an activation may stand in for.
WEIGHTS = ("weight", "q_weight", "k_weight")
#: Parameters that are tables of positions, never rows of tokens, though a table of as many
#: rows as the program's tokens has a row's shape.
TABLES = ("cos_sin_cache",)
#: Rows of the rotary ops' cos/sin tables (1: every position 0). The catalog's default,
#: 4096, would make building the table most of a program's generation time.
MAX_POSITIONS = (1, 9, 64, 256)
#: Steps per program.
MIN_STEPS, MAX_STEPS = 2, 6


def fuzzed_ops() -> list[IrOp]:
    """The catalog ops programs call: every one but those that need a process group (the
    collectives run in worlds of processes, tested apart)."""
    return [op for op in catalog_ops() if not needs_process_group(op)]


def program_dtypes(device: str) -> tuple[torch.dtype, ...]:
    """Activation dtypes programs use on `device`: bfloat16 only on a GPU (Triton's
    interpreter supports it in part)."""
    if device.startswith("cuda"):
        return (torch.float32, torch.float16, torch.bfloat16)
    return (torch.float32, torch.float16)


@dataclass(frozen=True)
class Sample:
    """What a step's input generator is asked for (beyond the program's lead shape and
    dtype): its ``hidden_size``, ``row_padding`` and ``options``."""

    op: str
    hidden: int
    padding: int
    options: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class InputSpec:
    """A program input: argument `position` of step `step`'s sample, or (`step` None) a
    plain random activation of `width` columns with `padding`; `tokens_at`: the dimension of
    the token count, if it has one; `column_major`: stored with rows one element apart (a
    transposed buffer)."""

    name: str
    param: str
    step: int | None
    position: int = -1
    tokens_at: int | None = None
    width: int = 0
    padding: int = 0
    column_major: bool = False


@dataclass(frozen=True)
class Step:
    """One op call: argument expressions (names, views of them, literals), result names."""

    op: str
    inplace: bool
    args: tuple[str, ...]
    results: tuple[str, ...]

    def line(self) -> str:
        call = f"ops.{self.op}{'.maybe_inplace' if self.inplace else ''}({', '.join(self.args)})"
        if not self.results:
            return call
        return f"{', '.join(self.results)} = {call}"


@dataclass(frozen=True)
class Checked:
    """A tensor a run's result is compared on: a returned value or an input the program
    writes (a cache), with the op whose tolerance applies and its chain `depth` (ops on the
    longest path from the inputs)."""

    name: str
    op: str
    depth: int


@dataclass(frozen=True)
class Defect:
    """What makes a program illegal: `kind` at step `step` (a ``maybe_inplace`` call of `op`);
    `arguments`: the parameters the refusal names (``reuse``: the donated one; otherwise the
    activation and the argument sharing its memory). For ``reuse``: `value`, the donated
    value read again, and `returned`, whether the program reads it by returning it."""

    kind: DefectKind
    step: int
    op: str
    arguments: tuple[str, ...]
    value: str = ""
    returned: bool = False


@dataclass(frozen=True)
class Program:
    """A generated program; `seed` alone rebuilds it (`generate`)."""

    seed: int
    device: str
    dtype: torch.dtype
    tokens: int
    lead_rank: int
    inputs: tuple[InputSpec, ...]
    samples: tuple[Sample, ...]
    steps: tuple[Step, ...]
    outputs: tuple[Checked, ...]
    written: tuple[Checked, ...]
    donated: frozenset[str]
    defect: Defect | None
    min_tokens: int
    features: frozenset[str] = field(compare=False)

    def lead(self, tokens: int) -> tuple[int, ...]:
        """The activations' leading shape for `tokens` tokens."""
        return (tokens,) if self.lead_rank == 1 else (2, tokens)

    @property
    def token_dim(self) -> int:
        """The dimension of the token count in the activations (and positions, slots)."""
        return self.lead_rank - 1

    def source(self, *, relate_tokens: bool = False) -> str:
        """The program as Python source: ``def program(<inputs>): ...``. `relate_tokens`:
        first say (``torch._check``) that every input's token dimension has the first's size,
        which piecewise compilation needs where no op relates two inputs (its one dynamic
        size)."""
        params = ", ".join(i.name for i in self.inputs)
        body = []
        if relate_tokens:
            tokens = [(i.name, i.tokens_at) for i in self.inputs if i.tokens_at is not None]
            body += [
                f"    torch._check({name}.shape[{dim}] == {tokens[0][0]}.shape[{dim}])"
                for name, dim in tokens[1:]
            ]
        body += [f"    {step.line()}" for step in self.steps]
        body.append(f"    return ({''.join(f'{o.name}, ' for o in self.outputs)})")
        return "\n".join([f"def program({params}):", *body]) + "\n"

    def function(
        self, namespace: Mapping[str, Any], *, relate_tokens: bool = False
    ) -> Callable[..., Any]:
        """The program compiled from `source` with `namespace` as its globals (``ops``: the
        op namespace, or a stand-in that records the calls). Each call makes a new code
        object, so that Dynamo keeps no compiled code of another program under it; its source
        is in `linecache`, so tracebacks and the IR passes' messages show the line."""
        filename = f"<ir fuzz program seed={self.seed}>"
        text = self.source(relate_tokens=relate_tokens)
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        scope: dict[str, Any] = {"torch": torch, **namespace}
        exec(compile(text, filename, "exec"), scope)
        fn: Callable[..., Any] = scope["program"]
        return fn

    def make_inputs(self, tokens: int, value_seed: int) -> list[Tensor]:
        """Fresh inputs for `tokens` tokens (in ``min_tokens..MAX_TOKENS``), their values
        drawn from `value_seed`: the same arguments give the same tensors."""
        if not self.min_tokens <= tokens <= MAX_TOKENS:
            raise ValueError(
                f"tokens={tokens}: expected {self.min_tokens}..{MAX_TOKENS} for program "
                f"seed={self.seed}"
            )
        lead = self.lead(tokens)
        samples: dict[int, tuple[Any, ...]] = {}
        made: list[Tensor] = []
        for k, spec in enumerate(self.inputs):
            if spec.step is None:
                t = plain_input(spec, lead, self.dtype, self.device, _seed(value_seed, 1000 + k))
            else:
                if spec.step not in samples:
                    samples[spec.step] = sample_args(
                        self.samples[spec.step],
                        lead,
                        self.dtype,
                        self.device,
                        _seed(value_seed, spec.step),
                    )
                t = samples[spec.step][spec.position]
            made.append(column_major(t) if spec.column_major else t)
        return made

    def token_inputs(self) -> dict[str, int]:
        """Input name -> the dimension holding the token count (activations, positions,
        slots; not weights, tables or caches), for piecewise compilation's dynamic dims."""
        return {i.name: i.tokens_at for i in self.inputs if i.tokens_at is not None}

    @property
    def returns_donated_input(self) -> bool:
        """Whether the program returns, as it is, an input it donated: Dynamo returns such an
        input outside the compiled graph, where ir-passes' donation check does not look."""
        defect = self.defect
        return (
            defect is not None and defect.returned and defect.value in {i.name for i in self.inputs}
        )

    def describe(self) -> str:
        """A few lines: seed, dtype, tokens, defect, then the source."""
        defect = (
            "none"
            if self.defect is None
            else (
                f"{self.defect.kind} at step {self.defect.step} (ir.{self.defect.op}, "
                f"{', '.join(self.defect.arguments)})"
            )
        )
        return (
            f"program seed={self.seed}: {self.dtype}, lead {self.lead(self.tokens)}, "
            f"defect: {defect}\n{self.source()}"
        )


def _seed(value_seed: int, salt: int) -> int:
    return (value_seed * 1_000_003 + salt * 7_919 + 17) % (1 << 62)


def sample_args(
    sample: Sample, lead: tuple[int, ...], dtype: torch.dtype, device: str, seed: int
) -> tuple[Any, ...]:
    """The op's generated arguments for `sample`; the caches of an op that stores into them
    sized for `CACHE_TOKENS` tokens (the slots: the first of a random permutation), so that
    one program's caches keep their shape whatever its token count."""
    op = getattr(ops, sample.op)
    spec = SampleSpec(
        batch_shape=lead,
        hidden_size=sample.hidden,
        dtype=dtype,
        device=device,
        seed=seed,
        row_padding=sample.padding,
        options=dict(sample.options),
    )
    args = list(sample_inputs(op, spec))
    if op.mutates:
        names = list(op.parameter_names)
        key_cache = args[names.index("key_cache")]
        gen = torch.Generator(device=device).manual_seed(seed + 1)
        big = replace(spec, batch_shape=(CACHE_TOKENS,))
        k, v, slots = sample_cache(big, gen, CACHE_TOKENS, key_cache.shape[2], key_cache.shape[3])
        args[names.index("key_cache")] = k
        args[names.index("value_cache")] = v
        args[names.index("slot_mapping")] = slots[: math.prod(lead)].reshape(lead)
    return tuple(args)


def plain_input(
    spec: InputSpec, lead: tuple[int, ...], dtype: torch.dtype, device: str, seed: int
) -> Tensor:
    """A random activation of `spec.width` columns (for views: slices, overlaps)."""
    sample = SampleSpec(batch_shape=lead, dtype=dtype, device=device, row_padding=spec.padding)
    gen = torch.Generator(device=device).manual_seed(seed)
    return sample.randn(gen, spec.width)


def column_major(t: Tensor) -> Tensor:
    """`t` (2-D) with the same values, stored transposed: rows one element apart."""
    return t.mT.contiguous().mT


def _literal(value: Any) -> str:
    if value is None or isinstance(value, bool | int | float | str):
        return repr(value)
    raise TypeError(f"no literal for argument {value!r}")


@dataclass
class _Value:
    """A row value of the pool: `lead` + (`width`,), of the program's dtype."""

    name: str
    width: int
    depth: int
    producer: str  # the op that made it ("" for an input)


@dataclass
class _Region:
    """Columns ``[start, stop)`` of value `root`, as an argument expression reads them."""

    root: str
    start: int
    stop: int

    def meets(self, other: _Region) -> bool:
        return self.root == other.root and self.start < other.stop and other.start < self.stop


class _Builder:
    """Builds a program step by step, running each step natively on the generation's
    tensors: a step that the op's check refuses is drawn again."""

    def __init__(self, seed: int, device: str) -> None:
        self.seed = seed
        self.target = device  # where the program runs; it is built on the CPU
        self.device = "cpu"
        self.rng = random.Random(seed)
        rng = self.rng
        self.dtype = rng.choice(program_dtypes(self.target))
        self.tokens = rng.choice(TOKENS)
        self.lead_rank = 2 if rng.random() < 0.15 else 1
        self.lead = (self.tokens,) if self.lead_rank == 1 else (2, self.tokens)
        self.want: DefectKind | None = rng.choice(DEFECTS) if rng.random() < DEFECT_RATE else None
        self.defect: Defect | None = None
        self.reused_output: str | None = None  # a donated value the program returns
        self.inputs: list[InputSpec] = []
        self.samples: list[Sample] = []
        self.steps: list[Step] = []
        self.env: dict[str, Any] = {}  # the generation's tensors, by name
        self.pool: dict[str, _Value] = {}  # row values, by name
        self.results: dict[str, Checked] = {}  # every step result, by name
        self.written: dict[str, Checked] = {}  # inputs the program writes (caches)
        self.dead: dict[str, list[tuple[int, int]]] = {}  # donated columns per value
        self.uses: dict[str, int] = {}  # how many steps read each value
        self.kv_samples: dict[str, Sample] = {}  # the last sample of each op storing to caches
        self.features: set[str] = {
            f"dtype:{self.dtype}",
            f"tokens:{self.tokens}",
            f"lead_rank:{self.lead_rank}",
        }
        self.min_tokens = 0
        # what the index parameters of the step being drawn index: the rows of its cos/sin
        # table (positions), the slots of its KV caches (slot mapping)
        self.index_rows: dict[str, int] = {}
        # input name -> (parameter, shape, dtype, rows it indexes): what may share it
        self.input_params: dict[str, tuple[str, tuple[int, ...], torch.dtype, int]] = {}
        self.ops = fuzzed_ops()
        self.variants: dict[str, list[dict[str, Any]]] = {}
        for name, options in OPTION_VARIANTS:
            self.variants.setdefault(name, []).append(options)

    # --------------------------------------------------------------------- values
    def live(self, name: str, start: int, stop: int) -> bool:
        """Whether columns ``start:stop`` of `name` are not donated. An empty slice at the
        edge of a donated region counts as in it: compiled code refuses any later use of a
        donated value, even a view of no elements."""
        dead = self.dead.get(name, ())
        if start == stop:
            return all(stop < a or b < start for a, b in dead)
        return all(stop <= a or b <= start for a, b in dead)

    def depth_of(self, name: str) -> int:
        value = self.pool.get(name)
        if value is not None:
            return value.depth
        checked = self.results.get(name) or self.written.get(name)
        return checked.depth if checked is not None else 0

    def new_input(self, spec: InputSpec, tensor: Tensor) -> str:
        self.inputs.append(spec)
        self.env[spec.name] = tensor
        rows = self.index_rows.get(spec.param, 0)
        self.input_params[spec.name] = (spec.param, tuple(tensor.shape), tensor.dtype, rows)
        if self.is_row(tensor) and spec.param not in TABLES:
            self.pool[spec.name] = _Value(spec.name, tensor.shape[-1], 0, "")
        return spec.name

    def is_row(self, t: Any) -> bool:
        return (
            isinstance(t, Tensor)
            and t.dim() == self.lead_rank + 1
            and tuple(t.shape[:-1]) == self.lead
            and t.dtype == self.dtype
        )

    def plain(self, width: int) -> str:
        """A new plain random activation of `width` columns."""
        name = f"i{len(self.inputs)}"
        spec = InputSpec(
            name, "x", None, tokens_at=self.lead_rank - 1, width=width,
            padding=self.rng.choice(PADDING),
        )  # fmt: skip
        seed = _seed(self.seed, 1000 + len(self.inputs))
        return self.new_input(spec, plain_input(spec, self.lead, self.dtype, self.device, seed))

    def view(self, region: _Region, width: int, *, expand: bool = False) -> str:
        """The expression of `region` of its root (`width` columns), stride-0 rows where
        `expand`."""
        root, a, b = region.root, region.start, region.stop
        full = a == 0 and b == self.pool[root].width
        if expand:
            self.features.add("view:expand")
            return f"{root}[..., :1, {a}:{b}].expand(*{root}.shape[:-1], {width})"
        if full:
            return root
        self.features.add("view:cols")
        return f"{root}[..., {a}:{b}]"

    def row_of(self, region: _Region, width: int) -> str:
        """A 1-D view of `width` elements of the first row of `region` (a weight that lies in
        an activation's memory); the program then needs a token."""
        self.min_tokens = 1
        index = "0, " * self.lead_rank
        return f"{region.root}[{index}{region.start}:{region.start + width}]"

    def pick_region(self, width: int, taken: Sequence[_Region]) -> _Region | None:
        """A live region of `width` columns of a pool value, apart from `taken`."""
        choices: list[_Region] = []
        for value in self.pool.values():
            if value.width < width:
                continue
            starts = [0] if value.width == width else [0, value.width - width]
            starts.append(self.rng.randrange(value.width - width + 1))
            for s in dict.fromkeys(starts):
                region = _Region(value.name, s, s + width)
                if self.live(value.name, s, s + width) and not any(region.meets(t) for t in taken):
                    choices.append(region)
        if not choices:
            return None
        exact = [r for r in choices if self.pool[r.root].width == width]
        if exact and self.rng.random() < 0.6:
            return self.rng.choice(exact)
        return self.rng.choice(choices)

    # ---------------------------------------------------------------------- steps
    def choose_op(self) -> IrOp:
        if self.want is not None and self.defect is None and self.rng.random() < 0.5:
            return self.rng.choice([op for op in self.ops if op.allow_inplace])
        return self.rng.choice(self.ops)

    def choose_sample(self, op: IrOp) -> tuple[Sample, _Region | None]:
        """Options, width and padding for `op`; with an anchor (a pool value the step will
        consume as its first activation) the width follows it."""
        rng = self.rng
        earlier = self.kv_samples.get(op.name)
        if earlier is not None and rng.random() < 0.5:
            # the caches of an earlier call of this op fit: it may write them again
            return replace(earlier, padding=rng.choice(PADDING)), None
        options: dict[str, Any] = {}
        variants = self.variants.get(op.name, [])
        if variants and rng.random() < 0.5:
            options = dict(rng.choice(variants))
        if "positions" in op.parameter_names:
            options["max_position"] = rng.choice(MAX_POSITIONS)
        anchor = None
        live = [v for v in self.pool.values() if self.live(v.name, 0, v.width)]
        if live and rng.random() < 0.75:
            value = rng.choice(live)
            anchor = _Region(value.name, 0, value.width)
            width = value.width
            hidden = width // 2 if op.name.startswith(("silu", "gelu")) else width
        else:
            hidden = rng.choice(HIDDEN)
        sample = Sample(op.name, max(hidden, 1), rng.choice(PADDING), tuple(options.items()))
        return sample, anchor

    def add_step(self) -> bool:
        """Draw one step and keep it if the op accepts it; False if drawn in vain."""
        op = self.choose_op()
        sample, anchor = self.choose_sample(op)
        step_index = len(self.steps)
        try:
            args = sample_args(
                sample, self.lead, self.dtype, self.device, _seed(self.seed, step_index)
            )
            op.check(op.normalize(args, {}))
        except (ValueError, TypeError, IndexError, RuntimeError):
            return False
        self.index_rows = {"positions": dict(sample.options).get("max_position", 0)}
        if op.mutates:  # a slot mapping fits caches of as many slots only
            key_cache = args[op.parameter_names.index("key_cache")]
            self.index_rows["slot_mapping"] = key_cache.shape[0] * key_cache.shape[1]
        share = 0.8 if self.want is not None and self.defect is None else 0.5
        inplace = op.allow_inplace and self.rng.random() < share
        plan = self.arguments(op, sample, args, step_index, inplace, anchor)
        if plan is None:
            return False
        exprs, new_inputs, defect, regions = plan
        env = dict(self.env)
        for spec, tensor in new_inputs:
            env[spec.name] = tensor
        try:
            values = tuple(eval(e, {"torch": torch}, env) for e in exprs)
            normalized = op.normalize(values, {})
            op.check(normalized)
            result = op.native(*normalized)
        except (ValueError, TypeError, IndexError, RuntimeError):
            return False
        for spec, tensor in new_inputs:
            self.new_input(spec, tensor)
        self.samples.append(sample)
        self.commit(op, inplace, exprs, normalized, result, regions, defect)
        if op.mutates:
            self.kv_samples[op.name] = sample
        return True

    def arguments(
        self,
        op: IrOp,
        sample: Sample,
        args: tuple[Any, ...],
        step_index: int,
        inplace: bool,
        anchor: _Region | None,
    ) -> tuple[list[str], list[tuple[InputSpec, Tensor]], Defect | None, dict[int, _Region]] | None:
        """Argument expressions for a step: row arguments from the pool (views included) or
        fresh, other tensors fresh or shared with an earlier step, the rest literal; the
        defect the program wants, where this call can carry it. Returns the expressions, the
        new inputs, the defect placed and the region each row argument reads."""
        rng = self.rng
        names = op.parameter_names
        exprs: list[str | None] = [None] * len(args)
        new_inputs: list[tuple[InputSpec, Tensor]] = []
        regions: dict[int, _Region] = {}  # the columns each row argument reads
        defect: Defect | None = None
        acts = list(op.activation_indices)
        want = self.want if self.defect is None and inplace else None

        def fresh(position: int, tensor: Tensor) -> str:
            name = f"i{len(self.inputs) + len(new_inputs)}"
            row = self.is_row(tensor) and names[position] not in TABLES
            column = self.lead_rank == 1 and row and rng.random() < 0.1
            if column:
                self.features.add("column_major")
                tensor = column_major(tensor)
            if sample.padding and row:
                self.features.add("padded")
            tokens_at = self.lead_rank - 1 if row or names[position] in TOKEN_PARAMS else None
            spec = InputSpec(
                name, names[position], step_index, position, tokens_at, column_major=column
            )
            new_inputs.append((spec, tensor))
            if row:
                regions[position] = _Region(name, 0, tensor.shape[-1])
            return name

        if want in ("same", "overlap") and len(acts) == 2:
            placed = self.alias_activations(want, op, args, acts, fresh, regions)
            if placed is not None:
                exprs[acts[0]], exprs[acts[1]] = placed
                defect = Defect(want, step_index, op.name, (names[acts[0]], names[acts[1]]))
                self.features.add(f"defect:{want}")
        elif inplace and len(acts) == 2 and rng.random() < 0.25:
            placed = self.disjoint_activations(args, acts, regions)
            if placed is not None:
                exprs[acts[0]], exprs[acts[1]] = placed
        for position, value in enumerate(args):
            if exprs[position] is not None:
                continue
            if not isinstance(value, Tensor):
                exprs[position] = _literal(value)
            elif self.is_row(value) and names[position] not in TABLES:
                exprs[position] = self.row_argument(
                    position, value, inplace, anchor if position == acts[0] else None,
                    regions, fresh,
                )  # fmt: skip
            else:
                exprs[position] = self.other_tensor(names[position], value, position, fresh)
        if inplace and len(acts) == 2 and defect is None:
            r0, r1 = regions.get(acts[0]), regions.get(acts[1])
            if r0 and r1 and r0.root == r1.root:
                self.features.add("disjoint_inplace")
        # a weight that lies in an activation's memory: refused at an in-place call
        weights = [i for i, n in enumerate(names) if n in WEIGHTS and isinstance(args[i], Tensor)]
        if weights and self.tokens >= 1 and (want == "weight_row" or rng.random() < 0.1):
            w = weights[0]
            width = args[w].shape[0]
            if want == "weight_row":
                owner = acts[0]
                region = regions.get(owner)
                fits = region is not None and region.stop - region.start >= width
                if fits:
                    assert region is not None
                    exprs[w] = self.row_of(region, width)
                    defect = Defect("weight_row", step_index, op.name, (names[owner], names[w]))
                    self.features.add("defect:weight_row")
            else:
                region = self.pick_region(width, list(regions.values()))
                if region is not None:
                    exprs[w] = self.row_of(region, width)
                    self.features.add("weight_row_legal")
        done = [e for e in exprs if e is not None]
        assert len(done) == len(exprs)
        return done, new_inputs, defect, regions

    def alias_activations(
        self,
        want: DefectKind,
        op: IrOp,
        args: tuple[Any, ...],
        acts: list[int],
        fresh: Callable[[int, Tensor], str],
        regions: dict[int, _Region],
    ) -> tuple[str, str] | None:
        """Expressions for the two activations that share memory: one tensor twice
        (``same``) or two overlapping column views of one value (``overlap``)."""
        rng = self.rng
        a0, a1 = (args[i] for i in acts)
        if not (self.is_row(a0) and self.is_row(a1)):
            return None
        w0, w1 = a0.shape[-1], a1.shape[-1]
        if want == "same":
            if a0.shape != a1.shape:
                return None
            region = self.pick_region(w0, [])
            if region is None:
                expr = fresh(acts[0], a0)
                region = regions[acts[0]]
            else:
                expr = self.view(region, w0)
            regions[acts[0]] = regions[acts[1]] = region
            return expr, expr
        # overlap: the activation placed first starts `shift` columns before the other
        act0_first = rng.random() < 0.5
        first_width, second_width = (w0, w1) if act0_first else (w1, w0)
        if first_width < 2:
            return None
        shift = rng.randrange(1, first_width)
        span = max(first_width, shift + second_width)
        region = self.pick_region(span, [])
        if region is None:
            root = self.plain(span + rng.choice((0, 0, 5)))
            region = _Region(root, 0, span)
        a = region.start
        first = _Region(region.root, a, a + first_width)
        second = _Region(region.root, a + shift, a + shift + second_width)
        r0, r1 = (first, second) if act0_first else (second, first)
        regions[acts[0]], regions[acts[1]] = r0, r1
        return self.view(r0, w0), self.view(r1, w1)

    def disjoint_activations(
        self, args: tuple[Any, ...], acts: list[int], regions: dict[int, _Region]
    ) -> tuple[str, str] | None:
        """Expressions for two activations that are disjoint column views of one value (the
        query and key columns of one projection): written in place, legally."""
        a0, a1 = (args[i] for i in acts)
        if not (self.is_row(a0) and self.is_row(a1)):
            return None
        w0, w1 = a0.shape[-1], a1.shape[-1]
        gap = self.rng.choice((0, 0, 3))
        region = self.pick_region(w0 + gap + w1, [])
        if region is None:
            root = self.plain(w0 + gap + w1)
            region = _Region(root, 0, w0 + gap + w1)
        a = region.start
        r0 = _Region(region.root, a, a + w0)
        r1 = _Region(region.root, a + w0 + gap, a + w0 + gap + w1)
        if self.rng.random() < 0.5:  # the second activation first in memory
            r1 = _Region(region.root, a, a + w1)
            r0 = _Region(region.root, a + w1 + gap, a + w1 + gap + w0)
        regions[acts[0]], regions[acts[1]] = r0, r1
        return self.view(r0, w0), self.view(r1, w1)

    def row_argument(
        self,
        position: int,
        value: Tensor,
        inplace: bool,
        anchor: _Region | None,
        regions: dict[int, _Region],
        fresh: Callable[[int, Tensor], str],
    ) -> str:
        """A row argument: the anchor, a region of a pool value (for an in-place call, apart
        from the call's other row arguments; for another call, possibly the same memory as
        one of them), or a fresh input."""
        rng = self.rng
        width = value.shape[-1]
        taken = list(regions.values())
        region: _Region | None = None
        if anchor is not None and anchor.stop - anchor.start == width:
            region = anchor
        elif rng.random() < 0.5:
            region = self.pick_region(width, taken if inplace else [])
            if region is None and not inplace and taken and rng.random() < 0.3:
                same = [r for r in taken if r.stop - r.start == width and r.root in self.pool]
                region = rng.choice(same) if same else None
        if region is None or (inplace and any(region.meets(t) for t in taken)):
            return fresh(position, value)
        if any(region.meets(t) for t in taken):
            self.features.add("aliased_default")
        regions[position] = region
        return self.view(region, width, expand=rng.random() < 0.08)

    def other_tensor(
        self, param: str, value: Tensor, position: int, fresh: Callable[[int, Tensor], str]
    ) -> str:
        """A non-row tensor argument: an earlier input of the same parameter, shape and
        dtype (positions, tables, weights, caches shared between steps), or a fresh one."""
        rows = self.index_rows.get(param, 0)  # positions and slots index their table, cache
        shared = [
            name
            for name, key in self.input_params.items()
            if key == (param, tuple(value.shape), value.dtype, rows)
        ]
        if shared and self.rng.random() < (0.7 if param in ("key_cache", "value_cache") else 0.4):
            self.features.add("shared_input")
            if param == "key_cache":
                self.features.add("cache_rewritten")
            return self.rng.choice(shared)
        return fresh(position, value)

    def commit(
        self,
        op: IrOp,
        inplace: bool,
        exprs: list[str],
        args: tuple[Any, ...],
        result: Any,
        regions: dict[int, _Region],
        defect: Defect | None,
    ) -> None:
        names = op.parameter_names
        reads = [e for e in exprs if e.split("[")[0].split(".")[0] in self.env]
        roots = {e.split("[")[0].split(".")[0] for e in reads}
        depth = 1 + max((self.depth_of(r) for r in roots), default=0)
        for root in roots:
            if root in self.results:
                self.features.add("chain")
            self.uses[root] = self.uses.get(root, 0) + 1
            if self.uses[root] == 2:
                self.features.add("diamond")
        self.features.add(f"op:{op.name}")
        if inplace:
            self.features.add(f"inplace:{op.name}")
        outs = () if result is None else result if isinstance(result, tuple) else (result,)
        results = tuple(f"v{len(self.results) + k}" for k in range(len(outs)))
        self.steps.append(Step(op.name, inplace, tuple(exprs), results))
        for name, tensor in zip(results, outs, strict=True):
            self.env[name] = tensor
            self.results[name] = Checked(name, op.name, depth)
            if self.is_row(tensor):
                self.pool[name] = _Value(name, tensor.shape[-1], depth, op.name)
        for m in op.mutates:
            cache = exprs[names.index(m)]
            before = self.written.get(cache)
            self.written[cache] = Checked(cache, op.name, max(depth, before.depth if before else 0))
        if inplace:  # the activations' columns are donated: never read again
            for i in op.activation_indices:
                region = regions[i]
                self.dead.setdefault(region.root, []).append((region.start, region.stop))
        if defect is not None:
            self.defect = defect

    def place_reuse(self) -> None:
        """Read a value donated whole (a bare name at a ``maybe_inplace`` call) after its
        donation: by a later step, or by returning it."""
        candidates = [
            (k, i)
            for k, step in enumerate(self.steps)
            if step.inplace
            for i in getattr(ops, step.op).activation_indices
            if step.args[i] in self.env and step.args[i] in self.pool
        ]
        if not candidates:
            return
        k, i = self.rng.choice(candidates)
        step = self.steps[k]
        op = getattr(ops, step.op)
        name = step.args[i]
        returned = self.rng.random() < 0.5
        self.defect = Defect("reuse", k, step.op, (op.parameter_names[i],), name, returned)
        self.features.add("defect:reuse")
        if returned:
            self.features.add("reuse:returned")
            self.reused_output = name
            return
        width = self.pool[name].width
        sample = Sample("rms_norm", width, 0, (("weight", False),))
        self.samples.append(sample)
        depth = self.depth_of(name) + 1
        result = f"v{len(self.results)}"
        self.steps.append(Step("rms_norm", False, (name, "None", "1e-06", "None"), (result,)))
        self.results[result] = Checked(result, "rms_norm", depth)
        self.features.add("reuse:read")

    def build(self) -> Program:
        rng = self.rng
        if rng.random() < 0.3:
            self.features.add("wide_input")
            self.plain(rng.choice(HIDDEN) + rng.choice(HIDDEN))
        count = rng.randint(MIN_STEPS, MAX_STEPS)
        tries = 0
        while len(self.steps) < count and tries < 40 * count:
            tries += 1
            self.add_step()
        if self.want == "reuse":
            self.place_reuse()
        outputs = [checked for name, checked in self.results.items() if name not in self.dead]
        if self.reused_output is not None:
            outputs.append(
                self.results.get(self.reused_output)
                or Checked(self.reused_output, self.defect.op if self.defect else "", 1)
            )
        donated = frozenset(name for name in self.dead if name in self.input_params)
        return Program(
            seed=self.seed,
            device=self.target,
            dtype=self.dtype,
            tokens=self.tokens,
            lead_rank=self.lead_rank,
            inputs=tuple(self.inputs),
            samples=tuple(self.samples),
            steps=tuple(self.steps),
            outputs=tuple(outputs),
            written=tuple(self.written.values()),
            donated=donated,
            defect=self.defect,
            min_tokens=self.min_tokens,
            features=frozenset(self.features),
        )


def generate(seed: int, device: str = "cpu") -> Program:
    """The program of `seed` for `device` (its dtypes; it is built on the CPU, so the same
    seed gives the same program on every machine)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"generate: seed={seed!r}, expected a non-negative int")
    return _Builder(seed, device).build()
