"""Piecewise compilation on CPU: splitting, per-range and per-size compilation, the compile
cache across processes, corrupt entries and the guard-check mode."""

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import ir_dispatch  # noqa: F401  (installs the dispatcher)
import ir_piecewise
from ir_piecewise import CompilationConfig, CUDAGraphMode, counters
from ir_piecewise.pieces import mutated_inputs
from ir_spec import ops

sys.path.insert(0, str(Path(__file__).parent))
from toy_model import ToyModel, toy_config

HERE = Path(__file__).parent
TOL = {"atol": 2e-5, "rtol": 2e-5}


def test_config_refuses_bad_values() -> None:
    with pytest.raises(ValueError, match="compile_sizes: got 0"):
        CompilationConfig(compile_sizes=(0,))
    with pytest.raises(ValueError, match=r"compile_ranges_endpoints.*strictly increasing"):
        CompilationConfig(compile_ranges_endpoints=(16, 8))
    with pytest.raises(
        ValueError, match=r"backend: unknown piece compiler 'tvm'; installed piece compilers: "
        r"eager, inductor"
    ):  # fmt: skip
        CompilationConfig(backend="tvm")
    with pytest.raises(ValueError, match="cudagraph_mode"):
        CompilationConfig(cudagraph_mode="full")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="splitting_ops"):
        CompilationConfig(splitting_ops=("attention",))


def test_config_defaults_and_ranges() -> None:
    c = CompilationConfig(compile_ranges_endpoints=(8, 64), max_capture_size=40)
    # the rotary fusions (on by default) end a range at their threshold, 256 tokens
    assert c.fusion_endpoints == (256,)
    assert c.ranges == ((1, 8), (9, 64), (65, 256), (257, None))
    assert c.cudagraph_capture_sizes == (1, 2, 4, 8, 16, 32, 40)
    assert c.padded_size(3) == 4
    assert c.padded_size(40) == 40
    assert c.padded_size(41) is None
    names = CompilationConfig(
        splitting_ops=(torch.ops.ir_piecewise_toy.attention.default, "a.b.default", "c::d")
    ).splitting_op_names
    assert names == {"ir_piecewise_toy::attention", "a::b", "c::d"}


def test_split_keeps_order_and_groups_consecutive_splitting_ops() -> None:
    def fn(x: Tensor) -> Tensor:
        a, b = torch.ops.aten.var_mean.correction(x, [0])  # getitems stay with their producer
        out = torch.empty_like(x)
        torch.ops.ir_piecewise_toy.attention(x, x, x, out)
        torch.ops.ir_piecewise_toy.attention(out, x, x, out)  # joins the previous splitting piece
        return (out * a + b).relu()

    gm = torch.fx.symbolic_trace(fn)
    split, pieces = ir_piecewise.split_graph(gm, {"ir_piecewise_toy::attention"})
    assert [p.is_splitting for p in pieces] == [False, True, False]
    assert all(p.capturable for p in pieces)
    x = torch.randn(6, 64)
    torch.testing.assert_close(split(x), fn(x))


def test_split_counts_compilations_and_results(tmp_path: Path) -> None:
    model = ToyModel().eval()
    compiled = ir_piecewise.compile(
        model, toy_config(tmp_path, compile_sizes=(4,), compile_ranges_endpoints=(8,))
    )
    with torch.no_grad():
        for n in (5, 1, 4, 9, 3, 4, 17):  # first call traces with size 5
            x = torch.randn(n, 64)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert counters.num_graphs_seen == 1
    assert counters.num_piecewise_graphs_seen == 7  # 4 compiled pieces around 3 attentions
    assert counters.num_piecewise_capturable_graphs_seen == 4
    # 3 distinct pieces (the two middle layers are the same code) x 3 ranges at trace time
    # ([1, 8], [9, 256] up to the rotary fusions' threshold, [257, inf)), then x size 4 on its
    # first call; the repeated piece reuses what its twin compiled
    assert counters.num_backend_compilations == 3 * 3 + 3
    assert counters.num_artifacts_reused == 3 + 1
    assert counters.num_cache_misses == 12
    assert counters.num_cache_hits == 0


def test_eager_backend_compiles_nothing(tmp_path: Path) -> None:
    model = ToyModel().eval()
    compiled = ir_piecewise.compile(model, toy_config(tmp_path, backend="eager"))
    with torch.no_grad():
        for n in (6, 2):
            x = torch.randn(n, 64)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert counters.num_backend_compilations == 0
    assert counters.num_piecewise_graphs_seen == 7


def run_toy(cache: Path, out: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(HERE / "run_toy.py"), str(cache), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_second_process_compiles_nothing_and_agrees(tmp_path: Path) -> None:
    cold = run_toy(tmp_path / "cache", tmp_path / "cold.json")
    warm = run_toy(tmp_path / "cache", tmp_path / "warm.json")
    assert cold["counters"]["num_backend_compilations"] == 12  # as in the test above
    assert cold["counters"]["num_traces_loaded"] == 0
    assert warm["counters"]["num_backend_compilations"] == 0
    assert warm["counters"]["num_cache_hits"] == 12
    assert warm["counters"]["num_traces_loaded"] == 1  # Dynamo did not run
    assert warm["outputs"] == cold["outputs"]


def test_truncated_cache_entry_is_recompiled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = ToyModel().eval()
    x = torch.randn(5, 64)
    with torch.no_grad():
        ir_piecewise.compile(model, toy_config(tmp_path))(x)
        entries = sorted((tmp_path / "cache").glob("*/*.irpw"))
        assert entries
        for entry in entries:
            entry.write_bytes(entry.read_bytes()[: len(entry.read_bytes()) // 2])
        counters.reset()
        torch._dynamo.reset()
        with caplog.at_level(logging.WARNING, logger="ir_piecewise"):
            out = ir_piecewise.compile(model, toy_config(tmp_path))(x)
    torch.testing.assert_close(out, model(x), **TOL)
    assert "corrupt cache entry" in caplog.text
    assert counters.num_cache_hits == 0
    assert counters.num_backend_compilations == counters.num_cache_misses > 0
    assert all(e.stat().st_size > 0 for e in entries)  # rewritten whole


def test_with_inductors_graph_cache_off_one_warning_and_nothing_stored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``standalone_compile`` saves a piece only through Inductor's FX graph cache. With that
    cache off, the compile cache says so once, instead of a warning of torch's and one of its
    own a piece (its attempt to store each piece), and stores nothing (no pieces, so no trace
    either); the compiled model still runs."""
    model = ToyModel().eval()
    x = torch.randn(5, 64)
    with (
        torch.no_grad(),
        torch._inductor.config.patch(fx_graph_cache=False),
        caplog.at_level(logging.WARNING),
    ):
        out = ir_piecewise.compile(model, toy_config(tmp_path))(x)
    torch.testing.assert_close(out, model(x), **TOL)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "FX graph cache is off" in warnings[0].getMessage()
    assert counters.num_backend_compilations > 1  # several pieces, one warning
    assert not list((tmp_path / "cache").glob("*/*.irpw"))


def test_guard_check_mode_raises_where_a_recompile_was_needed(tmp_path: Path) -> None:
    def fn(x: Tensor, y: Tensor) -> Tensor:
        return torch.relu(x) * 2 + y

    checked = ir_piecewise.compile(fn, toy_config(tmp_path, check_guards=True, cache=False))
    checked(torch.randn(4, 3), torch.randn(4, 3))
    checked(torch.randn(9, 3), torch.randn(9, 3))  # the token dim is dynamic: no recompile
    with pytest.raises(ir_piecewise.RecompileError, match="would need a recompile"):
        checked(torch.randn(9, 5), torch.randn(9, 5))


def test_dynamic_arg_dims_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown argument 'y'"):
        ir_piecewise.compile(ToyModel(), toy_config(tmp_path), dynamic_arg_dims={"y": 0})
    compiled = ir_piecewise.compile(ToyModel(), toy_config(tmp_path), dynamic_arg_dims={"x": 0})
    with torch.no_grad():
        assert compiled(torch.randn(3, 64)).shape == (3, 64)


def test_cudagraph_mode_is_ignored_for_cpu_tensors(tmp_path: Path) -> None:
    model = ToyModel().eval()
    compiled = ir_piecewise.compile(
        model, toy_config(tmp_path, cudagraph_mode=CUDAGraphMode.PIECEWISE, cache=False)
    )
    with torch.no_grad():
        for n in (5, 3):
            x = torch.randn(n, 64)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert counters.num_cudagraph_captured == 0


@pytest.mark.parametrize("cache", [False, True], ids=["dynamo", "saved-trace"])
def test_dynamo_reset_after_the_first_call_traces_again_with_dynamic_dims(
    tmp_path: Path, cache: bool
) -> None:
    model = ToyModel().eval()
    compiled = ir_piecewise.compile(model, toy_config(tmp_path, cache=cache))
    with torch.no_grad():
        compiled(torch.randn(5, 64))
        torch._dynamo.reset()  # e.g. another compile in the same process reset Dynamo
        for n in (1, 8):  # a static re-trace at 1 would fail (or be wrong) at 8
            x = torch.randn(n, 64)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
    # an ahead-of-time trace (what the cache saves) runs without Dynamo: a reset is harmless
    assert counters.num_graphs_seen == (1 if cache else 2)


def test_maybe_inplace_arguments_count_as_mutated_inputs() -> None:
    def fn(x: Tensor, r: Tensor, w: Tensor) -> Tensor:
        h, r = torch.ops.ir.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
        return h + r

    gm = torch.fx.symbolic_trace(fn)
    assert mutated_inputs(gm) == {0, 1, 2}


def test_graph_structure_ignores_names_but_not_code_or_constants() -> None:
    from ir_piecewise.pieces import graph_structure

    class Scaled(torch.nn.Module):
        def __init__(self, scale: float) -> None:
            super().__init__()
            self.register_buffer("scale", torch.tensor([scale]))

        def forward(self, x: Tensor) -> Tensor:
            return (x * self.scale).relu()

    def renamed(gm: torch.fx.GraphModule, prefix: str) -> torch.fx.GraphModule:
        for node in gm.graph.nodes:
            if node.op != "get_attr":
                node.name = prefix + node.name
        gm.recompile()
        return gm

    a = renamed(torch.fx.symbolic_trace(Scaled(2.0)), "layer_0_")
    b = renamed(torch.fx.symbolic_trace(Scaled(2.0)), "layer_1_")
    c = torch.fx.symbolic_trace(Scaled(3.0))
    assert a.code != b.code
    assert graph_structure(a) == graph_structure(b)
    assert graph_structure(a) != graph_structure(c)
    sigmoid = torch.fx.symbolic_trace(lambda x: (x * 2.0).sigmoid())
    relu = torch.fx.symbolic_trace(lambda x: (x * 2.0).relu())
    assert graph_structure(sigmoid) != graph_structure(relu)


class RotaryProjection(torch.nn.Module):
    """Rotary embedding of a split projection: the reshape of a strided view in the native
    rotary is where a size-1 hint used to specialize the compiled code to one token."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(64, 128, bias=False)
        self.register_buffer("cache", torch.randn(32, 16))

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        q, k = self.proj(x).split([64, 64], dim=-1)
        q, k = ops.rotary_embedding(positions, q, k, 16, self.cache, True)
        return q + k


def test_first_call_of_one_token_compiles_code_for_every_size(tmp_path: Path) -> None:
    model = RotaryProjection().eval()
    compiled = ir_piecewise.compile(model, toy_config(tmp_path))
    with torch.no_grad():
        for n in (1, 4, 1, 9):
            x, positions = torch.randn(n, 64), torch.randint(0, 32, (n,))
            torch.testing.assert_close(compiled(x, positions), model(x, positions), **TOL)


def test_a_relocated_input_of_another_shape_is_refused() -> None:
    """A replay copies a relocated input into the captured one; a smaller tensor would be
    broadcast silently, so a different shape or dtype is refused, naming both."""
    from ir_piecewise.cudagraphs import CUDAGraphRunner, GraphPool, _Captured

    runner = CUDAGraphRunner(lambda *a: a, GraphPool(), name="piece 0", weak_outputs=False)
    runner.captured[4] = _Captured(graph=None, inputs=[torch.zeros(3, 2)], outputs=None)  # type: ignore[arg-type]
    for live in (torch.ones(1, 2), torch.ones(3, 2, dtype=torch.float64)):
        with pytest.raises(
            ValueError, match=r"piece 0: argument 0 has shape \(.*captured with shape \(3, 2\)"
        ):
            runner(4, live)
    assert torch.equal(runner.captured[4].inputs[0], torch.zeros(3, 2))


def _norm(x: Tensor, w: Tensor) -> Tensor:
    out: Tensor = ops.rms_norm(x, w, 1e-6)
    return out


@pytest.mark.parametrize("first", [5, 1, 0])
@pytest.mark.parametrize("layout", ["padded rows", "3-D", "column-major"])
def test_calls_of_no_tokens_and_view_inputs_run_as_eager(first: int, layout: str) -> None:
    """A call of no tokens runs the first range's code; after a first call of no tokens, the
    calls with tokens get a trace of their own; an input that is a view (rows padded: Dynamo
    lifts its stride as a symbol of its own) has one token dimension all the same."""

    def make(tokens: int) -> Tensor:
        if layout == "3-D":
            return torch.randn(2, tokens, 8)
        if layout == "column-major":  # empty, it reports row-major strides
            return torch.randn(tokens, 8).mT.contiguous().mT
        return torch.randn(tokens, 13)[:, :8]

    w = torch.randn(8)
    dims = {"x": 1 if layout == "3-D" else 0}
    compiled = ir_piecewise.compile(_norm, CompilationConfig(cache=False), dynamic_arg_dims=dims)
    try:
        for tokens in (first, 0, 3, 9):
            x = make(tokens)
            torch.testing.assert_close(compiled(x, w), ops.rms_norm.native(x, w, 1e-6), **TOL)
    finally:
        torch._dynamo.reset()


def _scaled_rows(positions: Tensor, x: Tensor) -> Tensor:
    return x * positions.unsqueeze(-1)


def test_a_first_call_of_no_tokens_gets_rows_of_its_own_count() -> None:
    """The tokens inside a leading dimension ([2, tokens]): a first call of no tokens is traced
    ahead of time on an example of two (on the empty tensors, whose strides are made up, Dynamo
    may read the token count from a stride), and the calls with tokens share its trace."""
    dims = {"positions": 1, "x": 1}
    config = CompilationConfig(cache=False)
    compiled = ir_piecewise.compile(_scaled_rows, config, dynamic_arg_dims=dims)
    try:
        for tokens in (0, 3, 0, 1):
            positions, x = torch.randn(2, tokens), torch.randn(2, tokens, 8)
            out = compiled(positions, x)
            assert out.shape == (2, tokens, 8)
            torch.testing.assert_close(out, _scaled_rows(positions, x))
    finally:
        torch._dynamo.reset()
    assert counters.num_graphs_seen == 1


def _reads_donated_after_the_split(x: Tensor, r: Tensor, w: Tensor) -> Tensor:
    a, _ = ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
    out: Tensor = ops.rms_norm(a, w, 1e-6) + r  # r was donated
    return out


@pytest.mark.parametrize("split", [(), ("ir::fused_add_rms_norm",), ("ir::rms_norm",)])
def test_a_donated_value_used_again_in_any_piece_is_refused(split: tuple[str, ...]) -> None:
    """Each piece's passes see only that piece: the whole graph is checked before it is
    split, and the refusal is the IR passes' `ValueError` itself."""
    config = CompilationConfig(splitting_ops=split, cache=False)
    compiled = ir_piecewise.compile(
        _reads_donated_after_the_split, config, dynamic_arg_dims={"x": 0, "r": 0}
    )
    try:
        with pytest.raises(ValueError, match=r"'x_residual'.*used again"):
            compiled(torch.randn(4, 8), torch.randn(4, 8), torch.randn(8))
    finally:
        torch._dynamo.reset()
