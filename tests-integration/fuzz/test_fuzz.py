"""The differential fuzzer (issue #90, "No silent wrong results"): random programs of IR ops
(`fuzz_programs`) run eagerly with the native functions (the reference) and with each
installed provider first, through ``ir_passes.compile`` and through ``ir_piecewise.compile``;
every run agrees with the reference and every illegal program is refused where the contract
says so (`fuzz_runners`).

Each program is one test per kind of run, its id its seed. `fuzz_settings` says how many
programs a run takes and from which seed; a failure prints the program and the command that
replays exactly it. On a CPU the Triton provider runs in Triton's interpreter
(``TRITON_INTERPRET=1``, set by the ``integration`` nox session).
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import fuzz_settings
import pytest
import torch
from fuzz_programs import DEFECTS, Program, fuzzed_ops, generate
from fuzz_runners import (
    Run,
    RunFailed,
    check_run,
    native_priority,
    other_tokens,
    provider_priority,
    providers,
    refusal_text,
    run_compiled,
    run_eager,
    run_piecewise,
    selects_inplace_compiled,
    uses_provider,
)
from torch import Tensor

import ir_dispatch
import ir_passes
import ir_piecewise
from ir_spec import ops

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

SETTINGS = fuzz_settings.current()
#: Programs replayed through every runner on every run, one of each kind of illegality: a
#: donated value read again (returned, read by an op), overlapping activations, a weight in
#: an activation's memory, one tensor as both activations.
REPLAYED = (9, 49, 38, 141, 82)
#: Programs that once failed, replayed through every runner on every run: a piecewise first
#: call of no tokens inside a leading dimension that ran the compiled code on two rows (987);
#: compiled runs of one token that Inductor's scheduler failed on (956661233, 380609726); a
#: piecewise run whose in-place norm lost the contiguous clone of a padded-row input, so the
#: piece after the split got other strides than it was compiled for (706989239); an in-place
#: call refused because the overlap check could not tell an expanded row from other columns
#: of its rows (1637805440).
REGRESSIONS = (987, 956661233, 380609726, 706989239, 1637805440)
#: A program that returns an input it donated (`test_compiled_code_refuses_returning_...`).
RETURNS_DONATED_INPUT = 34


@functools.cache
def program_of(seed: int) -> Program:
    return generate(seed, SETTINGS.device)


def compiled_seeds() -> list[int]:
    """The seeds the compiled runners take (all of them when replaying)."""
    return _share(SETTINGS.compile_every, 0)


def piecewise_seeds() -> list[int]:
    return _share(SETTINGS.piecewise_every, SETTINGS.piecewise_every // 2)


def _share(every: int, offset: int) -> list[int]:
    """Every `every`-th program (from `offset`), and every ``every // 10``-th program that
    reads a donated tensor: its refusal is what only compiled runs check, so they take those
    programs ten times as often."""
    seeds = SETTINGS.seeds()
    if SETTINGS.replay:
        return seeds
    often = max(1, every // 10)
    return [
        seed
        for k, seed in enumerate(seeds)
        if k % every == offset or (_reads_donated(seed) and k % often == offset % often)
    ]


def _reads_donated(seed: int) -> bool:
    defect = program_of(seed).defect
    return defect is not None and defect.kind == "reuse"


def replay_command(seed: int, test: str) -> str:
    interpret = "" if SETTINGS.device == "cuda" else "TRITON_INTERPRET=1 "
    return (
        f"{interpret}IR_FUZZ_REPLAY={seed} python -m pytest "
        f"tests-integration/fuzz/test_fuzz.py::{test}"
    )


@contextmanager
def reported(program: Program, run: Run, test: str) -> Iterator[None]:
    """Turn a failed check into a failure that shows the program, the run and the replay."""
    try:
        yield
    except RunFailed as err:
        pytest.fail(
            f"{run.runner} on {run.tokens} tokens (values seed {run.value_seed}): {err}\n"
            f"{program.describe()}replay: {replay_command(program.seed, test)}",
            pytrace=False,
        )


def reference(program: Program, tokens: int, value_seed: int) -> Run:
    return run_eager(program, "eager[native]", native_priority(), tokens, value_seed)


def compiled_priority(program: Program) -> str:
    """The provider first in a program's compiled runs: for a program that aliases the
    arguments of an in-place call, an in-place provider of that op where one is installed
    (whose refusal is then due); otherwise native or a provider the program uses, chosen by
    its seed."""
    defect = program.defect
    if defect is not None and defect.kind != "reuse":
        impls = getattr(ops, defect.op).impls
        inplace = [p for p in providers() if p in impls and impls[p].inplace]
        if inplace:
            return inplace[program.seed % len(inplace)]
    choices = ["native", *(p for p in providers() if uses_provider(program, p))]
    return choices[program.seed % len(choices)]


def splitting_op(program: Program) -> str | None:
    """The op a program's piecewise run splits at (None: no split), chosen by its seed; none
    for a program that hands a mutating op a stride-0 view sized from an input, which a split
    makes Inductor fail on (`test_piecewise_compiles_an_expanded_cache_write_after_a_split`)."""
    if any(getattr(ops, s.op).mutates and ".expand(" in ", ".join(s.args) for s in program.steps):
        return None
    used = sorted({step.op for step in program.steps})
    return [None, *used][program.seed % (len(used) + 1)]


def priority_of(provider: str) -> dict[str, list[str]]:
    return native_priority() if provider == "native" else provider_priority(provider)


def ids(seeds: list[int]) -> list[str]:
    return [f"seed={s}" for s in seeds]


# ---------------------------------------------------------------------------------- runs
def check_eager(program: Program) -> None:
    """Eager with each provider first (those implementing an op of the program) against
    eager native: per call and end to end."""
    seed = program.seed
    expected = reference(program, program.tokens, seed)
    with reported(program, expected, "test_eager"):
        check_run(program, expected, expected)
    for provider in providers():
        if not uses_provider(program, provider):
            continue
        run = run_eager(
            program, f"eager[{provider}]", provider_priority(provider), program.tokens, seed
        )
        with reported(program, run, "test_eager"):
            check_run(program, run, expected)


def check_compiled(program: Program) -> None:
    """``ir_passes.compile`` (the whole program as one graph), compiled once, run on two
    sets of fresh inputs."""
    seed = program.seed
    provider = compiled_priority(program)
    instances = [(program.tokens, seed), (program.tokens, seed + 1)]
    runs = run_compiled(program, f"compiled[{provider}]", priority_of(provider), instances)
    for run in runs:
        expected = reference(program, run.tokens, run.value_seed)
        inplace = selects_inplace_compiled(program, expected, priority_of(provider))
        with reported(program, run, "test_compiled"):
            check_run(program, run, expected, compiled_inplace=inplace)


def check_piecewise(program: Program) -> None:
    """``ir_piecewise.compile`` with the token dimension dynamic, split at an op of the
    program (or not), run on the program's tokens and on another count."""
    seed = program.seed
    provider = compiled_priority(program)
    splitting = splitting_op(program)
    instances = [(program.tokens, seed), (other_tokens(program, seed), seed + 1)]
    runner = f"piecewise[{provider}, split at {splitting or 'nothing'}]"
    runs = run_piecewise(program, runner, priority_of(provider), instances, splitting)
    for run in runs:
        expected = reference(program, run.tokens, run.value_seed)
        inplace = selects_inplace_compiled(program, expected, priority_of(provider))
        with reported(program, run, "test_piecewise"):
            check_run(program, run, expected, compiled_inplace=inplace)


@pytest.mark.parametrize("seed", SETTINGS.seeds(), ids=ids(SETTINGS.seeds()))
def test_eager(seed: int) -> None:
    check_eager(program_of(seed))


@pytest.mark.parametrize("seed", compiled_seeds(), ids=ids(compiled_seeds()))
def test_compiled(seed: int) -> None:
    check_compiled(program_of(seed))


@pytest.mark.parametrize("seed", piecewise_seeds(), ids=ids(piecewise_seeds()))
def test_piecewise(seed: int) -> None:
    check_piecewise(program_of(seed))


@pytest.mark.parametrize("seed", REPLAYED, ids=ids(list(REPLAYED)))
def test_replayed(seed: int) -> None:
    """Fixed programs through every runner, built as on a CPU whatever the device (so that a
    seed names one program everywhere): one of each kind of illegality."""
    program = replace(generate(seed, "cpu"), device=SETTINGS.device)
    check_eager(program)
    check_compiled(program)
    check_piecewise(program)


@pytest.mark.parametrize("seed", REGRESSIONS, ids=ids(list(REGRESSIONS)))
def test_regressions(seed: int) -> None:
    """Programs that once failed, through every runner, built as on a CPU."""
    program = replace(generate(seed, "cpu"), device=SETTINGS.device)
    check_eager(program)
    check_compiled(program)
    check_piecewise(program)


@pytest.mark.xfail(
    strict=True,
    raises=RunFailed,
    reason="ir_passes does not refuse a program that returns a donated graph input as it "
    "is: Dynamo returns such an input outside the compiled graph, where the donation check "
    "does not look",
)
def test_compiled_code_refuses_returning_a_donated_input() -> None:
    program = replace(generate(RETURNS_DONATED_INPUT, "cpu"), device=SETTINGS.device)
    assert program.returns_donated_input
    (run,) = run_compiled(
        program, "compiled[native]", native_priority(), [(program.tokens, program.seed)]
    )
    if not (isinstance(run.error, ValueError) and refusal_text(program) in str(run.error)):
        raise RunFailed(f"not refused: {run.error!r}\n{program.describe()}")


def _weight_in_the_activation(x: Tensor, residual: Tensor) -> tuple[Tensor, Tensor]:
    out: tuple[Tensor, Tensor] = ops.fused_add_rms_norm.maybe_inplace(
        x[:, :8], residual, x[0, 0:8], 1e-6
    )
    return out


def _overlapping_activations(x: Tensor, residual: Tensor) -> tuple[Tensor, Tensor]:
    out: tuple[Tensor, Tensor] = ops.fused_add_rms_norm.maybe_inplace(
        x[:, 2:10], x[:, :8], residual[0], 1e-6
    )
    return out


def _one_tensor_twice(x: Tensor, residual: Tensor) -> tuple[Tensor, Tensor]:
    out: tuple[Tensor, Tensor] = ops.fused_add_rms_norm.maybe_inplace(
        x[:, :8], x[:, :8], residual[0], 1e-6
    )
    return out


@pytest.mark.parametrize(
    ("donate", "arguments"),
    [
        (_weight_in_the_activation, "arguments 'x' and 'weight'"),
        (_overlapping_activations, "arguments 'x' and 'x_residual'"),
        (_one_tensor_twice, "arguments 'x' and 'x_residual'"),
    ],
)
def test_compiled_code_refuses_aliased_arguments_on_one_token(donate: Any, arguments: str) -> None:
    """On one token the sliced activations are dense with a row stride that a clone keeps;
    the refusal is raised all the same (found by the fuzzer as a KeyError in Inductor's
    scheduler: `ir_passes.lowering` clones an in-place call's activations contiguous)."""
    device = SETTINGS.device
    x = torch.randn(1, 13, device=device)
    residual = torch.randn(1, 8, device=device)
    impls = ops.fused_add_rms_norm.impls
    inplace = [p for p in providers() if p in impls and impls[p].inplace]
    assert inplace, "no in-place provider of fused_add_rms_norm installed"
    with (
        ir_dispatch.priority(fused_add_rms_norm=inplace[:1]),
        torch._inductor.config.patch(fx_graph_cache=False),
    ):
        try:
            ir_passes.compile(donate)(x.clone(), residual.clone())
        except Exception as err:
            refused = isinstance(err, ValueError) and arguments in str(err)
            if not refused:
                raise RunFailed(f"compiling the refused call failed: {err}") from err
        else:
            raise AssertionError("the aliased call was not refused")
        finally:
            torch._dynamo.reset()


def _norm(x: Tensor, w: Tensor) -> Tensor:
    out: Tensor = ops.rms_norm(x, w, 1e-6)
    return out


def test_piecewise_keeps_column_major_rows_after_a_first_call_without_tokens() -> None:
    """An empty column-major tensor (and one of a token, made this way) reports row-major
    strides: the calls whose rows are laid out otherwise get a trace of their own (found by the
    fuzzer as an Inductor stride assertion on the later calls; reduced by hand)."""
    device = SETTINGS.device
    w = torch.randn(72, device=device)
    config = ir_piecewise.CompilationConfig(cache=False)
    compiled = ir_piecewise.compile(_norm, config, dynamic_arg_dims={"x": 0})
    try:
        with torch._inductor.config.patch(fx_graph_cache=False):
            for tokens in (0, 16, 1, 0, 3):
                x = torch.randn(tokens, 72, device=device).mT.contiguous().mT
                torch.testing.assert_close(compiled(x, w), ops.rms_norm.native(x, w, 1e-6))
    finally:
        torch._dynamo.reset()


def _broken_rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    """rms_norm without its weight: wrong wherever the weight is not all ones."""
    out: Tensor = ops.rms_norm.native(x, None, epsilon, variance_size)
    return out


def _overwriting_rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    """The right rms_norm, but it overwrites its input, which the default overload must not."""
    out: Tensor = ops.rms_norm.native(x, weight, epsilon, variance_size)
    x.mul_(0.5)
    return out


@pytest.mark.parametrize("impl", [_broken_rms_norm, _overwriting_rms_norm])
def test_the_fuzzer_fails_a_wrong_provider(impl: Any) -> None:
    """A provider with wrong results, or one that writes its input, fails the eager runs of
    the first programs that call rms_norm with a weight."""
    seeds = [
        seed
        for seed in range(200)
        if program_of(seed).defect is None
        and any(s.op == "rms_norm" and s.args[1] != "None" for s in program_of(seed).steps)
    ][:3]
    assert seeds
    ops.rms_norm.register_impl("fuzz_wrong")(impl)
    try:
        for seed in seeds:
            with pytest.raises(pytest.fail.Exception, match=r"eager\[fuzz_wrong\]"):
                check_eager(program_of(seed))
    finally:
        ops.rms_norm.unregister_impl("fuzz_wrong")


# ----------------------------------------------------------------------------- generator
COVERAGE_SEEDS = range(500)


def test_programs_cover_the_catalog_and_every_kind_of_program() -> None:
    """Over 500 fixed seeds the generator calls every catalog op (and ``maybe_inplace`` of
    each op that has it), with 0 and 1 tokens, every dtype of the device, views, shared
    inputs, chains and diamonds, and places every kind of defect."""
    counts = Counter(f for seed in COVERAGE_SEEDS for f in program_of(seed).features)
    wanted = {f"op:{op.name}" for op in fuzzed_ops()}
    wanted |= {f"inplace:{op.name}" for op in fuzzed_ops() if op.allow_inplace}
    wanted |= {f"defect:{kind}" for kind in DEFECTS}
    wanted |= {"tokens:0", "tokens:1", "lead_rank:2", "view:cols", "view:expand"}
    wanted |= {"column_major", "padded", "shared_input", "chain", "diamond", "cache_rewritten"}
    wanted |= {"disjoint_inplace", "aliased_default", "weight_row_legal", "wide_input"}
    wanted |= {f"dtype:{dtype}" for dtype in _dtypes()}
    missing = {f for f in wanted if counts[f] < 3}
    assert not missing, f"rare or missing in 500 programs: {sorted(missing)}"


def _dtypes() -> tuple[torch.dtype, ...]:
    from fuzz_programs import program_dtypes

    return program_dtypes(SETTINGS.device)


def test_a_seed_gives_one_program_and_one_set_of_inputs() -> None:
    seed = SETTINGS.seeds()[0]
    first, second = generate(seed, SETTINGS.device), generate(seed, SETTINGS.device)
    assert first == second
    assert first.source() == second.source()
    a = first.make_inputs(first.tokens, seed)
    b = second.make_inputs(second.tokens, seed)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    c = first.make_inputs(first.tokens, seed + 1)
    assert any(not torch.equal(x, y) for x, y in zip(a, c, strict=True) if x.numel())


def test_settings_default_to_500_programs_on_cpu_and_name_a_bad_variable() -> None:
    settings = fuzz_settings.from_environment({"GITHUB_RUN_ID": "42"})
    assert settings.programs >= 500
    assert settings.seed_source == "CI run 42.1"
    assert settings.base_seed == fuzz_settings.from_environment({"GITHUB_RUN_ID": "42"}).base_seed
    again = fuzz_settings.from_environment({"GITHUB_RUN_ID": "42", "GITHUB_RUN_ATTEMPT": "2"})
    assert again.base_seed != settings.base_seed
    replay = fuzz_settings.from_environment({"IR_FUZZ_REPLAY": "7, 9"})
    assert replay.seeds() == [7, 9]
    assert fuzz_settings.from_environment({"IR_FUZZ_SEED": "5"}).seeds()[:2] == [5, 6]
    with pytest.raises(ValueError, match="IR_FUZZ_PROGRAMS='many'"):
        fuzz_settings.from_environment({"IR_FUZZ_PROGRAMS": "many"})
    with pytest.raises(ValueError, match="IR_FUZZ_SEED='-1'"):
        fuzz_settings.from_environment({"IR_FUZZ_SEED": "-1"})


def test_token_inputs_follow_the_token_count() -> None:
    """Every input piecewise runs mark dynamic holds the token count at that dimension, on
    any count the program runs with: a table of as many rows as a one-token program's tokens
    is not one of them."""
    for seed in COVERAGE_SEEDS:
        program = program_of(seed)
        if program.tokens != 1:
            continue
        tokens = max(program.min_tokens, 3)
        made = program.make_inputs(tokens, seed)
        for spec, tensor in zip(program.inputs, made, strict=True):
            if spec.tokens_at is not None:
                assert tensor.shape[spec.tokens_at] == tokens, (seed, spec)
