"""`convert_hf_model` on randomly initialised transformers Llama and Qwen2 models (no
downloads): outputs equal before and after, the IR ops really run, generation with a KV cache
and `ir_stack.compile` agree."""

from typing import Any

import pytest
import torch

import ir_dispatch
import ir_stack
from ir_stack.models.hf import IRGatedMLP, IRRMSNorm, IRRotaryCache, convert_hf_model

transformers = pytest.importorskip("transformers")

SIZES = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}


def build(family: str, **overrides: Any) -> Any:
    torch.manual_seed(0)
    if family == "llama":
        config = transformers.LlamaConfig(**SIZES, **overrides)
        return transformers.LlamaForCausalLM(config).eval()
    config = transformers.Qwen2Config(**SIZES, **overrides)
    return transformers.Qwen2ForCausalLM(config).eval()


def prompt() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, SIZES["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(2))
    return ids, torch.ones_like(ids)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_converted_model_gives_the_same_logits_and_tokens(family: str) -> None:
    model = build(family)
    ids, mask = prompt()
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits
        tokens = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        report = convert_hf_model(model)
        ir_dispatch.reset_stats()
        ir_dispatch.collect_stats(True)
        converted = model(ids, attention_mask=mask).logits
        ir_dispatch.collect_stats(False)
        converted_tokens = model.generate(
            ids, attention_mask=mask, max_new_tokens=6, do_sample=False
        )
    layers = SIZES["num_hidden_layers"]
    assert len(report.norms) == 2 * layers + 1
    assert len(report.mlps) == len(report.attentions) == layers
    assert report.skipped == {}
    assert isinstance(model.model.norm, IRRMSNorm)
    assert isinstance(model.model.layers[0].mlp, IRGatedMLP)
    assert isinstance(model.model.rotary_emb, IRRotaryCache)
    calls = {op: n for (op, _), n in ir_dispatch.stats().items()}
    assert calls == {"rms_norm": 2 * layers + 1, "silu_and_mul": layers, "rotary_embedding": layers}
    torch.testing.assert_close(converted, logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(converted_tokens, tokens)


def test_converted_model_compiles_with_ir_stack() -> None:
    model = build("llama")
    ids, mask = prompt()
    convert_hf_model(model)
    with torch.no_grad():
        eager = model(ids, attention_mask=mask).logits
        compiled = ir_stack.compile(model)(ids, attention_mask=mask).logits
    torch.testing.assert_close(compiled, eager, atol=1e-4, rtol=1e-4)


def test_parts_that_cannot_be_converted_exactly_are_left_alone() -> None:
    model = build("llama", hidden_act="gelu", rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    report = convert_hf_model(model)
    assert "activation 'gelu'" in report.skipped["model.layers.0.mlp"]
    assert "rope type 'dynamic'" in report.skipped["model.rotary_emb"]
    assert report.mlps == report.attentions == []
    assert len(report.norms) == 5


def test_other_model_types_are_refused() -> None:
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)
    with pytest.raises(ValueError, match="type 'gpt2'; expected a transformers model of type"):
        convert_hf_model(transformers.GPT2LMHeadModel(config))
