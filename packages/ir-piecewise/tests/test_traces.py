"""The trace cache: a module's Dynamo trace saved with its pieces and loaded instead of tracing,
only where it still describes the module, its inputs and its source."""

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ir_dispatch  # noqa: F401  (installs the dispatcher)
import ir_piecewise
from ir_piecewise import CompilationConfig, counters, traces
from ir_piecewise.backend import global_key
from ir_spec import ops

sys.path.insert(0, str(Path(__file__).parent))
from toy_model import ToyModel, toy_config

TOL = {"atol": 2e-5, "rtol": 2e-5}


def run_fresh(model: nn.Module, cfg: CompilationConfig, sizes: tuple[int, ...]) -> None:
    """Compile `model` as a new process would (Dynamo reset, counters zeroed) and check it."""
    torch._dynamo.reset()
    counters.reset()
    compiled = ir_piecewise.compile(model, cfg)
    with torch.no_grad():
        for n in sizes:
            x = torch.randn(n, 64)
            torch.testing.assert_close(compiled(x), model(x), **TOL)


def test_saved_trace_is_loaded_and_agrees(tmp_path: Path) -> None:
    model = ToyModel().eval()
    run_fresh(model, toy_config(tmp_path), (5, 2))
    assert counters.num_traces_loaded == 0
    run_fresh(model, toy_config(tmp_path), (1, 7, 33))  # first call of 1: the dim stays dynamic
    assert counters.num_traces_loaded == 1
    assert counters.num_backend_compilations == 0


def test_pieces_compiled_with_grad_enabled_are_saved_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Called with grad enabled, a piece whose inputs require grad records autograd; it is saved
    in the bundled form, so the next process loads every piece (one could not be saved and was
    compiled in every process before)."""
    model = ToyModel()  # parameters require grad
    x = torch.randn(5, 64)
    for _ in range(2):
        torch._dynamo.reset()
        counters.reset()
        out = ir_piecewise.compile(model, toy_config(tmp_path))(x)
    assert counters.num_traces_loaded == 1
    assert counters.num_backend_compilations == 0
    assert "could not cache" not in caplog.text
    assert out.requires_grad
    torch.testing.assert_close(out, model(x), **TOL)


def test_pieces_saved_for_inference_are_not_loaded_to_record_autograd(tmp_path: Path) -> None:
    """A piece compiled under ``no_grad`` records no autograd; a later process calling with grad
    enabled compiles its own form instead of loading that one, so its outputs require grad as
    eager ones do (they did not, when the piece key ignored the grad mode)."""
    model = ToyModel()  # parameters require grad
    x = torch.randn(5, 64)
    run_fresh(model, toy_config(tmp_path), (5,))  # the inference forms, saved
    assert counters.num_backend_compilations > 0
    torch._dynamo.reset()
    counters.reset()
    out = ir_piecewise.compile(model, toy_config(tmp_path))(x)
    assert out.requires_grad
    torch.testing.assert_close(out, model(x), **TOL)
    assert counters.num_backend_compilations > 0
    # and each form is loaded again by the process after
    for grad_enabled in (False, True):
        torch._dynamo.reset()
        counters.reset()
        with torch.set_grad_enabled(grad_enabled):
            out = ir_piecewise.compile(model, toy_config(tmp_path))(x)
        assert out.requires_grad == grad_enabled
        assert counters.num_backend_compilations == 0


def test_traces_are_saved_where_aot_compile_is_off_by_default(tmp_path: Path) -> None:
    # torch 2.11's default: compiled functions get no `aot_compile` unless asked for (patched,
    # not monkeypatched: deleting a torch config attribute, as an undo may, hides it for good)
    model = ToyModel().eval()
    with torch._dynamo.config.patch(enable_aot_compile=False):
        run_fresh(model, toy_config(tmp_path), (4,))
        run_fresh(model, toy_config(tmp_path), (6,))
    assert counters.num_traces_loaded == 1


class OpsHolder(nn.Module):
    """Holds the op namespace as an attribute, as the reference models do (``self.ops``):
    Dynamo's saved guards then hold the ops themselves."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = ops
        self.act = ops.silu_and_mul
        self.up = nn.Linear(64, 128, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.rms_norm(self.act(self.up(x)), None, 1e-6)


def test_a_module_holding_ops_saves_and_loads_its_trace(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = OpsHolder().eval()
    with caplog.at_level(logging.WARNING, logger="ir_piecewise"):
        run_fresh(model, toy_config(tmp_path), (5,))
        run_fresh(model, toy_config(tmp_path), (3, 8))
    assert "could not" not in caplog.text
    assert counters.num_traces_loaded == 1
    assert counters.num_backend_compilations == 0


def test_trace_key_follows_what_the_trace_depends_on(tmp_path: Path) -> None:
    key = global_key(toy_config(tmp_path))
    model = ToyModel().eval()

    def key_of(m: nn.Module, x: torch.Tensor) -> str:
        return traces.trace_key(key, m, {"x": x}, [("x", 0)])

    base = key_of(model, torch.randn(5, 64))
    assert key_of(model, torch.randn(9, 64)) == base  # the dynamic dim is free
    assert key_of(ToyModel(seed=3).eval(), torch.randn(5, 64)) == base  # weights are inputs
    assert key_of(model, torch.randn(5, 64, dtype=torch.float64)) != base
    assert key_of(ToyModel(hidden=96).eval(), torch.randn(5, 96)) != base
    assert key_of(ToyModel().train(), torch.randn(5, 64)) != base
    scaled = ToyModel().eval()
    scaled.layers[0].scale = 2.0  # a plain attribute the forward might read
    assert key_of(scaled, torch.randn(5, 64)) != base
    other = global_key(toy_config(tmp_path, compile_sizes=(4,)))
    assert traces.trace_key(other, model, {"x": torch.randn(5, 64)}, [("x", 0)]) != base


def test_changed_source_is_traced_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    model = ToyModel().eval()
    run_fresh(model, toy_config(tmp_path), (5,))
    real = traces.source_text

    def edited(module_name: str, first: int, end: int) -> str:
        text = real(module_name, first, end)
        return text.replace("1e-6", "1e-5") if module_name == "toy_model" else text

    monkeypatch.setattr(traces, "source_text", edited)
    with caplog.at_level(logging.INFO, logger="ir_piecewise"):
        run_fresh(model, toy_config(tmp_path), (5,))
    assert "is stale (source changed: toy_model:" in caplog.text
    assert counters.num_traces_loaded == 0


def test_a_piece_missing_from_the_cache_means_tracing_again(tmp_path: Path) -> None:
    model = ToyModel().eval()
    cfg = toy_config(tmp_path)
    run_fresh(model, cfg, (5,))
    with torch.no_grad():  # as the calls were
        key = traces.trace_key(global_key(cfg), model, {"x": torch.randn(5, 64)}, [("x", 0)])
    trace = ir_piecewise.CompileCache(tmp_path / "cache").path(key)
    assert trace.exists()
    for entry in (tmp_path / "cache").glob("*/*.irpw"):
        if entry != trace:
            entry.unlink()
    run_fresh(model, cfg, (5, 3))
    assert counters.num_traces_loaded == 0
    assert counters.num_backend_compilations > 0


def test_only_modules_without_hooks_save_traces(tmp_path: Path) -> None:
    model = ToyModel().eval()
    assert ir_piecewise.compile(model, toy_config(tmp_path)).trace_cache is not None
    assert ir_piecewise.compile(model, toy_config(tmp_path, cache=False)).trace_cache is None
    assert ir_piecewise.compile(model, toy_config(tmp_path, check_guards=True)).trace_cache is None

    def plain(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    assert ir_piecewise.compile(plain, toy_config(tmp_path)).trace_cache is None
    model.register_forward_hook(lambda *args: None)
    assert ir_piecewise.compile(model, toy_config(tmp_path)).trace_cache is None


MODEL_SOURCE = """
import torch
from torch import nn
from ir_spec import ops

class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 64))

    def forward(self, x):
        return ops.rms_norm(x * SCALE, self.weight, 1e-6)
"""

RUNNER = """
import json, sys
import torch
import ir_dispatch, ir_piecewise
sys.path.insert(0, sys.argv[1])
from scaled_model import Scaled
model = Scaled()
compiled = ir_piecewise.compile(model, ir_piecewise.CompilationConfig(cache_dir=sys.argv[2]))
x = torch.randn(6, 64, generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    error = (compiled(x) - model(x)).abs().max().item()
print(json.dumps({"error": error, "counters": ir_piecewise.counters.as_dict()}))
"""


def test_a_new_process_with_edited_source_traces_again(tmp_path: Path) -> None:
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)

    def run(scale: str) -> dict[str, Any]:
        source = MODEL_SOURCE.replace("SCALE", scale)
        (tmp_path / "scaled_model.py").write_text(textwrap.dedent(source))
        done = subprocess.run(
            [sys.executable, str(runner), str(tmp_path), str(tmp_path / "cache")],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    assert run("2.0")["counters"]["num_traces_loaded"] == 0
    assert run("2.0")["counters"]["num_traces_loaded"] == 1
    edited = run("3.0")  # same module, class and sizes; only the source differs
    assert edited["counters"]["num_traces_loaded"] == 0
    assert edited["error"] < 1e-5


class _TableLookup(nn.Module):
    """Rows of `x` (the dynamic dim) against a table whose row count is static."""

    def forward(self, x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        return ops.rms_norm(x, torch.ones(64), 1e-6) @ table.t() + table.shape[0]


@pytest.mark.parametrize("cache", [True, False], ids=["trace cache", "dynamo"])
def test_a_call_of_other_static_sizes_runs_a_trace_of_its_own(
    tmp_path: Path, cache: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # guards are dropped: without the signature check, a table of 5 rows would run the code
    # traced for 3 (a wrong result, or an assertion deep in Inductor's code)
    torch._dynamo.reset()
    counters.reset()
    model = _TableLookup()
    cfg = CompilationConfig(cache_dir=tmp_path, cache=cache)
    compiled = ir_piecewise.compile(model, cfg, dynamic_arg_dims={"x": 0})
    caplog.set_level(logging.INFO, logger="ir_piecewise")
    with torch.no_grad():
        for rows, tokens in ((3, 4), (5, 4), (3, 7), (5, 2)):
            x, table = torch.randn(tokens, 64), torch.randn(rows, 64)
            torch.testing.assert_close(compiled(x, table), model(x, table), **TOL)
    assert counters.num_graphs_seen == 2  # one trace a table size, each for every token count
    assert "called with inputs of other static sizes" in caplog.text


def test_static_signature_leaves_out_the_dynamic_dims_only() -> None:
    from ir_piecewise.signature import static_signature

    def sig(x: torch.Tensor, cache: list[torch.Tensor], scale: float = 1.0) -> Any:
        return static_signature({"x": x, "cache": cache, "scale": scale}, [("x", 0)])

    base = sig(torch.ones(4, 8), [torch.ones(2, 3)])
    assert sig(torch.ones(9, 8), [torch.ones(2, 3)]) == base
    assert sig(torch.ones(4, 9), [torch.ones(2, 3)]) != base
    assert sig(torch.ones(4, 8), [torch.ones(3, 3)]) != base
    assert sig(torch.ones(4, 8), [torch.ones(2, 3)] * 2) != base
    assert sig(torch.ones(4, 8, dtype=torch.float16), [torch.ones(2, 3)]) != base
    assert sig(torch.ones(4, 8), [torch.ones(2, 3)], 2.0) != base
    assert sig(torch.ones(4, 8), [torch.ones(2, 3)], float("nan")) == sig(
        torch.ones(4, 8), [torch.ones(2, 3)], float("nan")
    )


def test_static_signature_compares_layouts_as_at_two_tokens() -> None:
    """Row-major rows at any token count share a signature, and so do column-major ones where
    the strides tell the layout; rows of another layout or padding do not."""
    from ir_piecewise.signature import static_signature

    def sig(x: torch.Tensor) -> Any:
        return static_signature({"x": x}, [("x", 0)])

    row_major = sig(torch.ones(5, 8))
    assert {sig(torch.ones(t, 8)) for t in (0, 1, 2, 9)} == {row_major}
    column_major = sig(torch.ones(8, 5).mT)
    assert column_major != row_major
    assert {sig(torch.ones(8, t).mT) for t in (0, 1, 2, 9)} == {column_major}
    padded = sig(torch.ones(5, 13)[:, :8])
    assert padded not in (row_major, column_major)
    assert sig(torch.ones(1, 13)[:, :8]) == padded
    three_d = static_signature({"x": torch.ones(2, 5, 8)}, [("x", 1)])
    assert static_signature({"x": torch.ones(2, 0, 8)}, [("x", 1)]) == three_d


def test_strides_at_two_keep_the_memory_order() -> None:
    from ir_piecewise.signature import strides_at_two

    assert strides_at_two((0, 8), (8, 1), 0) == ([2, 8], [8, 1])
    assert strides_at_two((1, 8), (1, 1), 0) == ([2, 8], [1, 2])  # column-major, one token
    assert strides_at_two((0, 8), (13, 1), 0) == ([2, 8], [13, 1])  # padded rows
    assert strides_at_two((2, 0, 8), (8, 8, 1), 1) == ([2, 2, 8], [16, 8, 1])
    assert strides_at_two((4, 0, 8), (8, 32, 1), 1) == ([4, 2, 8], [8, 32, 1])  # tokens outside
