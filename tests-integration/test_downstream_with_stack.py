"""The downstream library (``tests-integration/downstream_model``, on ir-spec alone) beside the
whole stack: without a line of its code changing, its eager calls run the kernels selected for
them and ``torch.compile(model, backend="ir_stack")`` fuses its residual adds into the norms
and lowers them to those kernels."""

from collections.abc import Iterator

import pytest
import torch

import ir_dispatch
import ir_passes
from ir_downstream_example import TinyLM

KERNELS = {"rms_norm": ["triton"], "fused_add_rms_norm": ["triton"], "silu_and_mul": ["triton"]}


@pytest.fixture(autouse=True)
def clean_priority() -> Iterator[None]:
    ir_dispatch.set_priority()
    torch._dynamo.reset()
    yield
    ir_dispatch.set_priority()
    ir_dispatch.collect_stats(False)
    torch._dynamo.reset()


def test_eager_calls_run_the_selected_kernels() -> None:
    model = TinyLM(seed=6).eval()
    ids = torch.randint(0, model.config.vocab_size, (10,))
    with torch.no_grad():
        native = model(ids)
        ir_dispatch.collect_stats()
        with ir_dispatch.priority(KERNELS):
            kernels = model(ids)
        used = ir_dispatch.stats()
    torch.testing.assert_close(kernels, native, atol=1e-4, rtol=1e-4)
    assert {op for (op, provider) in used if provider == "triton"} == set(KERNELS)


def test_the_ir_stack_backend_fuses_and_lowers_the_library() -> None:
    model = TinyLM(seed=7).eval()
    ids = torch.randint(0, model.config.vocab_size, (12,))
    options = {"priority": KERNELS, "passes": {"level": 1}}
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False):
        expected = model(ids)
        with ir_passes.collect_reports() as reports:
            got = torch.compile(model, backend="ir_stack", options=options)(ids)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    fused = sum(report.fusions[ir_passes.RESIDUAL_ADD_PATTERN] for report in reports)
    # the adds of a layer's scaled output to the residual stream: into the next layer's norm,
    # and into the final norm (the first layer's add of zeros is folded away by Inductor)
    assert fused == model.config.layers
    chosen = {
        provider
        for report in reports
        for provider in report.selected_impls.get("fused_add_rms_norm", {}).values()
    }
    assert chosen == {"triton"}
