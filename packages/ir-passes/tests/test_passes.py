"""Each pass on small FX graphs."""

from typing import Any

import pytest
import torch
from torch import Tensor, fx
from torch.fx.experimental.proxy_tensor import make_fx

import ir_dispatch
import ir_passes
from ir_passes import (
    CloneEliminationPass,
    FusionPass,
    InplaceFunctionalizationPass,
    LoweringPass,
    PassReport,
)
from ir_passes.lowering import INSERTED_CLONE
from ir_spec import ops

FADD = ops.fused_add_rms_norm.torch_op


def trace(fn: Any, *inputs: Tensor) -> fx.GraphModule:
    """A functional graph with IR op nodes (the IR ops record themselves under make_fx)."""
    return make_fx(fn, tracing_mode="fake")(*inputs)


def targets(graph: fx.Graph) -> list[str]:
    return [str(n.target) for n in graph.nodes if n.op == "call_function"]


def dynamo_graph(fn: Any, *inputs: Tensor) -> fx.Graph:
    graphs: list[fx.GraphModule] = []

    def backend(gm: fx.GraphModule, example: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    torch.compile(fn, backend=backend, fullgraph=True)(*inputs)
    return graphs[0].graph


def inputs(n: int = 3, hidden: int = 16) -> list[Tensor]:
    """x and residual of shape [4, hidden], then a weight of shape [hidden]."""
    return [torch.randn(4, hidden), torch.randn(4, hidden), torch.randn(hidden)][:n]


# ------------------------------------------------------------------ functionalization
def test_functionalization_turns_maybe_inplace_into_default() -> None:
    def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
        a, b = ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
        return ops.fused_add_rms_norm.maybe_inplace(a * 2, b, w, 1e-6)

    graph = dynamo_graph(f, *inputs())
    report = PassReport()
    InplaceFunctionalizationPass(report)(graph)
    assert targets(graph).count("ir.fused_add_rms_norm.default") == 2
    assert "ir.fused_add_rms_norm.maybe_inplace" not in targets(graph)
    assert report.functionalized == 2
    assert report.donated_inputs == {0, 1}  # x and r (w is not an activation)


def test_reuse_of_donated_input_names_op_argument_and_line() -> None:
    def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
        a, _b = ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
        return a + r  # r was donated

    graph = dynamo_graph(f, *inputs())
    with pytest.raises(
        ValueError,
        match=r"fused_add_rms_norm.maybe_inplace: argument "
        r"'x_residual'.*used again.*return a \+ r",
    ):
        InplaceFunctionalizationPass(PassReport())(graph)


def test_reuse_by_a_later_op_call_names_the_callers_line() -> None:
    def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
        a, _b = ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
        return a + ops.rms_norm(r, w, 1e-6)  # r was donated; an op call reads it

    graph = dynamo_graph(f, *inputs())
    with pytest.raises(ValueError, match=r"'x_residual'.*used again") as caught:
        InplaceFunctionalizationPass(PassReport())(graph)
    # the program's line, not a frame of the op's own call path
    assert "return a + ops.rms_norm(r, w, 1e-6)" in str(caught.value)
    assert "test_passes.py" in str(caught.value)
    assert "ir_spec" not in str(caught.value)


def test_compile_raises_the_refusal_itself() -> None:
    """Not Dynamo's BackendCompilerFailed around it: ``except ValueError`` catches it, as it
    catches eager refusals."""

    def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
        a, _b = ops.fused_add_rms_norm.maybe_inplace(x, r, w, 1e-6)
        return a + r

    with pytest.raises(ValueError, match=r"'x_residual'.*used again") as caught:
        ir_passes.compile(f)(*inputs())
    assert isinstance(caught.value.__cause__, torch._dynamo.exc.BackendCompilerFailed)
    torch._dynamo.reset()


# ----------------------------------------------------------------------------- lowering
def test_lowering_native_leaves_aten_ops_only() -> None:
    gm = trace(lambda x, r, w: ops.fused_add_rms_norm(x, r, w, 1e-6), *inputs())
    report = PassReport()
    LoweringPass(report)(gm.graph)
    assert not [t for t in targets(gm.graph) if t.startswith("ir.")]
    assert list(report.selected_impls["fused_add_rms_norm"].values()) == ["native"]
    gm.recompile()
    x, r, w = inputs()
    torch.testing.assert_close(gm(x, r, w), ops.fused_add_rms_norm.native(x, r, w, 1e-6))


def test_lowering_inplace_impl_gets_clones(inplace: None) -> None:
    gm = trace(lambda x, r, w: ops.fused_add_rms_norm(x, r, w, 1e-6), *inputs())
    report = PassReport()
    LoweringPass(report)(gm.graph)
    clones = [n for n in gm.graph.nodes if n.meta.get(INSERTED_CLONE)]
    assert len(clones) == 2
    assert report.clones_inserted == 2
    assert "ir_passes_test.fadd_inplace.default" in targets(gm.graph)
    assert report.selected_impls["fused_add_rms_norm"] == {"fused_add_rms_norm": "t_inplace"}
    gm.recompile()
    x, r, w = inputs()
    before = (x.clone(), r.clone())
    out = gm(x, r, w)
    assert torch.equal(x, before[0])  # the graph stays functional: inputs untouched
    assert torch.equal(r, before[1])
    torch.testing.assert_close(out, ops.fused_add_rms_norm.native(*before, w, 1e-6))


def test_lowering_selects_with_fake_tensors_in_inductor_mode() -> None:
    ir_dispatch.set_priority(fused_add_rms_norm=["t_outofplace"])
    gm = trace(lambda x, r, w: ops.fused_add_rms_norm(x, r, w, 1e-6), *inputs())
    report = PassReport()
    LoweringPass(report)(gm.graph)
    assert "ir_passes_test.fadd.default" in targets(gm.graph)


# --------------------------------------------------------------------- clone elimination
def lowered(fn: Any, n_inputs: int = 3, donated: set[int] | None = None) -> tuple[Any, PassReport]:
    gm = trace(fn, *inputs(n_inputs))
    report = PassReport(donated_inputs=set(donated or ()))
    LoweringPass(report)(gm.graph)
    CloneEliminationPass(report)(gm.graph)
    return gm, report


def remaining_clones(gm: fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.meta.get(INSERTED_CLONE))


@pytest.mark.usefixtures("inplace")
class TestCloneElimination:
    def test_intermediates_not_used_again_lose_their_clones(self) -> None:
        gm, report = lowered(lambda x, r, w: FADD.default(x * 2, r * 3, w, 1e-6))
        assert (report.clones_inserted, report.clones_removed) == (2, 2)
        assert remaining_clones(gm) == 0

    def test_original_read_after_the_write_keeps_its_clone(self) -> None:
        def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
            a = x * 2
            out, _res = FADD.default(a, r * 3, w, 1e-6)
            return out + a  # a is read after the in-place write

        gm, report = lowered(f)
        assert report.clones_removed == 1  # only the residual's
        assert remaining_clones(gm) == 1

    def test_view_of_original_read_after_the_write_keeps_its_clone(self) -> None:
        def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
            a = x * 2
            view = a[:, :8]
            out, _res = FADD.default(a, r * 3, w, 1e-6)
            return out, view + 1  # a view of a, read after the write

        gm, _ = lowered(f)
        assert remaining_clones(gm) == 1

    def test_base_read_after_write_to_a_view_keeps_its_clone(self) -> None:
        def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
            base = x * 2
            rows = base[:2]
            out, _res = FADD.default(rows, r[:2] * 3, w, 1e-6)
            return out, base.sum()  # the base of the written view

        gm, _ = lowered(f)
        assert remaining_clones(gm) == 1

    def test_view_read_before_the_write_does_not_block(self) -> None:
        def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
            a = x * 2
            total = a[:, :8].sum()
            out, _res = FADD.default(a, r * 3, w, 1e-6)
            return out * total

        gm, _ = lowered(f)
        assert remaining_clones(gm) == 0

    def test_graph_output_keeps_its_clone(self) -> None:
        def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
            a = x * 2
            out, res = FADD.default(a, r * 3, w, 1e-6)
            return out, res, a

        gm, _ = lowered(f)
        assert remaining_clones(gm) == 1

    def test_graph_inputs_only_when_donated(self) -> None:
        def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
            return FADD.default(x, r, w, 1e-6)

        gm, _ = lowered(f)
        assert remaining_clones(gm) == 2  # not donated: the caller still owns x and r
        gm, _ = lowered(f, donated={0, 1})
        assert remaining_clones(gm) == 0
        gm, _ = lowered(f, donated={0})
        assert remaining_clones(gm) == 1

    def test_a_strided_input_keeps_its_contiguous_clone(self) -> None:
        """Lowering clones contiguously: without the clone of a padded-row input the kernel's
        results would have the input's strides, not the ones the graph after it records."""

        def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
            return FADD.default(x, r, w, 1e-6)

        _, r, w = inputs()
        padded = torch.randn(4, 19)[:, :16]
        gm = trace(f, padded, r, w)
        report = PassReport(donated_inputs={0, 1})
        LoweringPass(report)(gm.graph)
        CloneEliminationPass(report)(gm.graph)
        assert (report.clones_inserted, report.clones_removed) == (2, 1)
        x_node = next(n for n in gm.graph.nodes if n.op == "placeholder")
        kept = [n.args[0] for n in gm.graph.nodes if n.meta.get(INSERTED_CLONE)]
        assert kept == [x_node]

    def test_results_still_correct_after_elimination(self) -> None:
        def f(x: Tensor, r: Tensor, w: Tensor) -> Any:
            a = x * 2
            out, res = FADD.default(a, r * 3, w, 1e-6)
            out2, res2 = FADD.default(out, res, w, 1e-6)
            return out2, res2

        gm, _ = lowered(f)
        assert remaining_clones(gm) == 0
        gm.recompile()
        x, r, w = inputs()
        expected = ops.fused_add_rms_norm.native(
            *ops.fused_add_rms_norm.native(x * 2, r * 3, w, 1e-6), w, 1e-6
        )
        torch.testing.assert_close(gm(x, r, w), expected)


# ------------------------------------------------------------------------------- fusion
def quant_graph() -> fx.GraphModule:
    def f(x: Tensor, w: Tensor, scale: Tensor) -> Any:
        return ops.static_quant_fp8(ops.rms_norm(x, w, 1e-6), scale)

    return trace(f, torch.randn(4, 16), torch.randn(16), torch.ones(1))


def test_fusion_skipped_when_composite_would_run_natively() -> None:
    gm = quant_graph()
    report = PassReport()
    FusionPass(report)(gm.graph)
    assert report.fusions == {}
    assert "ir.rms_norm.default" in targets(gm.graph)


def test_fusion_applies_for_a_real_kernel_or_when_forced() -> None:
    ir_dispatch.set_priority(rms_norm_static_quant_fp8=["t_fused"])
    gm = quant_graph()
    report = PassReport()
    FusionPass(report)(gm.graph)
    assert report.fusions == {"rms_norm+static_quant_fp8": 1}
    assert targets(gm.graph) == ["ir.rms_norm_static_quant_fp8.default"]
    ir_dispatch.set_priority()
    gm = quant_graph()
    FusionPass(report, force=True)(gm.graph)
    assert report.fusions["rms_norm+static_quant_fp8"] == 2


def assert_one_fused_add_quant_like(gm: fx.GraphModule, f: Any) -> None:
    """`gm` calls one IR op, the fused add + norm + quant composite, and gives `f`'s bits."""
    assert [t for t in targets(gm.graph) if t.startswith("ir.")] == [
        "ir.fused_add_rms_norm_static_quant_fp8.default"
    ]
    gm.recompile()
    args = (torch.randn(4, 16), torch.randn(4, 16), torch.randn(16), torch.tensor([0.01]))
    got, expect = gm(*args), f(*args)
    assert torch.equal(got[0].view(torch.uint8), expect[0].view(torch.uint8))
    assert torch.equal(got[1], expect[1])


def test_fusion_of_fused_add_keeps_the_residual() -> None:
    def f(x: Tensor, r: Tensor, w: Tensor, scale: Tensor) -> Any:
        out, residual = ops.fused_add_rms_norm(x, r, w, 1e-6)
        return ops.static_quant_fp8(out, scale), residual * 2

    gm = trace(f, torch.randn(4, 16), torch.randn(4, 16), torch.randn(16), torch.ones(1))
    report = PassReport()
    FusionPass(report, force=True)(gm.graph)
    assert report.fusions == {"fused_add_rms_norm+static_quant_fp8": 1}
    assert_one_fused_add_quant_like(gm, f)


def test_no_fusion_when_the_unquantized_result_is_used_elsewhere() -> None:
    def f(x: Tensor, w: Tensor, scale: Tensor) -> Any:
        y = ops.rms_norm(x, w, 1e-6)
        return ops.static_quant_fp8(y, scale), y

    gm = trace(f, torch.randn(4, 16), torch.randn(16), torch.ones(1))
    report = PassReport()
    FusionPass(report, force=True)(gm.graph)
    assert report.fusions == {}


# ------------------------------------------------------------------ residual add + norm
def decoder_step(x: Tensor, r: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
    """Two residual adds each followed by a norm, as a decoder layer written without the
    fused op has them; the sums are also read afterwards."""
    hidden = x + r
    out = ops.rms_norm(hidden, w, 1e-6) * 3
    hidden = hidden + out
    return ops.rms_norm(hidden, w, 1e-6), hidden


def test_residual_add_then_norm_becomes_fused_add_where_worth_it() -> None:
    gm = trace(decoder_step, *inputs())
    report = PassReport()
    FusionPass(report)(gm.graph)  # native everywhere: Inductor fuses the pair itself
    assert report.fusions == {}
    ir_dispatch.set_priority(fused_add_rms_norm=["t_outofplace"])
    FusionPass(report)(gm.graph)
    assert report.fusions == {"add+rms_norm": 2}
    ir_targets = [t for t in targets(gm.graph) if t.startswith("ir.")]
    assert ir_targets == ["ir.fused_add_rms_norm.default"] * 2
    assert "aten.add.Tensor" not in targets(gm.graph)
    gm.recompile()
    for dtype in (torch.float32, torch.bfloat16):
        args = [t.to(dtype) for t in inputs(hidden=67)]
        got, expected = gm(*args), decoder_step(*args)
        for g, e in zip(got, expected, strict=True):
            assert torch.equal(g, e)  # the residual rounded once, then normalized: same bits


def add_with_alpha(x: Tensor, r: Tensor, w: Tensor) -> Tensor:
    return ops.rms_norm(torch.add(x, r, alpha=2), w, 1e-6)


def add_broadcast(x: Tensor, r: Tensor, w: Tensor) -> Tensor:
    return ops.rms_norm(x + r[0], w, 1e-6)


def add_promoting(x: Tensor, r: Tensor, w: Tensor) -> Tensor:
    return ops.rms_norm(x.half() + r, w, 1e-6)


def add_transposed(x: Tensor, r: Tensor, w: Tensor) -> Tensor:
    return ops.rms_norm(x.t() + r.t(), w[:4], 1e-6)


def add_to_itself(x: Tensor, r: Tensor, w: Tensor) -> Tensor:
    return ops.rms_norm(x + x, w, 1e-6)


def add_before_weight(x: Tensor, r: Tensor, w: Tensor) -> Tensor:
    hidden = x + r
    return ops.rms_norm(hidden, w * 2, 1e-6)


@pytest.mark.parametrize(
    "fn",
    [add_with_alpha, add_broadcast, add_promoting, add_transposed, add_to_itself],
    ids=lambda fn: fn.__name__,
)
def test_adds_fused_add_cannot_reproduce_are_left_alone(fn: Any) -> None:
    gm = trace(fn, *inputs())
    report = PassReport()
    FusionPass(report, force=True)(gm.graph)
    assert report.fusions == {}
    assert "ir.rms_norm.default" in targets(gm.graph)


def test_weight_computed_after_the_add_is_left_alone() -> None:
    gm = trace(add_before_weight, *inputs())
    order = targets(gm.graph)
    assert order.index("aten.add.Tensor") < order.index("aten.mul.Tensor")
    report = PassReport()
    FusionPass(report, force=True)(gm.graph)
    assert report.fusions == {}


def test_residual_add_norm_and_quant_become_one_op() -> None:
    def f(x: Tensor, r: Tensor, w: Tensor, scale: Tensor) -> Any:
        hidden = x + r
        return ops.static_quant_fp8(ops.rms_norm(hidden, w, 1e-6), scale), hidden * 2

    gm = trace(f, torch.randn(4, 16), torch.randn(4, 16), torch.randn(16), torch.ones(1))
    report = PassReport()
    FusionPass(report, force=True)(gm.graph)
    assert report.fusions == {"add+rms_norm": 1, "fused_add_rms_norm+static_quant_fp8": 1}
    assert_one_fused_add_quant_like(gm, f)


def residual_norm_quant(x: Tensor, r: Tensor, w: Tensor, scale: Tensor) -> Any:
    hidden = x + r
    return ops.static_quant_fp8(ops.rms_norm(hidden, w, 1e-6), scale), hidden


def test_add_fuses_where_only_the_quant_composite_has_a_kernel() -> None:
    """Compiled, fused_add_rms_norm runs natively by default on CUDA while the quant composites
    have kernels: the add must still fuse where the chain then becomes one composite kernel."""
    example = (torch.randn(4, 16), torch.randn(4, 16), torch.randn(16), torch.ones(1))
    gm = trace(residual_norm_quant, *example)
    report = PassReport()
    FusionPass(report)(gm.graph)
    assert report.fusions == {}
    ir_dispatch.set_priority(fused_add_rms_norm_static_quant_fp8=["t_fused"])
    FusionPass(report)(gm.graph)
    assert report.fusions == {"add+rms_norm": 1, "fused_add_rms_norm+static_quant_fp8": 1}
    assert_one_fused_add_quant_like(gm, residual_norm_quant)


def test_add_stays_where_the_unquantized_norm_is_read_too() -> None:
    def f(x: Tensor, r: Tensor, w: Tensor, scale: Tensor) -> Any:
        y = ops.rms_norm(x + r, w, 1e-6)
        return ops.static_quant_fp8(y, scale), y

    gm = trace(f, torch.randn(4, 16), torch.randn(4, 16), torch.randn(16), torch.ones(1))
    ir_dispatch.set_priority(fused_add_rms_norm_static_quant_fp8=["t_fused"])
    report = PassReport()
    FusionPass(report)(gm.graph)
    assert report.fusions == {}
