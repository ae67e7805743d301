"""The transformers models of the ``hf`` suite: each family at the shape of a released
checkpoint (random weights, bf16, the vocabulary cut to keep the logits small beside the
layers), and their conversion to IR ops (`convert`).

Families whose parts stay as transformers wrote them (GPT-OSS's experts, which clamp their
gate; Gemma 3n's sparse-activation MLPs; GLM-4.7 Flash's latent attention) are converted
otherwise, and `convert` checks that nothing else stayed.
"""

from __future__ import annotations

from typing import Any

import torch

from ir_stack.hf import convert_hf_model

#: Llama 3.2 1B's shape; vocabulary cut to keep the logits small beside the layers
LLAMA_1B = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
}
#: Gemma 3 1B's shape (five sliding-window layers to one global, ropes of base 10^4 and 10^6);
#: vocabulary cut as for Llama
GEMMA3_1B = {
    "hidden_size": 1152,
    "intermediate_size": 6912,
    "num_hidden_layers": 26,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "sliding_window": 512,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
    },
}
#: Phi-3 mini (4k)'s shape: one qkv and one gate-up projection; vocabulary cut as for Llama
PHI3_MINI = {
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "pad_token_id": 0,
    "eos_token_id": 1,
}
#: Qwen2.5-VL 3B's language model (its rope of three positions a token, computed at each call
#: by the converted model too); vocabulary cut as for Llama. The vision tower, which a text
#: prompt does not run, is one block
QWEN2_5_VL_3B = {
    "hidden_size": 2048,
    "intermediate_size": 11008,
    "num_hidden_layers": 36,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    "tie_word_embeddings": True,
}
#: Qwen3 30B-A3B's shape: 128 routed experts of width 768, 8 a token (transformers' grouped
#: matrix products); vocabulary cut as for Llama
QWEN3_30B_A3B = {
    "hidden_size": 2048,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rope_theta": 1000000.0,
}
#: Qwen3 4B's shape (32 query and 8 key-value heads of 128, wider than the hidden size / 32;
#: per-head query and key norms before the rotation); vocabulary cut as for Llama
QWEN3_4B = {
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
}
#: Qwen3 1.7B's shape: Qwen3 4B's heads of 128 and norms, 16 query heads over a hidden size
#: of 2048, 28 layers
QWEN3_1_7B = {
    **QWEN3_4B,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
}
#: gpt-oss-20b's shape (sliding-window and full layers in turn, attention sinks; its yarn rope
#: and 128K positions the config's defaults); vocabulary cut as for Llama
GPT_OSS_20B = {
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "sliding_window": 128,
    "vocab_size": 32000,
}
#: Llama 4 Scout's text shape (its 10M-position llama3 rope replaced by a plain one over 8K
#: positions: the kernels' work is the same); vocabulary cut as for Llama
LLAMA4_SCOUT = {
    "hidden_size": 5120,
    "intermediate_size": 8192,
    "intermediate_size_mlp": 16384,
    "num_local_experts": 16,
    "num_experts_per_tok": 1,
    "num_hidden_layers": 48,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
}
#: transformers' default Gemma 4 text config (hidden 2304, 8 heads of 256, 512 in the
#: full-attention layers, per-layer inputs of 256), both vocabularies cut as for Llama
GEMMA4_DEFAULT = {"vocab_size": 32000, "vocab_size_per_layer_input": 32000}
#: LFM2 1.2B's shape: six attention layers among ten short-convolution ones (which stay), MLPs
#: of width 8192 (12288 adjusted by its config); vocabulary cut as for Llama
LFM2_1_2B = {
    "hidden_size": 2048,
    "intermediate_size": 12288,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "full_attn_idxs": [2, 5, 8, 10, 12, 14],
}
#: GLM-4.7 Flash's shape (transformers' default MoE Lite config: latent attention, which stays;
#: a dense first layer, then 64 routed experts of width 1536, 4 a token, and a shared one);
#: vocabulary cut as for Llama
GLM4_7_FLASH = {"vocab_size": 32000, "num_hidden_layers": 47, "max_position_embeddings": 8192}
#: LFM3 1.7B's shape (transformers' default LFM3 config: 11 attention layers, full and sliding
#: in turn, among 13 short convolutions); vocabulary cut as for Llama, its special
#: tokens moved inside it
LFM3_1_7B = {
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "num_hidden_layers": 24,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
#: Gemma 3n E4B's shape (transformers' default Gemma 3n text config: 35 layers, the MLPs of the
#: first ten sparse, the last fifteen reusing earlier keys and values); both vocabularies cut
#: as for Llama
GEMMA3N_E4B = {
    "vocab_size": 32000,
    "vocab_size_per_layer_input": 32000,
    "max_position_embeddings": 8192,
    "num_hidden_layers": 35,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
#: family -> (config class, model class, shape, name in titles)
FAMILIES: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", LLAMA_1B, "Llama, 1B shape"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", GEMMA3_1B, "Gemma 3, 1B shape"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", PHI3_MINI, "Phi-3 mini shape"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", QWEN3_4B, "Qwen3, 4B shape"),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        QWEN3_30B_A3B,
        "Qwen3 MoE, 30B-A3B shape",
    ),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", GPT_OSS_20B, "GPT-OSS, 20B shape"),
    "llama4": ("Llama4TextConfig", "Llama4ForCausalLM", LLAMA4_SCOUT, "Llama 4, Scout shape"),
    "gemma4": (
        "Gemma4TextConfig",
        "Gemma4ForCausalLM",
        GEMMA4_DEFAULT,
        "Gemma 4, default text config",
    ),
    "lfm2": ("Lfm2Config", "Lfm2ForCausalLM", LFM2_1_2B, "LFM2, 1.2B shape"),
    "glm4_moe_lite": (
        "Glm4MoeLiteConfig",
        "Glm4MoeLiteForCausalLM",
        GLM4_7_FLASH,
        "GLM-4.7 Flash shape",
    ),
    "lfm3": ("Lfm3Config", "Lfm3ForCausalLM", LFM3_1_7B, "LFM3, 1.7B shape"),
    "gemma3n": ("Gemma3nTextConfig", "Gemma3nForCausalLM", GEMMA3N_E4B, "Gemma 3n, E4B shape"),
    "qwen2_5_vl": (
        "Qwen2_5_VLConfig",
        "Qwen2_5_VLForConditionalGeneration",
        QWEN2_5_VL_3B,
        "Qwen2.5-VL, 3B shape, text prompts",
    ),
}
#: families whose routed experts stay as they are (GPT-OSS's clamp their gate)
EXPERTS_STAY = {"gpt_oss"}
#: families whose sparse-activation MLPs stay (Gemma 3n's first layers')
SPARSE_MLPS_STAY = {"gemma3n"}
#: families whose latent attention stays, with the model's rotary module
ATTENTION_STAYS = {"glm4_moe_lite"}
#: families whose model is a vision-language one (its text config apart, its language model
#: converted)
VISION_LANGUAGE = {"qwen2_5_vl"}


def default_layers(family: str) -> int:
    """The number of layers of `family`'s checkpoint (its config's default where the shape
    does not say)."""
    import transformers

    config_name, _, shape, _ = FAMILIES[family]
    if "num_hidden_layers" in shape:
        return int(shape["num_hidden_layers"])
    config: Any = getattr(transformers, config_name)()
    return int(config.num_hidden_layers)


def build(family: str, layers: int, *, shape: dict[str, Any] | None = None) -> Any:
    """A `family` model of its checkpoint's shape (or of `shape`) with `layers` layers, random
    weights, bf16, on the GPU; its norms' weights drawn at random too, so that a norm applied
    wrongly shows."""
    import transformers

    torch.manual_seed(0)
    config_name, model_name, default_shape, _ = FAMILIES[family]
    shape = default_shape if shape is None else shape
    options: dict[str, Any] = {**shape, "num_hidden_layers": layers}
    if family == "gemma3":  # every sixth layer global
        options["layer_types"] = [
            "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)
        ]
    if family == "lfm2":  # the attention layers among the first `layers`
        options["full_attn_idxs"] = [i for i in shape["full_attn_idxs"] if i < layers]
    if family == "lfm3":  # the default config's first `layers` layer types
        lfm3: Any = transformers.Lfm3Config()  # transformers types these as optional
        options["layer_types"] = lfm3.layer_types[:layers]
    if family == "gemma3n":  # the default config's first `layers` layers, sharing in proportion
        default: Any = transformers.Gemma3nTextConfig()
        options["layer_types"] = default.layer_types[:layers]
        options["activation_sparsity_pattern"] = default.activation_sparsity_pattern[:layers]
        options["intermediate_size"] = default.intermediate_size[:layers]
        shared = default.num_kv_shared_layers * layers // default.num_hidden_layers
        options["num_kv_shared_layers"] = shared
    if family == "glm4_moe_lite":  # a dense first layer, as the config's default
        options["mlp_layer_types"] = ["dense"] + ["sparse"] * (layers - 1)
    if family == "gpt_oss":
        options["layer_types"] = [
            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)
        ]
    if family in VISION_LANGUAGE:
        vision = {"depth": 1, "out_hidden_size": shape["hidden_size"]}
        config = getattr(transformers, config_name)(text_config=options, vision_config=vision)
    else:
        config = getattr(transformers, config_name)(**options)
    # GPT-OSS's sinks need eager attention (transformers gives it no sdpa)
    config._attn_implementation = "eager" if family == "gpt_oss" else "sdpa"
    with torch.device("cuda"):
        model = getattr(transformers, model_name)(config).to(torch.bfloat16).eval()
    # not ones (Gemma 3's: not zeros, its norms scale by 1 + w), so that a norm applied
    # wrongly would show
    low, high = (-0.5, 0.5) if family == "gemma3" else (0.5, 1.5)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(low, high)
    return model


def convert(family: str, model: Any) -> dict[str, int]:
    """Convert `model` (of `family`) to IR ops in place; the number of norms, MLPs, experts
    and attentions converted. RuntimeError where a part stayed that the family does not
    leave as it is."""
    # a vision-language model converts through its language model
    text_model = model.model.language_model if family in VISION_LANGUAGE else model
    conversion = convert_hf_model(text_model)
    staying = conversion.skipped
    if family in EXPERTS_STAY:  # only its experts may stay
        staying = {p: why for p, why in staying.items() if not p.endswith(".experts")}
    if family in SPARSE_MLPS_STAY:  # only its sparse-activation MLPs may stay
        staying = {p: why for p, why in staying.items() if not p.endswith(".mlp")}
    if family in ATTENTION_STAYS:  # only its rotary module may stay
        staying = {p: why for p, why in staying.items() if not p.endswith("rotary_emb")}
    if staying:
        raise RuntimeError(f"{family}: convert_hf_model left parts unconverted: {staying}")
    return {
        part: len(getattr(conversion, part)) for part in ("norms", "mlps", "experts", "attentions")
    }
