"""The tensor-parallel passes on the tensor-parallel reference model in a world of two gloo
processes: ``fuse_allreduce_rms`` fuses every all-reduce that a norm alone reads, sequence
parallelism rewrites them, and both give the single-device logits and the unfused run's."""

import sys
from pathlib import Path
from typing import Any

import torch

import ir_passes
import ir_stack
from ir_passes import PassConfig
from ir_spec.testing import run_in_world
from ir_stack.models import LlamaModel, ParallelLlamaModel

sys.path.insert(0, str(Path(__file__).parent))
from test_parallel import CONFIG, TOL, generate


def compiled(model: LlamaModel, passes: PassConfig) -> tuple[torch.Tensor, Any]:
    torch._dynamo.reset()
    with (
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        forward = ir_stack.compile(model, ir_stack.Config(passes=passes))
        logits = generate(forward, model, decode=False)
    report = ir_passes.last_report()
    assert report is not None
    return logits, report


def check_passes(rank: int, world: int) -> None:
    single = LlamaModel(CONFIG).eval()
    model = ParallelLlamaModel(CONFIG).eval()
    layers = CONFIG.num_layers
    with torch.no_grad():
        expected = generate(single, single, decode=False)
        unfused, _ = compiled(model, PassConfig(fuse_allreduce_rms=False))
        torch.testing.assert_close(unfused, expected, **TOL)

        # after o_proj and after down, each read by fused_add_rms_norm alone: two a layer;
        # the embedding's sum is also the first residual, so it stays apart
        got, report = compiled(model, PassConfig(force_fusion=True))
        torch.testing.assert_close(got, expected, **TOL)
        torch.testing.assert_close(got, unfused, **TOL)
        assert report.fusions["all_reduce+fused_add_rms_norm"] == 2 * layers
        assert len(report.selected_impls["all_reduce"]) == 1
        assert any("read beside the norm" in s for s in report.skipped), report.skipped

        # 12 tokens (2 sequences of 6) split between the ranks
        sp = PassConfig(force_fusion=True, enable_sp=True, sp_min_token_num=8)
        got, report = compiled(model, sp)
        torch.testing.assert_close(got, expected, **TOL)
        assert report.fusions["sp:all_reduce+fused_add_rms_norm"] == 2 * layers
        assert len(report.selected_impls["reduce_scatter"]) == 2 * layers
        assert not report.fusions["all_reduce+fused_add_rms_norm"]


def test_two_ranks_fuse_and_split_the_all_reduces() -> None:
    run_in_world(check_passes, 2)


def test_sp_min_token_num_counts_the_sequences_that_reach_it() -> None:
    """Per sequence length, the lower bound of sequence parallelism becomes the sequences
    whose tokens reach it (rounded up), where the upper thresholds round down."""
    from ir_stack.compiler import passes_per_length

    passes = PassConfig(enable_sp=True, sp_min_token_num=256)
    assert passes_per_length(passes, 1) is passes
    assert passes_per_length(passes, 2048).sp_min_token_num == 1
    assert passes_per_length(passes, 6).sp_min_token_num == 43
    assert passes_per_length(passes, 6).rope_kvcache_max_tokens == 42
