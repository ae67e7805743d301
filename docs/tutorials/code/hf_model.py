"""Tutorial: run a transformers Llama on IR ops, generate with it, compile it and save it."""

import tempfile

import torch
import transformers

import ir_passes
import ir_stack
from ir_stack.hf import convert_hf_model

# A small Llama with random weights (no download); a checkpoint loads the same way with
# `from_pretrained`. The other families `convert_hf_model` takes convert alike.
sizes = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2}
heads = {"num_attention_heads": 4, "num_key_value_heads": 2}
torch.manual_seed(0)
llama = transformers.LlamaConfig(vocab_size=128, max_position_embeddings=64, **sizes, **heads)
model = transformers.LlamaForCausalLM(llama).eval()
ids = torch.randint(0, 128, (2, 9))
mask = torch.ones_like(ids)  # two prompts, no padding

with torch.no_grad():
    before = model(ids).logits
    tokens_before = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False)
    # in place: the RMSNorms, the SiLU gated MLPs and the rotary embeddings now call IR ops
    report = convert_hf_model(model)
    print(report)
    assert not report.skipped  # what could not be converted exactly is listed, with why
    after = model(ids).logits
    tokens_after = model.generate(ids, attention_mask=mask, max_new_tokens=4, do_sample=False)
torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-5)
assert torch.equal(tokens_after, tokens_before)  # the KV cache works as before

# Compiled, each residual add and the norm after it become one fused_add_rms_norm where that
# runs on a kernel. On a CPU every op runs natively, and Inductor fuses native code by itself,
# so the pass would leave them; `force_fusion` shows it at work.
config = ir_stack.Config(passes=ir_passes.PassConfig(force_fusion=True))
with torch.no_grad():
    compiled = ir_stack.compile(model, config)(ids).logits
torch.testing.assert_close(compiled, after, atol=1e-4, rtol=1e-4)
passes = ir_passes.last_report()
assert passes is not None
print(passes.fusions)
if passes.passes_ran:  # False on a warm start: Inductor's caches served the compiled code
    assert passes.fusions["add+rms_norm"] == 2 * sizes["num_hidden_layers"]

# The converted model keeps the original's state dict (the joined MLP shows its gate and up
# layers), so it saves a checkpoint that the original class loads, with the same logits.
with tempfile.TemporaryDirectory() as checkpoint:
    model.save_pretrained(checkpoint)
    reloaded = transformers.LlamaForCausalLM.from_pretrained(checkpoint).eval()
with torch.no_grad():
    torch.testing.assert_close(reloaded(ids).logits, before, atol=1e-6, rtol=1e-6)
