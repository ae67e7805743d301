"""`DynamoPiecewiseBackend`: the graphs Dynamo hands a backend, split and compiled piecewise."""

import sys
from pathlib import Path

import torch

import ir_dispatch  # noqa: F401  (installs the dispatcher)
from ir_piecewise import counters
from ir_piecewise.dynamo import DynamoPiecewiseBackend, GraphRunner

sys.path.insert(0, str(Path(__file__).parent))
from toy_model import ToyModel, toy_config

TOL = {"atol": 2e-5, "rtol": 2e-5}


def test_dynamic_graph_compiles_per_range_and_size(tmp_path: Path) -> None:
    model = ToyModel().eval()
    config = toy_config(tmp_path, compile_sizes=(4,), compile_ranges_endpoints=(8,))
    backend = DynamoPiecewiseBackend(config)
    compiled = torch.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for n in (5, 4, 12, 3):
            x = torch.randn(n, 64)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert counters.num_graphs_seen == 1  # one dynamic graph serves every size
    assert counters.num_piecewise_graphs_seen == 7
    # 3 distinct pieces x (3 ranges, the rotary fusions' threshold 256 ending one, + the size 4)
    assert counters.num_backend_compilations + counters.num_cache_hits == 12
    assert set(counters.fusions_enabled) == {"range-1-8", "range-9-256", "range-257-inf", "size-4"}


def test_static_graphs_come_from_dynamos_recompilations(tmp_path: Path) -> None:
    model = ToyModel(layers=1).eval()
    runners: list[GraphRunner] = []
    backend = DynamoPiecewiseBackend(toy_config(tmp_path, backend="eager"))

    def recording(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> GraphRunner:
        runner = backend(gm, example_inputs)
        runners.append(runner)
        return runner

    compiled = torch.compile(model, backend=recording, dynamic=False)
    with torch.no_grad():
        for n in (6, 2):
            x = torch.randn(n, 64)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert len(runners) == 2  # one static graph per shape
    assert all(not runner.sites for runner in runners)
