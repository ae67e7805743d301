"""Piece compilers: the built-in ``inductor`` and ``eager``, one from an ``ir.piece_compilers``
entry point, their identity and version in the compile cache key, Inductor's options and
max-autotune for the compile sizes, and plugins that fail (logged and skipped)."""

import dataclasses
import logging
import sys
import textwrap
from collections.abc import Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import ir_dispatch  # noqa: F401  (installs the dispatcher)
import ir_piecewise
from ir_piecewise import CompilationConfig, counters
from ir_piecewise.backend import global_key
from ir_piecewise.compilers import (
    AUTOTUNE_OPTIONS,
    COMPILERS,
    compiler_loads,
    installed_compilers,
)
from ir_spec import ops

sys.path.insert(0, str(Path(__file__).parent))
from toy_model import ToyModel, toy_config

TOL = {"atol": 2e-5, "rtol": 2e-5}

PLUGIN = """
from ir_piecewise.compilers import PieceCompiler

VERSION = "1.0"
COMPILED = []


class TracedPython(PieceCompiler):
    '''Runs each piece as the Python code FX generates for it, counting what it compiles.'''

    name = "traced_python"

    @property
    def version(self):
        return VERSION

    def compile(self, request):
        COMPILED.append((request.tokens, request.dynamic_shapes))
        return request.graph.forward


def explodes():
    raise RuntimeError("the compiler's toolchain is missing")


class Nameless(PieceCompiler):
    def compile(self, request):
        return request.graph
"""


def _point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group="ir.piece_compilers")


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """Compiler entry points from a module importable as ``traced_python_plugin``."""
    (tmp_path / "traced_python_plugin.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [
        _point("traced_python", "traced_python_plugin:TracedPython"),
        _point("exploding", "traced_python_plugin:explodes"),
        _point("nameless", "traced_python_plugin:Nameless"),
        _point("eager", "traced_python_plugin:TracedPython"),  # the name is taken
    ]
    installed = list(entry_points(group="ir.piece_compilers"))
    monkeypatch.setattr(COMPILERS, "_points", lambda: [*installed, *points])
    COMPILERS.reset()
    import traced_python_plugin

    yield traced_python_plugin
    COMPILERS.reset()


def test_builtin_compilers_are_installed() -> None:
    assert {"eager", "inductor"} <= set(installed_compilers())
    assert COMPILERS.source("inductor") == "built into ir-piecewise"
    assert (
        CompilationConfig()
        .compiler()
        .identity()
        .startswith(f"inductor ir_piecewise.compilers.InductorCompiler torch {torch.__version__}")
    )


def test_an_entry_point_compiler_compiles_the_pieces(plugin: ModuleType, tmp_path: Path) -> None:
    model = ToyModel().eval()
    config = toy_config(tmp_path, backend="traced_python", compile_ranges_endpoints=(8,))
    compiled = ir_piecewise.compile(model, config)
    with torch.no_grad():
        for n in (5, 12, 3):
            x = torch.randn(n, 64)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
    # 3 distinct pieces x 3 ranges (the rotary fusions' threshold 256 ends the second);
    # nothing saved: the compiler cannot
    assert sorted(set(plugin.COMPILED)) == [
        ((1, 8), "from_graph"),
        ((9, 256), "from_graph"),
        ((257, None), "from_graph"),
    ]
    assert counters.num_backend_compilations == 9
    assert "entry point 'traced_python'" in COMPILERS.source("traced_python")


def test_the_compilers_identity_and_version_enter_the_cache_key(
    plugin: ModuleType, tmp_path: Path
) -> None:
    config = toy_config(tmp_path, backend="traced_python")
    before = global_key(config)
    assert global_key(dataclasses.replace(config, backend="eager")) != before
    assert global_key(dataclasses.replace(config, backend="inductor")) != before
    plugin.VERSION = "1.1"
    assert global_key(config) != before


def test_failing_and_refused_compilers_are_logged_and_skipped(
    plugin: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="ir_dispatch"):
        loads = {(load.name, load.value): load for load in compiler_loads()}
    exploding = loads[("exploding", "traced_python_plugin:explodes")]
    assert exploding.status == "failed"
    assert exploding.error == "RuntimeError: the compiler's toolchain is missing"
    assert "its name is ''" in loads[("nameless", "traced_python_plugin:Nameless")].error
    taken = loads[("eager", "traced_python_plugin:TracedPython")]
    assert "supplies piece compiler 'traced_python'" in taken.error
    assert {"exploding", "nameless"}.isdisjoint(installed_compilers())
    assert "exploding" in caplog.text
    with pytest.raises(ValueError, match=r"backend: unknown piece compiler 'exploding'; "
                       r"installed piece compilers: eager, inductor, traced_python"):  # fmt: skip
        CompilationConfig(backend="exploding")


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"max_autotuen": True}, r"unknown Inductor option 'max_autotuen'; did you mean "),
        ({"post_grad_custom_post_pass": None}, r"installs the IR passes and cannot be set"),
        ([("max_autotune", True)], r"inductor_compile_config: got \[\(.*expected a mapping"),
    ],
)
def test_inductor_compile_config_is_checked(options: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        CompilationConfig(inductor_compile_config=options)


def test_inductor_options_and_autotuned_sizes_reach_inductor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The configured options reach every piece; max-autotune only the compile sizes'."""
    real = torch._inductor.standalone_compile
    seen: list[tuple[str, dict[str, Any]]] = []

    def recording(gm: Any, inputs: Any, *, dynamic_shapes: str, options: Any, **kw: Any) -> Any:
        patches = options["config_patches"]
        seen.append((dynamic_shapes, dict(patches)))
        plain = {k: v for k, v in patches.items() if k not in AUTOTUNE_OPTIONS}
        return real(gm, inputs, dynamic_shapes=dynamic_shapes, options={"config_patches": plain})

    monkeypatch.setattr(torch._inductor, "standalone_compile", recording)
    config = toy_config(
        tmp_path,
        cache=False,
        compile_sizes=(4,),
        inductor_compile_config={"epilogue-fusion": False},
        max_autotune_compile_sizes=True,
    )
    assert config.inductor_compile_config == {"epilogue_fusion": False}
    assert config.key() != dataclasses.replace(config, max_autotune_compile_sizes=False).key()
    model = ToyModel(layers=1).eval()
    compiled = ir_piecewise.compile(model, config)
    with torch.no_grad():
        for n in (6, 4):
            x = torch.randn(n, 64)
            torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert seen
    assert all(patches["epilogue_fusion"] is False for _, patches in seen)
    tuned = [shapes for shapes, patches in seen if patches.get("max_autotune")]
    assert tuned
    assert set(tuned) == {"from_example_inputs"}  # the size 4, not the range
    assert any(shapes == "from_graph" for shapes, _ in seen)


def _write_an_expanded_value(
    a: torch.Tensor,
    b: torch.Tensor,
    key: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slots: torch.Tensor,
) -> torch.Tensor:
    out, _ = ops.fused_add_rms_norm(a[..., :16], b, None, 1e-6)
    value = a[..., :1, 0:16].expand(*a.shape[:-1], 16)
    ops.write_kv_cache(key, value, key_cache, value_cache, slots)
    return out


def test_a_piece_that_returns_nothing_compiles_with_its_inputs_symbols() -> None:
    """The piece after the split only writes the caches: Inductor gets the shape environment
    of its inputs (whose token counts it compares), not a new one it fails in."""
    tokens = 11
    gen = torch.Generator().manual_seed(11)
    a, b, key = (torch.randn(tokens, w, generator=gen) for w in (32, 16, 16))
    caches = [torch.randn(2, 16, 1, 16, generator=gen) for _ in range(2)]
    slots = torch.randperm(32, generator=gen)[:tokens]
    expected_caches = [c.clone() for c in caches]
    expected = _write_an_expanded_value(a, b, key, *expected_caches, slots)
    config = CompilationConfig(splitting_ops=("ir::fused_add_rms_norm",), cache=False)
    dims = {"a": 0, "b": 0, "key": 0, "slots": 0}
    compiled = ir_piecewise.compile(_write_an_expanded_value, config, dynamic_arg_dims=dims)
    with torch._inductor.config.patch(fx_graph_cache=False):
        out = compiled(a, b, key, *caches, slots)
    torch.testing.assert_close(out, expected)
    for cache, expected_cache in zip(caches, expected_caches, strict=True):
        torch.testing.assert_close(cache, expected_cache)
