"""The ``ir_stack`` Dynamo backend: ``torch.compile(model, backend="ir_stack", options=...)``
runs priorities, IR passes, the piecewise split and CUDA graphs as configured; by name through
the ``torch_dynamo_backends`` entry point with nothing imported first."""

import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch

import ir_dispatch
import ir_passes
import ir_piecewise
from ir_piecewise import CompilationConfig, counters
from ir_stack import Config
from ir_stack.dynamo import backend, config_from_options
from ir_stack.models import TINY, LlamaModel

BY_NAME = "ir_stack" in {ep.name for ep in entry_points(group="torch_dynamo_backends")}


def generate(forward: object, model: LlamaModel) -> torch.Tensor:
    """A prefill of 5 tokens for 2 sequences, then two decode steps."""
    ids = torch.randint(0, TINY.vocab_size, (2, 5), generator=torch.Generator().manual_seed(1))
    cache = model.new_kv_cache(2)
    out = [forward(ids, torch.arange(5).repeat(2, 1), cache)]  # type: ignore[operator]
    for step in (5, 6):
        nxt = out[-1].view(2, -1, TINY.vocab_size)[:, -1].argmax(-1, keepdim=True)
        out.append(forward(nxt, torch.full((2, 1), step), cache))  # type: ignore[operator]
    return torch.cat(out)


def test_options_mapping_runs_the_reference_model_piecewise(tmp_path: Path) -> None:
    torch._dynamo.reset()
    counters.reset()
    model = LlamaModel().eval()
    options = {
        "priority": {"rms_norm": ["native"]},
        "passes": {"level": 1},
        "piecewise": {"compile_ranges_endpoints": [4], "cache_dir": str(tmp_path)},
    }
    compiled = torch.compile(model, backend=backend, options=options)
    with torch.no_grad():
        expected = generate(model, model)
        got = generate(compiled, model)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert ir_dispatch.effective_priority("rms_norm")[0] == "native"
    assert counters.num_graphs_seen >= 2  # the prefill's graph and the decode's
    assert counters.num_piecewise_graphs_seen > counters.num_graphs_seen  # split at attention
    assert counters.num_backend_compilations + counters.num_cache_hits > 0
    torch._dynamo.reset()


def test_a_config_without_piecewise_compiles_with_the_passes() -> None:
    torch._dynamo.reset()
    counters.reset()

    def add_then_norm(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        from ir_spec import ops

        return ops.rms_norm(x + r, w, 1e-6) * 2

    x, r, w = torch.randn(4, 32), torch.randn(4, 32), torch.randn(32)
    config = Config(passes=ir_passes.PassConfig(force_fusion=True))
    with torch._inductor.config.patch(fx_graph_cache=False):
        out = torch.compile(add_then_norm, backend=backend, options=config)(x, r, w)
    torch.testing.assert_close(out, add_then_norm(x, r, w))
    report = ir_passes.last_report()
    assert report is not None
    assert report.fusions[ir_passes.RESIDUAL_ADD_PATTERN] == 1
    assert counters.num_graphs_seen == 0  # not piecewise
    torch._dynamo.reset()


def test_options_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ir-stack.toml"
    path.write_text(
        '[passes]\nlevel = 1\n[piecewise]\nbackend = "eager"\ncudagraph_mode = "piecewise"\n'
    )
    monkeypatch.setenv("IR_STACK_CONFIG", str(path))
    config = config_from_options(None)
    assert config.passes.level == 1
    assert config.piecewise is not None
    assert config.piecewise.backend == "eager"
    assert config.piecewise.cudagraph_mode is ir_piecewise.CUDAGraphMode.PIECEWISE
    given = Config(piecewise=CompilationConfig(compile_sizes=(2,)))
    assert config_from_options(given) is given
    mapping = {"piecewise": {"cudagraph_mode": ir_piecewise.CUDAGraphMode.FULL,
                             "inductor_compile_config": {"max_autotune": False}}}  # fmt: skip
    piecewise = config_from_options(mapping).piecewise
    assert piecewise is not None
    assert piecewise.cudagraph_mode is ir_piecewise.CUDAGraphMode.FULL
    assert piecewise.inductor_compile_config == {"max_autotune": False}


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ("fast", r"got 'fast'; expected an ir_stack.Config or a mapping"),
        ({"pieces": {}}, r"options: unknown sections \['pieces'\]"),
        ({"piecewise": {"backend": "tvm"}}, r"piecewise.backend: unknown piece compiler 'tvm'"),
        ({"piecewise": {"inductor_compile_config": 3}}, r"expected a table of names to values"),
        ({"priority": {"rms_norm": ["nope"]}}, r"unknown provider 'nope'"),
    ],
)
def test_bad_options_are_named(options: object, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        config_from_options(options)


SCRIPT = """
import sys
import torch
from ir_spec import ops

@torch.library.custom_op("demo::mix", mutates_args=())
def mix(x: torch.Tensor) -> torch.Tensor:
    return x.flip(0).cumsum(0)

@mix.register_fake
def _(x):
    return torch.empty_like(x)

def model(x, w):
    h = ops.rms_norm(x, w, 1e-6)
    h = torch.ops.demo.mix(h)
    return ops.silu_and_mul(torch.cat([h, h * 2], dim=-1))

loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("ir_stack", "ir_piecewise"))
assert not loaded, loaded
w = torch.randn(32)
compiled = torch.compile(model, backend="ir_stack", dynamic=True, options={OPTIONS})
for n in (5, 12, 3):
    x = torch.randn(n, 32)
    torch.testing.assert_close(compiled(x, w), model(x, w))
from ir_piecewise import counters
print("pieces", counters.num_piecewise_graphs_seen, "ranges", sorted(counters.fusions_enabled))
"""


@pytest.mark.skipif(not BY_NAME, reason="ir-stack is not installed with its entry points")
@pytest.mark.parametrize("source", ["options", "IR_STACK_CONFIG"])
def test_backend_by_name_in_a_fresh_process(tmp_path: Path, source: str) -> None:
    table = {"splitting_ops": ["demo::mix"], "compile_ranges_endpoints": [8]}
    table["cache_dir"] = str(tmp_path / "cache")  # type: ignore[assignment]
    env = {**os.environ, "IR_PLATFORM": "cpu"}
    if source == "options":
        options = repr({"piecewise": table})[1:-1]
    else:
        options = ""
        path = tmp_path / "ir-stack.toml"
        lines = [f"{k} = {v!r}".replace("'", '"') for k, v in table.items()]
        path.write_text("[piecewise]\n" + "\n".join(lines) + "\n")
        env["IR_STACK_CONFIG"] = str(path)
    script = textwrap.dedent(SCRIPT).replace(
        "{OPTIONS}", "{" + options + "}" if options else "None"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # the configured endpoint 8 and the rotary fusions' threshold 256 end the ranges
    assert "pieces 3 ranges ['range-1-8', 'range-257-inf', 'range-9-256']" in result.stdout
