"""Autotuning per compile range with the compile cache: each range times its own shapes, the
decisions are stored with the pieces, and a warm start loads them without timing again."""

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import Tensor

import ir_dispatch
import ir_passes
import ir_piecewise
from ir_passes import PassConfig, autotune
from ir_piecewise import counters
from ir_piecewise.backend import global_key
from ir_spec import ops

sys.path.insert(0, str(Path(__file__).parent))
from toy_model import ToyModel, toy_config

TOL = {"atol": 2e-5, "rtol": 2e-5}


def slow(x: Tensor) -> Tensor:
    """A provider slower than any other: what autotuning must not keep."""
    out: Tensor = torch.ops.ir_piecewise_autotune_test.slow(x)
    return out


@torch.library.custom_op("ir_piecewise_autotune_test::slow", mutates_args=())
def _slow(x: Tensor) -> Tensor:
    time.sleep(20e-3)
    out: Tensor = ops.silu_and_mul.native(x)
    return out


@_slow.register_fake
def _slow_fake(x: Tensor) -> Tensor:
    return x.new_empty(*x.shape[:-1], x.shape[-1] // 2)


ops.silu_and_mul.register_impl("t_pw_slow")(slow)


@pytest.fixture
def slow_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The slow provider first in the priority; Inductor's own caches in a fresh directory,
    so the cold start runs the passes."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    autotune.clear_cache()
    autotune.stats.reset()
    with ir_dispatch.priority(silu_and_mul=["t_pw_slow"]):
        yield
    autotune.clear_cache()


def native_reference(model: ToyModel, x: Tensor) -> Tensor:
    with ir_dispatch.priority({op.name: ["native"] for op in ops}):
        out: Tensor = model(x)
    return out


@pytest.mark.usefixtures("slow_first")
def test_each_range_is_tuned_and_a_warm_start_times_nothing(tmp_path: Path) -> None:
    model = ToyModel().eval()
    config = toy_config(tmp_path, compile_ranges_endpoints=(8,), passes=PassConfig(autotune=True))
    with torch.no_grad():
        compiled = ir_piecewise.compile(model, config)
        x = torch.randn(5, 64)
        torch.testing.assert_close(compiled(x), native_reference(model, x), **TOL)
    cold = {label: dict(d) for label, d in counters.autotune_decisions.items()}
    # one silu_and_mul a layer; the three layers' pieces are two distinct codes per range
    assert sorted(cold) == ["range-1-8", "range-257-inf", "range-9-256"]
    tokens = {"range-1-8": 8, "range-9-256": 256, "range-257-inf": 257 * 8}
    for label, decisions in cold.items():
        assert decisions, label
        for decision in decisions.values():
            assert decision.op == "silu_and_mul"
            assert decision.arguments == f"(float32[{tokens[label]}, 256])"
            assert decision.priority_choice == "t_pw_slow"
            assert decision.choice == "native"  # the only other candidate on the CPU
            assert decision.timings_ms["t_pw_slow"] > decision.timings_ms["native"]
    timed = autotune.stats.timed
    assert timed == 2 * 3  # two candidates, once a range: identical layers share decisions
    assert counters.num_backend_compilations > 0

    counters.reset()
    autotune.clear_cache()
    autotune.stats.reset()
    torch._dynamo.reset()
    with torch.no_grad():
        warm = ir_piecewise.compile(model, config)
        for n in (5, 12, 300):
            x = torch.randn(n, 64)
            torch.testing.assert_close(warm(x), native_reference(model, x), **TOL)
    assert counters.num_backend_compilations == 0
    assert counters.num_cache_hits > 0
    assert autotune.stats.timed == 0
    assert counters.autotune_decisions == cold
    report = ir_passes.last_report()
    assert report is not None
    assert not report.passes_ran
    assert report.autotune
    assert all(d.changed for d in report.autotune.values())


def test_the_autotune_flag_is_in_the_cache_key(tmp_path: Path) -> None:
    off = toy_config(tmp_path)
    on = toy_config(tmp_path, passes=PassConfig(autotune=True))
    assert global_key(on) != global_key(off)
