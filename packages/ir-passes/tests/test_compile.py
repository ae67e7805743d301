"""End to end: ir_passes.compile on CPU with in-place and out-of-place test providers."""

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import Tensor

import ir_dispatch
import ir_passes
from ir_spec import ops


@pytest.fixture(autouse=True)
def no_graph_cache() -> Iterator[None]:
    """Compile for real every time, so the passes run and fill the report."""
    with torch._inductor.config.patch(fx_graph_cache=False):
        yield


def residual_chain(x: Tensor, r: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    x, r = x * 1.5, r * 0.5  # intermediates: their buffers may be reused in place
    for _ in range(3):
        x, r = ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
        x = x * 2
    return x, r


def args() -> tuple[Tensor, Tensor, Tensor]:
    return torch.randn(8, 64), torch.randn(8, 64), torch.randn(64)


@pytest.mark.parametrize("provider", ["native", "t_outofplace", "t_inplace", "t_out"])
def test_results_equal_eager_and_inputs_untouched(provider: str) -> None:
    ir_dispatch.set_priority(fused_add_rms_norm=[provider])
    x, r, w = args()
    before = (x.clone(), r.clone(), w.clone())
    compiled = ir_passes.compile(residual_chain)
    out = compiled(x, r, w)
    expected = residual_chain(*before)
    torch.testing.assert_close(out, expected)
    for a, b in zip((x, r, w), before, strict=True):
        assert torch.equal(a, b)  # nothing was donated: the caller's tensors are intact
    report = ir_passes.last_report()
    assert report is not None
    assert report.functionalized == 3
    assert set(report.selected_impls["fused_add_rms_norm"].values()) == {provider}


def test_collect_reports_keeps_every_compilation_of_its_block() -> None:
    """Two compilations in one block give two reports, in order; a nested block gets only its
    own; nothing is collected after the block (where `last_report` keeps only the last)."""

    def norm_then_graph_break(x: Tensor, w: Tensor) -> Tensor:
        y = ops.rms_norm(x, w, 1e-6)
        torch._dynamo.graph_break()  # a second graph: a second compilation
        return ops.silu_and_mul(torch.cat([y, y], dim=-1))

    x, w = torch.randn(8, 64), torch.randn(64)
    with ir_passes.collect_reports() as outer:
        ir_passes.compile(residual_chain)(*args())
        with ir_passes.collect_reports() as inner:
            ir_passes.compile(norm_then_graph_break)(x, w)
    ir_passes.compile(residual_chain)(*args())  # after the block: not collected
    assert [set(r.selected_impls) for r in inner] == [{"rms_norm"}, {"silu_and_mul"}]
    assert [set(r.selected_impls) for r in outer] == [
        {"fused_add_rms_norm"},
        {"rms_norm"},
        {"silu_and_mul"},
    ]
    assert all(r.passes_ran for r in outer)
    assert ir_passes.last_report() not in outer


def test_inplace_chain_leaves_no_clone() -> None:
    ir_dispatch.set_priority(fused_add_rms_norm=["t_inplace"])
    compiled = ir_passes.compile(residual_chain)
    compiled(*args())
    report = ir_passes.last_report()
    assert report is not None
    assert report.clones_inserted == 6
    assert report.clones_removed == 6


def test_donated_graph_inputs_lose_their_clones() -> None:
    def donate(x: Tensor, r: Tensor, w: Tensor) -> Any:
        return ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)

    ir_dispatch.set_priority(fused_add_rms_norm=["t_inplace"])
    x, r, w = args()
    expected = ops.fused_add_rms_norm.native(x, r, w, 1e-6)
    out = ir_passes.compile(donate)(x, r, w)
    torch.testing.assert_close(out, expected)
    report = ir_passes.last_report()
    assert report is not None
    assert report.donated_inputs == {0, 1}
    assert report.clones_removed == report.clones_inserted == 2


def test_fusion_fires_and_matches_unfused() -> None:
    def f(x: Tensor, w: Tensor, scale: Tensor) -> Tensor:
        return ops.static_quant_fp8(ops.rms_norm(x, w, 1e-6), scale)

    x, w, scale = torch.randn(8, 64), torch.randn(64), torch.tensor([0.02])
    ir_dispatch.set_priority(rms_norm_static_quant_fp8=["t_fused"])
    fused = ir_passes.compile(f)(x, w, scale)
    report = ir_passes.last_report()
    assert report is not None
    assert report.fusions == {"rms_norm+static_quant_fp8": 1}
    assert report.selected_impls["rms_norm_static_quant_fp8"] == {
        next(iter(report.selected_impls["rms_norm_static_quant_fp8"])): "t_fused"
    }
    assert torch.equal(fused.view(torch.uint8), f(x, w, scale).view(torch.uint8))


def unfused_decoder(x: Tensor, r: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    """Layers that add the residual with ``+`` and then normalize, as transformers' do."""
    hidden = x * 1.5 + r
    for _ in range(3):
        out = ops.rms_norm(hidden, w, 1e-6) * 2
        hidden = hidden + out
    return ops.rms_norm(hidden, w, 1e-6), hidden


@pytest.mark.parametrize("provider", ["t_outofplace", "t_inplace"])
def test_residual_adds_are_fused_and_match_eager(provider: str) -> None:
    ir_dispatch.set_priority(fused_add_rms_norm=[provider])
    x, r, w = args()
    before = (x.clone(), r.clone(), w.clone())
    out = ir_passes.compile(unfused_decoder)(x, r, w)
    report = ir_passes.last_report()
    assert report is not None
    assert report.fusions == {"add+rms_norm": 4}
    assert set(report.selected_impls["fused_add_rms_norm"].values()) == {provider}
    assert "rms_norm" not in report.selected_impls
    for got, expected in zip(out, unfused_decoder(*before), strict=True):
        assert torch.equal(got, expected)
    for a, b in zip((x, r, w), before, strict=True):
        assert torch.equal(a, b)  # the in-place kernel wrote only the graph's own buffers


def test_add_norm_and_quant_compile_to_the_composite_kernel() -> None:
    def f(x: Tensor, r: Tensor, w: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
        hidden = x + r
        return ops.static_quant_fp8(ops.rms_norm(hidden, w, 1e-6), scale), hidden

    ir_dispatch.set_priority(fused_add_rms_norm_static_quant_fp8=["t_fused"])
    x, r, w = args()
    scale = torch.tensor([0.02])
    q, hidden = ir_passes.compile(f)(x, r, w, scale)
    report = ir_passes.last_report()
    assert report is not None
    assert report.fusions == {"add+rms_norm": 1, "fused_add_rms_norm+static_quant_fp8": 1}
    assert list(report.selected_impls) == ["fused_add_rms_norm_static_quant_fp8"]
    expected_q, expected_hidden = f(x, r, w, scale)
    assert torch.equal(q.view(torch.uint8), expected_q.view(torch.uint8))
    assert torch.equal(hidden, expected_hidden)


def test_priority_change_recompiles_and_nothing_else_does() -> None:
    compiled = ir_passes.compile(residual_chain)
    ir_dispatch.set_priority(fused_add_rms_norm=["t_outofplace"])
    compiled(*args())
    first = ir_passes.last_report()
    compiled(*args())
    assert ir_passes.last_report() is first  # same selection state: no compilation
    ir_dispatch.set_priority(fused_add_rms_norm=["t_inplace"])
    compiled(*args())
    second = ir_passes.last_report()
    assert second is not first
    assert second is not None
    assert set(second.selected_impls["fused_add_rms_norm"].values()) == {"t_inplace"}


def test_selection_key_tracks_priorities_only() -> None:
    config = ir_passes.PassConfig()
    key = ir_passes.selection_key(config)
    assert ir_passes.selection_key(config) == key
    ir_dispatch.set_priority(fused_add_rms_norm=["t_inplace"])
    assert ir_passes.selection_key(config) != key
    ir_dispatch.set_priority()
    assert ir_passes.selection_key(config) == key
    assert ir_passes.selection_key(ir_passes.PassConfig(level=0)) != key


def test_debug_dir_gets_graph_dumps(tmp_path: Any) -> None:
    config = ir_passes.PassConfig(debug_dir=str(tmp_path))
    ir_passes.compile(residual_chain, config=config)(*args())
    names = sorted(p.name for p in tmp_path.iterdir())
    assert any("pre-grad-after-functionalize" in n for n in names)
    assert any("post-grad-after-lowering" in n for n in names)
    lowered = next(p for p in tmp_path.iterdir() if "after-lowering" in p.name).read_text()
    assert "ir.fused_add_rms_norm" not in lowered


def test_inductor_options_for_plain_torch_compile() -> None:
    ir_dispatch.set_priority(fused_add_rms_norm=["t_outofplace"])
    compiled = torch.compile(residual_chain, options=ir_passes.inductor_options())
    x, r, w = args()
    torch.testing.assert_close(compiled(x, r, w), residual_chain(x, r, w))
    report = ir_passes.last_report()
    assert report is not None
    assert report.functionalized == 3


def test_inductor_options_built_twice_compare_equal() -> None:
    """Options of one configuration and selection state are equal (transformers compiles
    again when its ``CompileConfig``, options included, differs from the last one); another
    configuration's, or the same after a change of priorities, are not."""
    first, again = ir_passes.inductor_options(), ir_passes.inductor_options(ir_passes.PassConfig())
    assert first == again
    assert first != ir_passes.inductor_options(ir_passes.PassConfig(level=0))
    ir_dispatch.set_priority(fused_add_rms_norm=["t_inplace"])
    assert ir_passes.inductor_options() != first
    ir_dispatch.set_priority()
    assert ir_passes.inductor_options() == first


def test_native_lowering_of_every_catalog_activation_compiles() -> None:
    """Native implementations are traced with Inductor's decompositions (aten.silu and friends
    must not reach Inductor undecomposed after the post-grad passes)."""

    def f(x: Tensor) -> Tensor:
        return ops.silu_and_mul(x) + ops.gelu_and_mul(x, "tanh") + ops.gelu_and_mul(x)

    x = torch.randn(8, 64)
    torch.testing.assert_close(ir_passes.compile(f)(x), f(x))


def test_graph_cache_hit_reports_that_post_grad_passes_did_not_run(tmp_path: Any) -> None:
    """With only Inductor's FX graph cache on, the pre-grad pass runs on every compilation but
    a cache hit skips the post-grad passes: the report must say they did not run."""
    ir_dispatch.set_priority(fused_add_rms_norm=["t_outofplace"])
    reports = []
    with (
        torch._inductor.config.patch(fx_graph_cache=True, force_disable_caches=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
        torch._inductor.utils.fresh_inductor_cache(dir=str(tmp_path)),
    ):
        for _ in range(2):
            torch._dynamo.reset()
            ir_passes.compile(residual_chain)(*args())
            reports.append(ir_passes.last_report())
    cold, warm = reports
    assert cold is not None
    assert warm is not None
    assert cold.passes_ran
    assert cold.selected_impls
    assert warm.functionalized == 3
    assert not warm.passes_ran
    assert not warm.selected_impls


def test_selection_key_is_computed_once_per_selection_state(monkeypatch: Any) -> None:
    from ir_passes import inductor

    computed: list[int] = []
    real = inductor._compute_selection_key
    monkeypatch.setattr(inductor, "_compute_selection_key", lambda c: computed.append(1) or real(c))
    config = ir_passes.PassConfig(level=0, lower=True)
    inductor._selection_keys.clear()
    first = [ir_passes.selection_key(config) for _ in range(5)]
    assert len(set(first)) == 1
    assert len(computed) == 1  # every call of a compiled function asks; one computation
    with ir_dispatch.priority(fused_add_rms_norm=["t_inplace"]):
        scoped = ir_passes.selection_key(config)
    assert scoped != first[0]  # a scoped priority is part of the state
    assert len(computed) == 2
    assert ir_passes.selection_key(config) == first[0]
    assert len(computed) == 2


@pytest.mark.parametrize("provider", ["native", "t_outofplace", "t_out"])
def test_training_through_a_lowered_provider_has_the_native_gradients(provider: str) -> None:
    """With inputs that require grad the forward graph is lowered as for inference (the
    provider's op spliced in) and the gradients are the native function's."""
    ir_dispatch.set_priority(fused_add_rms_norm=[provider])
    leaves = [t.requires_grad_(True) for t in args()]

    def loss(x: Tensor, r: Tensor, w: Tensor, op: Any = ops.fused_add_rms_norm) -> Tensor:
        out, residual = op(x, r, w, 1e-6)
        total: Tensor = (out * out).sum() + (residual * torch.arange(64.0)).sum()
        return total

    want = torch.autograd.grad(loss(*leaves, op=ops.fused_add_rms_norm.native), leaves)
    got = torch.autograd.grad(ir_passes.compile(loss)(*leaves), leaves)
    torch.testing.assert_close(got, want)
    report = ir_passes.last_report()
    assert report is not None
    assert set(report.selected_impls["fused_add_rms_norm"].values()) == {provider}
