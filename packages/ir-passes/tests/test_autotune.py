"""Selection by measurement (``PassConfig.autotune``): a slow provider the priority puts first
loses to a faster candidate, ties keep the priority's choice, the report lists the timings,
decisions are kept per op and arguments, and the cache key tells the modes apart."""

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.fx.experimental.proxy_tensor import make_fx

import ir_dispatch
import ir_passes
from ir_passes import LoweringPass, PassConfig, PassReport, autotune
from ir_spec import ops

#: calls of the test providers at run time
RUNS: Counter[str] = Counter()
#: how long the slow provider sleeps a call
SLOW_S = 2e-3


@torch.library.custom_op("ir_autotune_test::slow_silu_and_mul", mutates_args=())
def _slow(x: Tensor) -> Tensor:
    RUNS["t_slow"] += 1
    time.sleep(SLOW_S)
    out: Tensor = ops.silu_and_mul.native(x)
    return out


@torch.library.custom_op("ir_autotune_test::fast_silu_and_mul", mutates_args=())
def _fast(x: Tensor) -> Tensor:
    RUNS["t_fast"] += 1
    out: Tensor = ops.silu_and_mul.native(x)
    return out


@_slow.register_fake
@_fast.register_fake
def _half_width(x: Tensor) -> Tensor:
    return x.new_empty(*x.shape[:-1], x.shape[-1] // 2)


def slow(x: Tensor) -> Tensor:
    out: Tensor = torch.ops.ir_autotune_test.slow_silu_and_mul(x)
    return out


def fast(x: Tensor) -> Tensor:
    out: Tensor = torch.ops.ir_autotune_test.fast_silu_and_mul(x)
    return out


ops.silu_and_mul.register_impl("t_slow")(slow)
ops.silu_and_mul.register_impl("t_fast")(fast)
SLOW_FIRST = {"silu_and_mul": ["t_slow", "t_fast"]}


@pytest.fixture(autouse=True)
def fresh_autotune() -> Iterator[None]:
    autotune.clear_cache()
    autotune.stats.reset()
    RUNS.clear()
    yield
    autotune.clear_cache()


def mlp(x: Tensor, w: Tensor) -> Tensor:
    out: Tensor = ops.silu_and_mul(x @ w) * 2
    return out


def reference(x: Tensor, w: Tensor) -> Tensor:
    out: Tensor = ops.silu_and_mul.native(x @ w) * 2
    return out


def mlp_inputs(tokens: int = 6) -> tuple[Tensor, Tensor]:
    return torch.randn(tokens, 32), torch.randn(32, 64)


def compiled_mlp(config: PassConfig) -> tuple[Any, PassReport]:
    """`mlp` compiled with `config` (Inductor's graph cache off, so the passes run), called
    once; with the report of that compilation."""
    compiled = ir_passes.compile(mlp, config=config, dynamic=False)
    with torch._inductor.config.patch(fx_graph_cache=False):
        x, w = mlp_inputs()
        torch.testing.assert_close(compiled(x, w), reference(x, w))
    report = ir_passes.last_report()
    assert report is not None
    assert report.passes_ran
    return compiled, report


def test_autotune_picks_a_faster_candidate_over_the_priorities_slow_one() -> None:
    with ir_dispatch.priority(SLOW_FIRST):
        compiled, report = compiled_mlp(PassConfig(autotune=True))
        (decision,) = report.autotune.values()
        assert decision.op == "silu_and_mul"
        assert decision.arguments == "(float32[6, 64])"
        assert list(decision.timings_ms) == ["t_slow", "t_fast", "native"]
        assert decision.priority_choice == "t_slow"
        assert decision.choice != "t_slow"
        assert decision.changed
        assert decision.timings_ms["t_slow"] > SLOW_S * 1e3
        assert decision.timings_ms[decision.choice] < decision.timings_ms["t_slow"] / 2
        assert report.autotune_changed == report.autotune
        assert report.selected_impls["silu_and_mul"] == {
            name: decision.choice for name in report.autotune
        }
        RUNS.clear()
        x, w = mlp_inputs()
        torch.testing.assert_close(compiled(x, w), reference(x, w))
        assert RUNS["t_slow"] == 0  # the compiled code runs the choice
        assert RUNS["t_fast"] == (1 if decision.choice == "t_fast" else 0)


def test_without_autotune_the_priority_choice_stays() -> None:
    with ir_dispatch.priority(SLOW_FIRST):
        compiled, report = compiled_mlp(PassConfig())
        assert report.autotune == {}
        assert list(report.selected_impls["silu_and_mul"].values()) == ["t_slow"]
        RUNS.clear()
        x, w = mlp_inputs()
        torch.testing.assert_close(compiled(x, w), reference(x, w))
        assert RUNS["t_slow"] == 1
    assert autotune.stats.timed == 0


def lowered(graph_fn: Any, *inputs: Tensor, config: PassConfig) -> PassReport:
    graph = make_fx(graph_fn, tracing_mode="fake")(*inputs).graph
    report = PassReport()
    LoweringPass(report, config)(graph)
    return report


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        ({"t_fast": 1.015, "t_slow": 1.0, "native": 1.01}, "t_slow"),  # within 2 %
        ({"t_fast": 0.00105, "t_slow": 0.00110, "native": 0.00100}, "t_slow"),  # within 0.1 us
        ({"t_fast": 0.0011, "t_slow": 0.0014, "native": 0.0010}, "t_slow"),  # within 0.5 us
        ({"t_fast": 0.0011, "t_slow": 0.0016, "native": 0.0010}, "t_fast"),  # 0.6 us apart
        ({"t_fast": 1.0, "t_slow": 1.03, "native": 1.01}, "t_fast"),
        ({"t_fast": 1.1, "t_slow": 1.1, "native": 0.5}, "native"),
    ],
)
def test_ties_go_to_the_priority(
    monkeypatch: pytest.MonkeyPatch, times: dict[str, float], expected: str
) -> None:
    measured: list[str] = []

    def fake_measure(call: Any, device: torch.device) -> float:
        provider = ["t_slow", "t_fast", "native"][len(measured)]
        measured.append(provider)
        return times[provider]

    monkeypatch.setattr(autotune, "measure", fake_measure)
    with ir_dispatch.priority(SLOW_FIRST):
        report = lowered(ops.silu_and_mul, torch.randn(5, 16), config=PassConfig(autotune=True))
    (decision,) = report.autotune.values()
    assert measured == ["t_slow", "t_fast", "native"]
    assert decision.choice == expected
    assert decision.changed == (expected != "t_slow")
    assert list(report.selected_impls["silu_and_mul"].values()) == [expected]


def test_identical_nodes_are_timed_once() -> None:
    def layers(x: Tensor) -> Tensor:
        for _ in range(3):
            x = torch.cat([ops.silu_and_mul(x), x[:, :8]], dim=-1)
        return x

    with ir_dispatch.priority(SLOW_FIRST):
        report = lowered(layers, torch.randn(4, 16), config=PassConfig(autotune=True))
    assert len(report.autotune) == 3
    assert autotune.stats.timed == 3  # t_slow, t_fast, native: once
    assert autotune.stats.decided == 1
    assert autotune.stats.reused == 2
    assert len({id(d) for d in report.autotune.values()}) == 1


def test_one_candidate_is_not_timed() -> None:
    report = lowered(ops.gelu_and_mul, torch.randn(4, 16), config=PassConfig(autotune=True))
    assert report.autotune == {}
    assert autotune.stats.timed == 0
    assert list(report.selected_impls["gelu_and_mul"].values()) == ["native"]


def test_a_mutating_op_is_timed_on_its_own_copies() -> None:
    tokens, blocks, block_size = 5, 4, 8
    key, value = torch.randn(tokens, 32), torch.randn(tokens, 32)
    caches = [torch.randn(blocks, block_size, 2, 16) for _ in range(2)]
    slots = torch.randperm(blocks * block_size)[:tokens]
    before = [c.clone() for c in caches]
    with ir_dispatch.priority(write_kv_cache=["t_store"]):
        decision = autotune.autotune(ops.write_kv_cache, [key, value, *caches, slots], None)
    assert decision is not None
    assert list(decision.timings_ms) == ["t_store", "native"]
    assert all(ms > 0 for ms in decision.timings_ms.values())
    for cache, kept in zip(caches, before, strict=True):
        torch.testing.assert_close(cache, kept, rtol=0, atol=0)


def test_collectives_are_not_tuned() -> None:
    assert not autotune.tunable(ops.all_reduce)
    assert autotune.tunable(ops.rms_norm)


def test_the_cache_keys_differ() -> None:
    on, off = PassConfig(autotune=True), PassConfig()
    assert on.key() != off.key()
    assert ir_passes.selection_key(on) != ir_passes.selection_key(off)
    assert on.for_range(1, 8).autotune
    with pytest.raises(ValueError, match="autotune got 'yes'"):
        PassConfig(autotune="yes")  # type: ignore[arg-type]


def test_a_range_is_timed_at_both_ends() -> None:
    assert autotune.timed_token_counts((9, 256)) == (9, 256)
    assert autotune.timed_token_counts((8, 8)) == (8,)  # a compile size
    assert autotune.timed_token_counts((257, None)) == (257, 257 * autotune.UNBOUNDED_FACTOR)
    assert autotune.timed_token_counts(None) == (None,)  # the traced size
    captured: list[list[Any]] = []

    def graph(x: Tensor, positions: Tensor, cache: Tensor) -> Any:
        return ops.rotary_embedding(positions, x, x[:, :64], 32, cache, True)

    x = torch.randn(20, 256).t().contiguous().t()  # column-major: strides kept
    positions = torch.randint(0, 40, (20,))
    gm = make_fx(graph, tracing_mode="symbolic")(x, positions, torch.randn(40, 32))
    node = next(n for n in gm.graph.nodes if "rotary_embedding" in str(n.target))
    fakes = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in node.args]
    for timed, tokens in ((64, 64), (520, 520), (None, 20)):
        args = autotune.concrete_arguments(ops.rotary_embedding, fakes, timed)
        captured.append(args)
        positions_arg, query = args[0], args[1]
        assert query.shape == (tokens, 256)
        assert query.stride() == (1, tokens)
        assert positions_arg.shape == (tokens,)
        assert positions_arg.dtype == torch.int64
        assert int(positions_arg.min()) >= 0
        assert int(positions_arg.max()) < min(tokens, 40)
        assert args[4].shape == (40, 32)  # other symbolic sizes: as traced
        assert query.std() > 0.5  # fresh normal values
    assert not torch.equal(captured[0][1][:20], captured[2][1][:20])


def test_decisions_round_trip_and_refuse_bad_data() -> None:
    timed = (
        autotune.Timed("(float32[1, 8])", {"a": 0.2, "native": 0.2}),
        autotune.Timed("(float32[4, 8])", {"a": 1.0, "native": 0.5}),
    )
    decision = autotune.Decision("rms_norm", timed, "a", "native")
    assert autotune.Decision.from_dict(decision.as_dict()) == decision
    assert decision.arguments == "(float32[4, 8])"  # the most tokens timed
    assert decision.timings_ms == {"a": 1.0, "native": 0.5}
    summary = decision.summary()
    assert "a -> native" not in summary
    assert summary.endswith("-> native (priority: a)")
    assert "(float32[1, 8]): a 200.0us, native 200.0us; (float32[4, 8])" in summary
    with pytest.raises(ValueError, match="expected op, timed"):
        autotune.Decision.from_dict({"op": "rms_norm"})
    with pytest.raises(ValueError, match="no timed token count"):
        autotune.Decision.from_dict({**decision.as_dict(), "timed": []})


@pytest.mark.parametrize(
    ("timings", "expected"),
    [
        # one count: the first whose time ties with the best
        ([{"p": 1.0, "q": 0.9, "native": 1.01}], "q"),
        ([{"p": 1.0, "q": 0.99, "native": 1.01}], "p"),
        # q wins at the large end by 10 % but loses by 50 % at the small one: p's worst is 1.11
        ([{"p": 1.0, "q": 1.5, "native": 1.0}, {"p": 1.0, "q": 0.9, "native": 1.0}], "p"),
        # q wins at one end and ties at the other
        ([{"p": 1.0, "q": 1.01, "native": 1.2}, {"p": 1.0, "q": 0.8, "native": 1.0}], "q"),
        # native loses by 5 % at one end, p by 30 % at the other
        ([{"p": 1.3, "native": 1.0}, {"p": 1.0, "native": 1.05}], "native"),
    ],
)
def test_the_choice_holds_at_every_timed_count(
    timings: list[dict[str, float]], expected: str
) -> None:
    order = [name for name in ("p", "q", "native") if name in timings[0]]
    assert autotune.pick(timings, order) == expected


def test_a_candidate_fastest_at_one_end_only_keeps_the_priority(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a graph compiled for 1 to 64 tokens, t_fast is 10 % faster than t_slow at 64 tokens
    but 50 % slower at one: the priority's t_slow stays (timed at 64 alone, t_fast would win)."""
    times = {1: {"t_slow": 1.0, "t_fast": 1.5, "native": 1.0}, 64: {"t_slow": 1.0, "t_fast": 0.9,
             "native": 1.0}}  # fmt: skip
    seen: list[int] = []

    def fake_measure(call: Any, device: torch.device) -> float:
        tokens = 1 if len(seen) < 3 else 64
        provider = ["t_slow", "t_fast", "native"][len(seen) % 3]
        seen.append(tokens)
        return times[tokens][provider]

    monkeypatch.setattr(autotune, "measure", fake_measure)
    graph = make_fx(ops.silu_and_mul, tracing_mode="symbolic")(torch.randn(5, 16)).graph
    report = PassReport()
    with ir_dispatch.priority(SLOW_FIRST):
        LoweringPass(report, PassConfig(autotune=True).for_range(1, 64))(graph)
    (decision,) = report.autotune.values()
    assert [t.arguments for t in decision.timed] == ["(float32[1, 16])", "(float32[64, 16])"]
    assert decision.choice == "t_slow"
    assert not decision.changed
    assert autotune.pick([times[64]], ["t_slow", "t_fast", "native"]) == "t_fast"


def test_a_static_token_count_is_timed_once_whatever_the_range() -> None:
    graph = make_fx(ops.silu_and_mul, tracing_mode="fake")(torch.randn(5, 16)).graph
    report = PassReport()
    with ir_dispatch.priority(SLOW_FIRST):
        LoweringPass(report, PassConfig(autotune=True).for_range(1, 64))(graph)
    (decision,) = report.autotune.values()
    assert [t.arguments for t in decision.timed] == ["(float32[5, 16])"]
    assert autotune.stats.timed == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_candidates_are_timed_as_graph_replays_or_launches_where_capture_fails() -> None:
    x = torch.randn(4096, device="cuda")
    replayed = autotune._time_cuda_graph(lambda: x * 2)
    assert 0 < replayed < 1.0  # milliseconds
    with pytest.raises(RuntimeError):
        autotune._time_cuda_graph(lambda: (x * 2).sum().item())
    assert autotune._time_cuda(lambda: (x * 2).sum().item()) > 0  # timed as launches
    assert not autotune._capturing([x])
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph):
        inside = autotune._capturing([x])
        x.add_(1)
    assert inside
