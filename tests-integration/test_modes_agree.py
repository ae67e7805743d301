"""The tiny reference models (Llama-style, and Qwen3-style with per-head query and key norms)
give the same logits in every mode on CPU: eager native, eager with the selected kernels,
``ir_stack.compile`` and ``ir_stack.compile`` piecewise."""

from collections.abc import Callable
from typing import Any

import pytest
import torch

import ir_dispatch
import ir_stack
from ir_piecewise import CompilationConfig
from ir_spec import ops
from ir_stack.models import QWEN3_TINY, TINY, LlamaConfig, LlamaModel


def generate(forward: Callable[..., Any], model: LlamaModel) -> torch.Tensor:
    """Prefill 6 tokens for 2 sequences, then 3 decode steps; all logits."""
    generator = torch.Generator().manual_seed(3)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (2, 6), generator=generator)
    cache = model.new_kv_cache(2)
    logits = [forward(ids, torch.arange(6).repeat(2, 1), cache).clone()]
    for step in range(3):
        nxt = logits[-1].view(2, -1, vocab)[:, -1].argmax(-1, keepdim=True)
        logits.append(forward(nxt, torch.full((2, 1), 6 + step), cache).clone())
    return torch.cat(logits)


@pytest.mark.parametrize("config", [TINY, QWEN3_TINY], ids=["llama", "qwen3"])
def test_eager_native_dispatched_compiled_and_piecewise_agree(
    config: LlamaConfig, tmp_path: Any
) -> None:
    torch._dynamo.reset()  # the same forward, another model: trace it again
    model = LlamaModel(config).eval()
    with torch.no_grad():
        ir_dispatch.set_priority({op.name: ["native"] for op in ops})
        reference = generate(model, model)
        ir_dispatch.set_priority()
        results = {
            "dispatched": generate(model, model),
            "compiled": generate(ir_stack.compile(model), model),
            "piecewise": generate(
                ir_stack.compile(
                    model, ir_stack.Config(piecewise=CompilationConfig(cache_dir=tmp_path))
                ),
                model,
            ),
        }
    for name, logits in results.items():
        torch.testing.assert_close(logits, reference, atol=1e-4, rtol=1e-4, msg=name)
