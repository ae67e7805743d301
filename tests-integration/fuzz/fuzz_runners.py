"""Running a fuzz program every way the stack runs it, and judging each run.

Runners: eager with the native functions first for every op (the reference), eager with each
installed provider first (`providers`), `ir_passes.compile` and `ir_piecewise.compile`. Eager
runs go through a `Recorder` that stands in for ``ir_spec.ops`` in the program's globals: it
asks ir-dispatch what each call selects and keeps each call's arguments and results.

What a run must do (`check_run`):

* legal program: no error; every returned value and every written cache equal to the
  reference's within the producing op's tolerance times its chain depth (the number of ops on
  its longest path from the inputs: each op may add its own rounding, and the next op carries
  it); in eager runs also every call's results equal to the native function's on that call's
  own arguments, within the op's tolerance (no accumulation there); inputs neither donated nor
  written bitwise unchanged.
* ``same``, ``overlap``, ``weight_row`` (aliased arguments of a ``maybe_inplace`` call): where
  the call selects an in-place implementation and the tensors have elements, a `ValueError`
  naming the op and both arguments, raised at that call; elsewhere (an out-of-place
  implementation, or no tokens: empty tensors share no memory) the legal program's results.
* ``reuse`` (a donated tensor read again): compiled runs raise a `ValueError` naming the op and
  the argument; eager runs cannot see a later read and do not raise
  (`docs/concepts/inplace.md`: the caller's error), and their results are compared only where
  the donating call ran out of place (then the donation changed nothing). A program that
  returns a donated *input* as it is is not refused by compiled runs either (Dynamo returns
  it outside the graph the IR passes check: `test_fuzz.py` records it as an expected
  failure), and is judged like an eager run.

The chain tolerance: a value `depth` ops from the inputs may differ by ``depth * (atol + rtol
* (|expected| + rms(expected)))`` with the producing op's tolerance for the dtype of the value
or, beyond the first op, of the program's activations where that is looser (an earlier op's
rounding in that dtype carries into a float32 scale). The root mean square term bounds
cancellation: a sum's rounding is relative to its operands, not to a small sum, and an
fp8 quantization divides by a scale that may magnify it. At depth 1 (inputs identical in
every run) the op's own tolerance applies, element by element, as in the provider tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from fuzz_programs import Checked, Program, fuzzed_ops
from torch import Tensor

import ir_dispatch
import ir_passes
import ir_piecewise
from ir_spec import Impl, IrOp, ops
from ir_spec.testing import assert_close, clone_args, results_of

Priority = Mapping[str, list[str]]


def native_priority() -> dict[str, list[str]]:
    """The native function first for every op: the reference."""
    return {op.name: ["native"] for op in ops}


def providers() -> list[str]:
    """The providers with an implementation of a catalog op that can run here, by name (their
    entry points loaded first)."""
    ir_dispatch.selection_state()  # loads the providers' entry points, once
    names = {
        provider
        for op in fuzzed_ops()
        for provider, impl in op.impls.items()
        if provider != "native" and impl.supported
    }
    return sorted(names)


def provider_priority(provider: str) -> dict[str, list[str]]:
    """`provider` first for every op it implements (the other ops keep their defaults)."""
    return {op.name: [provider] for op in fuzzed_ops() if provider in op.impls}


def uses_provider(program: Program, provider: str) -> bool:
    """Whether `provider` implements an op the program calls (else its run is the native)."""
    return any(provider in getattr(ops, step.op).impls for step in program.steps)


@dataclass
class Record:
    """One eager call: the op, whether through ``maybe_inplace``, the implementation the
    dispatcher selected, copies of the arguments before the call and of what it produced
    (results, then written arguments); `produced` None where the call raised."""

    op: IrOp
    inplace: bool
    impl: Impl
    before: tuple[Any, ...]
    produced: tuple[Tensor, ...] | None = None


class Recorder:
    """Stands in for ``ir_spec.ops`` in a program's globals: each call runs as written (the
    same op, overload and arguments) and is recorded."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def __getattr__(self, name: str) -> _RecordingOp:
        return _RecordingOp(self, getattr(ops, name))

    def call(self, op: IrOp, inplace: bool, args: tuple[Any, ...]) -> Any:
        normalized = op.normalize(args, {})
        record = Record(op, inplace, ir_dispatch.select(op, *normalized), clone_args(normalized))
        self.records.append(record)
        result = (op.maybe_inplace if inplace else op)(*args)
        record.produced = tuple(t.clone() for t in results_of(op, normalized, result))
        return result


class _RecordingOp:
    def __init__(self, recorder: Recorder, op: IrOp) -> None:
        self.recorder, self.op = recorder, op

    def __call__(self, *args: Any) -> Any:
        return self.recorder.call(self.op, False, args)

    def maybe_inplace(self, *args: Any) -> Any:
        return self.recorder.call(self.op, True, args)


@dataclass
class Run:
    """One run of a program on one instance (`tokens`, `value_seed`)."""

    runner: str
    tokens: int
    value_seed: int
    inputs: list[Tensor]
    originals: list[Tensor]
    outputs: tuple[Tensor, ...] | None = None
    error: Exception | None = None
    records: list[Record] | None = None
    #: whether the defect's call selected an in-place implementation (None: no defect)
    inplace_at_defect: bool | None = None
    notes: list[str] = field(default_factory=list)


def _start(program: Program, runner: str, tokens: int, value_seed: int) -> Run:
    inputs = program.make_inputs(tokens, value_seed)
    originals = [t.clone() for t in inputs]
    return Run(runner, tokens, value_seed, inputs, originals)


def _finish(run: Run, call: Callable[[], Any]) -> Run:
    try:
        with torch.no_grad():
            outputs = call()
    except Exception as err:  # judged by check_run: a refusal may be expected
        run.error = err
    else:  # copies: compiled code may hand out buffers that its next call reuses
        run.outputs = tuple(t.clone() for t in outputs)
    return run


def run_eager(
    program: Program, runner: str, priority: Priority, tokens: int, value_seed: int
) -> Run:
    """The program run eagerly under `priority`, every call recorded."""
    run = _start(program, runner, tokens, value_seed)
    recorder = Recorder()
    fn = program.function({"ops": recorder})
    with ir_dispatch.priority(priority):
        _finish(run, lambda: fn(*run.inputs))
    run.records = recorder.records
    if program.defect is not None and len(recorder.records) > program.defect.step:
        run.inplace_at_defect = recorder.records[program.defect.step].impl.inplace
    return run


def selects_inplace_compiled(program: Program, reference: Run, priority: Priority) -> bool | None:
    """Whether compiled code selects an in-place implementation at the defect's call: what
    lowering selects (inductor mode) on the reference's arguments of that call."""
    if program.defect is None or reference.records is None:
        return None
    if len(reference.records) <= program.defect.step:  # the reference failed before it
        return None
    record = reference.records[program.defect.step]
    with ir_dispatch.priority(priority), ir_dispatch.mode(ir_dispatch.INDUCTOR):
        return ir_dispatch.select(record.op, *record.before).inplace


@contextmanager
def _compiling() -> Iterator[None]:
    """Inductor without its cache of compiled graphs (a fresh compilation each time, whatever
    earlier runs left on disk), Dynamo's state dropped afterwards."""
    try:
        with torch._inductor.config.patch(fx_graph_cache=False, autotune_local_cache=False):
            yield
    finally:
        torch._dynamo.reset()


def run_compiled(
    program: Program,
    runner: str,
    priority: Priority,
    instances: Sequence[tuple[int, int]],
) -> list[Run]:
    """The program through ``ir_passes.compile`` (whole graph) under `priority`, compiled
    once and run on each instance (tokens, value seed) with fresh inputs."""
    runs: list[Run] = []
    fn = program.function({"ops": ops})
    with ir_dispatch.priority(priority), _compiling():
        compiled = ir_passes.compile(fn, fullgraph=True)
        for tokens, value_seed in instances:
            run = _start(program, runner, tokens, value_seed)
            runs.append(_finish(run, lambda run=run: compiled(*run.inputs)))  # type: ignore[misc]
    return runs


def run_piecewise(
    program: Program,
    runner: str,
    priority: Priority,
    instances: Sequence[tuple[int, int]],
    splitting_op: str | None,
) -> list[Run]:
    """The program through ``ir_piecewise.compile``: the token dimension dynamic (the inputs'
    token sizes related by ``torch._check``, as piecewise compilation needs where no op
    relates them), split at `splitting_op` (an IR op the program calls, which then runs
    eagerly between the compiled pieces) or not at all; traced once and run on each
    instance."""
    runs: list[Run] = []
    fn = program.function({"ops": ops}, relate_tokens=True)
    config = ir_piecewise.CompilationConfig(
        splitting_ops=() if splitting_op is None else (f"ir::{splitting_op}",), cache=False
    )
    with ir_dispatch.priority(priority), _compiling():
        compiled = ir_piecewise.compile(fn, config, dynamic_arg_dims=program.token_inputs())
        for tokens, value_seed in instances:
            run = _start(program, runner, tokens, value_seed)
            runs.append(_finish(run, lambda run=run: compiled(*run.inputs)))  # type: ignore[misc]
    return runs


# --------------------------------------------------------------------------------- judging
class RunFailed(AssertionError):
    """A run did not do what the program's legality requires."""


def _value_error(err: BaseException | None) -> ValueError | None:
    return err if isinstance(err, ValueError) else None


def refusal_text(program: Program) -> str:
    """What the refusal of the program's defect must say."""
    defect = program.defect
    assert defect is not None
    if defect.kind == "reuse":
        return f"ir.{defect.op}.maybe_inplace: argument '{defect.arguments[0]}'"
    first, second = defect.arguments
    return f"ir.{defect.op}.maybe_inplace: arguments '{first}' and '{second}'"


def refusal_expected(program: Program, run: Run, compiled_inplace: bool | None) -> bool:
    """Whether `run` must refuse the program (`compiled_inplace`: for a compiled run, whether
    lowering selects an in-place implementation at the defect's call)."""
    defect = program.defect
    if defect is None:
        return False
    if defect.kind == "reuse":  # compiled runs only (see the module's docstring)
        return run.records is None and not program.returns_donated_input
    if run.tokens == 0:  # empty tensors share no memory: nothing to refuse
        return False
    if run.records is not None:
        return bool(run.inplace_at_defect)
    return bool(compiled_inplace)


def check_run(
    program: Program, run: Run, reference: Run, *, compiled_inplace: bool | None = None
) -> None:
    """Judge `run` against `reference` (the native eager run of the same instance); raise
    `RunFailed` saying what went wrong."""
    if reference.error is not None:
        raise RunFailed(f"the reference run raised {reference.error!r}") from reference.error
    refuse = refusal_expected(program, run, compiled_inplace)
    if refuse:
        error = _value_error(run.error)
        text = refusal_text(program)
        if error is None:
            got = "no error" if run.error is None else f"{type(run.error).__name__}: {run.error}"
            raise RunFailed(f"expected a ValueError containing {text!r}; got {got}") from run.error
        if text not in str(error):
            raise RunFailed(f"the refusal does not name {text!r}: {error}") from error
        if run.records is not None:
            assert program.defect is not None
            if len(run.records) != program.defect.step + 1:
                raise RunFailed(
                    f"refused at call {len(run.records) - 1}, expected at the defect's call "
                    f"{program.defect.step}: {error}"
                )
    elif run.error is not None:
        raise RunFailed(f"raised {type(run.error).__name__}: {run.error}") from run.error
    _check_untouched(program, run)
    if run.records is not None:
        _check_calls(run.records)
    if refuse:
        return
    if program.defect is not None and program.defect.kind == "reuse":
        inplace = run.inplace_at_defect if run.records is not None else compiled_inplace
        if inplace:
            run.notes.append("a donated tensor read after an in-place call: values not compared")
            return
    _check_results(program, run, reference)


def _check_untouched(program: Program, run: Run) -> None:
    """Inputs neither donated nor written keep their values, bit for bit."""
    written = {c.name for c in program.written}
    for spec, after, before in zip(program.inputs, run.inputs, run.originals, strict=True):
        if spec.name in program.donated or spec.name in written:
            continue
        if not torch.equal(after, before):
            raise RunFailed(f"input {spec.name} ({spec.param}) changed, though not donated")


def _check_calls(records: Sequence[Record]) -> None:
    """Each eager call's results against the native function on that call's arguments."""
    for k, record in enumerate(records):
        if record.produced is None:
            continue
        native_args = clone_args(record.before)
        expected = results_of(record.op, native_args, record.op.native(*native_args))
        try:
            assert_close(record.op, record.produced, expected, msg=f"(call {k})")
        except AssertionError as err:
            raise RunFailed(
                f"call {k} (ir.{record.op.name}, provider {record.impl.provider!r}) differs "
                f"from the native function on its own arguments: {err}"
            ) from err


def _check_results(program: Program, run: Run, reference: Run) -> None:
    assert run.outputs is not None
    assert reference.outputs is not None
    names = [i.name for i in program.inputs]
    pairs: list[tuple[Checked, Tensor, Tensor]] = list(
        zip(program.outputs, run.outputs, reference.outputs, strict=True)
    )
    for checked in program.written:
        at = names.index(checked.name)
        pairs.append((checked, run.inputs[at], reference.inputs[at]))
    for checked, actual, expected in pairs:
        compare(checked, actual, expected, program.dtype)


def compare(checked: Checked, actual: Tensor, expected: Tensor, activations: torch.dtype) -> None:
    """`actual` equal to `expected` within the chain tolerance (the module's docstring) of
    `checked` in a program of `activations` dtype."""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        raise RunFailed(
            f"{checked.name}: shape/dtype {tuple(actual.shape)}/{actual.dtype}, expected "
            f"{tuple(expected.shape)}/{expected.dtype}"
        )
    op = getattr(ops, checked.op)
    tol = op.tolerance(expected.dtype)
    depth = max(1, checked.depth)
    a, e = actual.float().cpu(), expected.float().cpu()
    if depth == 1:
        bound = tol.atol + tol.rtol * e.abs()
    else:
        carried = op.tolerance(activations)
        if carried.rtol > tol.rtol:
            tol = carried
        rms = e.square().mean().sqrt() if e.numel() else e.new_zeros(())
        bound = depth * (tol.atol + tol.rtol * (e.abs() + rms))
    # NaN where the reference has NaN, and equal infinities, agree
    bad = ~(((a - e).abs() <= bound) | (a == e) | (a.isnan() & e.isnan()))
    if e.numel() and bool(bad.any()):
        at = int(bad.flatten().nonzero()[0])
        raise RunFailed(
            f"{checked.name} (from ir.{checked.op}, chain depth {checked.depth}) differs from "
            f"the reference at {int(bad.sum())} of {e.numel()} elements; first at flat index "
            f"{at}: {a.flatten()[at].item()} against {e.flatten()[at].item()}, allowed "
            f"{bound.expand_as(e).flatten()[at].item():.3g}"
        )


def other_tokens(program: Program, seed: int) -> int:
    """A second token count for a program's rerun: another of 0, 1, ... up to 16, at least
    the program's minimum."""
    choices = [t for t in (0, 1, 2, 3, 5, 9, 16) if t >= program.min_tokens and t != program.tokens]
    return choices[seed % len(choices)]
