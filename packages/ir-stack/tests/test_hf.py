"""`convert_hf_model` on randomly initialised transformers models of every family it takes (no
downloads): outputs equal before and after, the IR ops really run, generation with a KV cache
and `ir_stack.compile` agree, and the compiled residual adds become fused adds."""

import copy
import dataclasses
import io
import re
import sys
from collections import Counter
from typing import Any

import pytest
import torch
import transformers
from packaging.version import Version

import ir_dispatch
import ir_passes
import ir_stack
from ir_spec import ops
from ir_spec.testing import weighted_sum
from ir_stack import hf
from ir_stack.hf import attention as hf_attention
from ir_stack.hf import convert_hf_model
from ir_stack.hf import mlp as hf_mlp
from ir_stack.hf import rotary as hf_rotary
from ir_stack.hf.attention import QueryScale
from ir_stack.hf.modules import IRGatedMLP, IRJoinedGatedMLP, IRRMSNorm, IRRotaryCache
from ir_stack.hf.rotation_probe import per_token_pairs

SIZES = {
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}


FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "gemma": ("GemmaConfig", "GemmaForCausalLM"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM"),
    "granite": ("GraniteConfig", "GraniteForCausalLM"),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM"),
    "granitemoe": ("GraniteMoeConfig", "GraniteMoeForCausalLM"),
    "granitemoeshared": ("GraniteMoeSharedConfig", "GraniteMoeSharedForCausalLM"),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM"),
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM"),
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM"),
    "ministral": ("MinistralConfig", "MinistralForCausalLM"),
    "olmo3": ("Olmo3Config", "Olmo3ForCausalLM"),
    "glm": ("GlmConfig", "GlmForCausalLM"),
    "glm4": ("Glm4Config", "Glm4ForCausalLM"),
    "ernie4_5": ("Ernie4_5Config", "Ernie4_5ForCausalLM"),
    "ernie4_5_moe": ("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM"),
    "helium": ("HeliumConfig", "HeliumForCausalLM"),
    "seed_oss": ("SeedOssConfig", "SeedOssForCausalLM"),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM"),
    "cohere": ("CohereConfig", "CohereForCausalLM"),
    "cohere2": ("Cohere2Config", "Cohere2ForCausalLM"),
    "cohere2_moe": ("Cohere2MoeConfig", "Cohere2MoeForCausalLM"),
    "exaone4": ("Exaone4Config", "Exaone4ForCausalLM"),
    "exaone_moe": ("ExaoneMoeConfig", "ExaoneMoeForCausalLM"),
    "hunyuan_v1_dense": ("HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM"),
    "hunyuan_v1_moe": ("HunYuanMoEV1Config", "HunYuanMoEV1ForCausalLM"),
    "dots1": ("Dots1Config", "Dots1ForCausalLM"),
    "vaultgemma": ("VaultGemmaConfig", "VaultGemmaForCausalLM"),
    "flex_olmo": ("FlexOlmoConfig", "FlexOlmoForCausalLM"),
    "minimax_m2": ("MiniMaxM2Config", "MiniMaxM2ForCausalLM"),
    "apertus": ("ApertusConfig", "ApertusForCausalLM"),
    "arcee": ("ArceeConfig", "ArceeForCausalLM"),
    "ministral3": ("Ministral3Config", "Ministral3ForCausalLM"),
    "llama4": ("Llama4TextConfig", "Llama4ForCausalLM"),
    # newer families (Apertus 1.5: transformers 5.24, skipped under 5.17)
    "cwm": ("CwmConfig", "CwmForCausalLM"),
    "solar_open": ("SolarOpenConfig", "SolarOpenForCausalLM"),
    "hy_v3": ("HYV3Config", "HYV3ForCausalLM"),
    "mellum": ("MellumConfig", "MellumForCausalLM"),
    "apertus1p5": ("Apertus1p5TextConfig", "Apertus1p5TextForCausalLM"),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM"),
    "gemma4": ("Gemma4TextConfig", "Gemma4ForCausalLM"),
    "gemma4_moe": ("Gemma4TextConfig", "Gemma4ForCausalLM"),
    "gemma4_unified": ("Gemma4UnifiedTextConfig", "Gemma4UnifiedForCausalLM"),
    "emu3": ("Emu3TextConfig", "Emu3ForCausalLM"),
    "mllama": ("MllamaTextConfig", "MllamaForCausalLM"),
    # Phi-4-multimodal: Phi-3's decoder, a vision tower and an audio encoder inside its
    # embeddings
    "phi4_multimodal": ("Phi4MultimodalConfig", "Phi4MultimodalForCausalLM"),
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM"),
    "qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM"),
    "qwen3_5_moe": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM"),
    # latent attention, which stays, as DeepSeek's
    "deepseek_v32": ("DeepseekV32Config", "DeepseekV32ForCausalLM"),
    "glm_moe_dsa": ("GlmMoeDsaConfig", "GlmMoeDsaForCausalLM"),
    "glm4_moe_lite": ("Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM"),
    "mistral4": ("Mistral4Config", "Mistral4ForCausalLM"),
    "minicpm3": ("MiniCPM3Config", "MiniCPM3ForCausalLM"),
    "youtu": ("YoutuConfig", "YoutuForCausalLM"),
    "lfm2": ("Lfm2Config", "Lfm2ForCausalLM"),
    "lfm2_moe": ("Lfm2MoeConfig", "Lfm2MoeForCausalLM"),
    "olmo_hybrid": ("OlmoHybridConfig", "OlmoHybridForCausalLM"),
    "falcon_h1": ("FalconH1Config", "FalconH1ForCausalLM"),
    "afmoe": ("AfmoeConfig", "AfmoeForCausalLM"),
    "jais2": ("Jais2Config", "Jais2ForCausalLM"),
    "granite4": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM"),
    "granite4_h": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM"),
    "mimo_v2_flash": ("MiMoV2FlashConfig", "MiMoV2FlashForCausalLM"),
    "minimax": ("MiniMaxConfig", "MiniMaxForCausalLM"),
    "kimi_linear": ("KimiLinearConfig", "KimiLinearForCausalLM"),
    "bailing_hybrid": ("BailingHybridConfig", "BailingHybridForCausalLM"),
    # transformers 5.24's newer families; the first five run on other families' classes
    "internlm3": ("InternLM3Config", "LlamaForCausalLM"),
    "iquestcoder": ("IQuestCoderConfig", "LlamaForCausalLM"),
    "exaone": ("ExaoneConfig", "LlamaForCausalLM"),
    "sarvam_moe": ("SarvamMoEConfig", "Glm4MoeForCausalLM"),
    "sarvam_mla": ("SarvamMLAConfig", "DeepseekV3ForCausalLM"),
    "hyperclovax": ("HyperCLOVAXConfig", "HyperCLOVAXForCausalLM"),
    "flint": ("FlintConfig", "FlintForCausalLM"),
    "kolibri1": ("Kolibri1Config", "Kolibri1ForCausalLM"),
    "lara_mini": ("LaraMiniConfig", "LaraMiniForCausalLM"),
    "lfm3": ("Lfm3Config", "Lfm3ForCausalLM"),
    "minimax_m3": ("MiniMaxM3VLTextConfig", "MiniMaxM3VLForCausalLM"),
    "axk1": ("AXK1Config", "AXK1ForCausalLM"),
    "axk2": ("AXK2Config", "AXK2ForCausalLM"),
    "dots3_note": ("Dots3NoteTextConfig", "Dots3NoteForCausalLM"),
    "inkling": ("InklingTextConfig", "InklingForCausalLM"),
    "granite_swa": ("GraniteSWAConfig", "GraniteSWAForCausalLM"),
    "granitemoe_swa": ("GraniteMoeSWAConfig", "GraniteMoeSWAForCausalLM"),
    "laguna": ("LagunaConfig", "LagunaForCausalLM"),
    "aria_text": ("AriaTextConfig", "AriaTextForCausalLM"),
    "nemotron": ("NemotronConfig", "NemotronForCausalLM"),
    "phimoe": ("PhimoeConfig", "PhimoeForCausalLM"),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM"),
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM"),
    "olmo": ("OlmoConfig", "OlmoForCausalLM"),
    "bamba": ("BambaConfig", "BambaForCausalLM"),
    "jamba": ("JambaConfig", "JambaForCausalLM"),
    "gemma3n": ("Gemma3nTextConfig", "Gemma3nForCausalLM"),
    "phi": ("PhiConfig", "PhiForCausalLM"),
}
#: the grouped router of GLM-4 MoE and DeepSeek, every layer routed (the first is dense by
#: default)
_GROUPED_ROUTING: dict[str, Any] = {
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "first_k_dense_replace": 0,
    "n_group": 1,
    "topk_group": 1,
}
_DEEPSEEK: dict[str, Any] = {
    **_GROUPED_ROUTING,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
}
#: DeepSeek V3.2's and GLM-5's sparse attention: an indexer of its own heads choosing 4 of the
#: 9 prompt tokens a query, so that its choice shows in the logits
#: (their attention takes as many key-value heads as query heads)
_INDEXER: dict[str, Any] = {
    "index_n_heads": 2,
    "index_head_dim": 16,
    "index_topk": 4,
    "num_key_value_heads": 4,
}
#: every layer routed, in the newer configs' terms (the older ones' is `first_k_dense_replace`)
_SPARSE_LAYERS: dict[str, Any] = {"mlp_layer_types": ["sparse", "sparse"]}
#: special tokens inside the small vocabulary
_TOKENS: dict[str, Any] = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
#: Kimi Linear's and Ling 2.5 hybrid's latent attention (as many key-value heads as query
#: heads) and experts (`num_experts_per_token`), every layer routed
_LINEAR_LATENT: dict[str, Any] = {
    **_TOKENS,
    "num_key_value_heads": 4,
    "mlp_layer_types": ["sparse", "sparse"],
    "num_experts": 4,
    "num_experts_per_token": 2,
    "moe_intermediate_size": 32,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
}
#: a sliding-window layer shorter than the prompt, then a global one
_SLIDING_THEN_FULL: dict[str, Any] = {
    "sliding_window": 4,
    "layer_types": ["sliding_attention", "full_attention"],
}
_QWEN3_NEXT: dict[str, Any] = {
    "head_dim": 16,
    "layer_types": ["linear_attention", "full_attention"],
    "partial_rotary_factor": 0.5,
}
_QWEN_EXPERTS: dict[str, Any] = {
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
}
_QWEN3_5_ROPE: dict[str, Any] = {
    "rope_type": "default",
    "rope_theta": 1e4,
    "partial_rotary_factor": 0.5,
    "mrope_section": [2, 1, 1],
    "mrope_interleaved": True,
}
_GEMMA4: dict[str, Any] = {
    **_SLIDING_THEN_FULL,
    "head_dim": 16,
    "global_head_dim": 32,
    "attention_k_eq_v": True,
    "num_global_key_value_heads": 1,
    "hidden_size_per_layer_input": 0,
}
#: what a family needs beside `SIZES`: Gemma's heads are 256 wide by default; for Gemma 2, a
#: sliding window shorter than the prompt (its local layers differ from its global ones) and
#: attention logits capped at 1 (at the default 50 a forgotten cap would not show)
FAMILY_OPTIONS: dict[str, dict[str, Any]] = {
    "gemma": {"head_dim": 16},
    "gemma2": {
        "head_dim": 16,
        "query_pre_attn_scalar": 16,
        "sliding_window": 4,
        "attn_logit_softcapping": 1.0,
    },
    # a sliding layer and a full one, whose ropes differ in base and scaling (linear, x8)
    "gemma3": {
        "head_dim": 16,
        "query_pre_attn_scalar": 16,
        "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        },
    },
    # one qkv and one gate-up projection; the rope over half of each head (Phi-4 mini rotates
    # three quarters)
    "phi3": {"partial_rotary_factor": 0.5, "pad_token_id": 0, "eos_token_id": 1},
    # Granite scales embeddings, residual branches, attention and logits by its own factors
    "granite": {
        "embedding_multiplier": 2.0,
        "residual_multiplier": 0.5,
        "attention_multiplier": 0.3,
        "logits_scaling": 4.0,
    },
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48,
        "num_experts": 4,
        "num_experts_per_tok": 2,
    },
    "qwen3_moe": {
        "moe_intermediate_size": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "head_dim": 16,
    },
    # OLMoE: query and key norms over the whole projection, as OLMo 2's
    "olmoe": {"num_experts": 4, "num_experts_per_tok": 2, "pad_token_id": 0, "eos_token_id": 1},
    "granitemoe": {"num_local_experts": 4, "num_experts_per_tok": 2, "residual_multiplier": 0.5},
    "granitemoeshared": {
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "shared_intermediate_size": 48,
    },
    # GLM-4 MoE: a shared expert, per-head query and key norms, the rope over half of each head
    "glm4_moe": {**_GROUPED_ROUTING, "use_qk_norm": True, "head_dim": 16},
    # DeepSeek: latent attention (queries through a low-rank projection and its norm, keys and
    # values through another), a shared expert, every layer routed
    "deepseek_v2": {**_DEEPSEEK, "q_lora_rank": None},
    "deepseek_v3": {**_DEEPSEEK, "q_lora_rank": 24},
    # DeepSeek V3.2 and GLM-5 (MoE DSA): V3's latent attention, with an indexer choosing the
    # keys each query attends (its own key norm is a LayerNorm, which stays); GLM-4.7 Flash
    # (MoE Lite): V3's layers; Mistral 4: softmax routing, queries scaled by position (Llama
    # 4's scale); MiniCPM3 and Youtu: latent attention with dense MLPs (MiniCPM3 scales its
    # embeddings and residual branches)
    "deepseek_v32": {**_DEEPSEEK, **_SPARSE_LAYERS, **_INDEXER, "q_lora_rank": 24},
    "glm_moe_dsa": {**_DEEPSEEK, **_SPARSE_LAYERS, **_INDEXER, "q_lora_rank": 24},
    "glm4_moe_lite": {**_DEEPSEEK, **_SPARSE_LAYERS, "q_lora_rank": 24},
    "mistral4": {
        **_DEEPSEEK,
        "q_lora_rank": 24,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 1e4,
            "factor": 4.0,
            "original_max_position_embeddings": 4,
            "llama_4_scaling_beta": 0.5,
        },
    },
    "minicpm3": {**_DEEPSEEK, "q_lora_rank": 24, "scale_emb": 2.0, "scale_depth": 1.4},
    "youtu": {**_DEEPSEEK, "q_lora_rank": 24},
    # LFM2: a short-convolution layer (it stays), then an attention layer with per-head query
    # and key norms (`q_layernorm`, `k_layernorm`) and an `out_proj`; MLPs of `w1`, `w3` and
    # `w2` calling `F.silu`; LFM2-MoE's rotary module is its `pos_emb`
    "lfm2": {"layer_types": ["conv", "full_attention"]},
    # OLMo Hybrid: a Gated DeltaNet layer (it stays), then an attention layer with OLMo 2's
    # query and key norms over the projection and norms after attention and the MLP
    "olmo_hybrid": {**_TOKENS, "layer_types": ["linear_attention", "full_attention"]},
    # Granite 4 (`granitemoehybrid`): Granite's multipliers; the dense models' attention
    # layers rotate, their forward taking the mask before the position embeddings, and one
    # gate-up layer (`shared_mlp`); the hybrid (H) models put Mamba-2 layers (they stay)
    # between attention layers without a rope, and routed experts beside the shared MLP
    "granite4": {
        **_TOKENS,
        "layer_types": ["attention", "attention"],
        "position_embedding_type": "rope",
        "num_local_experts": 0,
        "shared_intermediate_size": 96,
        "embedding_multiplier": 2.0,
        "residual_multiplier": 0.5,
        "attention_multiplier": 0.3,
        "logits_scaling": 4.0,
    },
    "granite4_h": {
        **_TOKENS,
        "layer_types": ["mamba", "attention"],
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "shared_intermediate_size": 48,
        "mamba_n_heads": 8,
        "mamba_d_head": 16,
        "mamba_n_groups": 1,
        "mamba_d_state": 16,
        "residual_multiplier": 0.5,
    },
    # MiMo-V2 Flash: value heads narrower than the query and key heads, and scaled (transformers
    # 5.24); a full layer, then a sliding one with attention sinks and twice the key-value
    # heads; a rope over a third of each head, of its own base per layer type; routed experts
    "mimo_v2_flash": {
        **_TOKENS,
        "head_dim": 24,
        "v_head_dim": 16,
        "attention_value_scale": 0.7,
        "layer_types": ["full_attention", "sliding_attention"],
        "sliding_window": 4,
        "rope_parameters": {
            "full_attention": {
                "rope_type": "default",
                "rope_theta": 1e6,
                "partial_rotary_factor": 0.334,
            },
            "sliding_attention": {
                "rope_type": "default",
                "rope_theta": 1e4,
                "partial_rotary_factor": 0.334,
            },
        },
        "mlp_layer_types": ["sparse", "sparse"],
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
    },
    # MiniMax (Text-01, M1): a lightning-attention layer, which stays (it ignores the position
    # embeddings it is handed), then a softmax-attention layer; routed experts in both
    "minimax": {
        **_TOKENS,
        "layer_types": ["linear_attention", "full_attention"],
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "head_dim": 16,
    },
    # Kimi Linear: a KDA linear-attention layer, then latent attention without a rope (both
    # stay); routed and shared experts in both
    "kimi_linear": {
        **_LINEAR_LATENT,
        "layer_types": ["linear_attention", "full_attention"],
        "linear_head_dim": 16,
        "linear_num_heads": 4,
    },
    # Ling 2.5 hybrid (`bailing_hybrid`): latent attention (it stays, with the rotary module),
    # then a linear-attention layer (it stays too, ignoring the rope); routed and shared experts
    "bailing_hybrid": {
        **_LINEAR_LATENT,
        "layer_types": ["full_attention", "linear_attention"],
        "num_expert_group": 1,
        "topk_group": 1,
        "num_nextn_predict_layers": 0,
    },
    # Jais 2: biases on every projection, LayerNorms and a ReLU-squared MLP (which stay)
    "jais2": {**_TOKENS, "head_dim": 16},
    # AFMoE (Arcee's Trinity): a gate projection of its own on the attention output, per-head
    # query and key norms, norms before and after attention and the MLP, a sliding layer
    # that rotates and a global one that does not; routed and shared experts in both layers
    "afmoe": {
        **_TOKENS,
        **_SLIDING_THEN_FULL,
        "head_dim": 16,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "num_shared_experts": 1,
        "moe_intermediate_size": 32,
        "num_dense_layers": 0,
        "mup_enabled": True,
    },
    # Falcon-H1: attention and a Mamba-2 mixer side by side in each layer (the mixer stays),
    # multipliers on the keys, the MLP's gate and output, and around the attention and mixer
    "falcon_h1": {
        **_TOKENS,
        "key_multiplier": 0.7,
        "mlp_multipliers": [0.8, 0.6],
        "attention_in_multiplier": 1.3,
        "attention_out_multiplier": 0.9,
        "ssm_out_multiplier": 0.5,
        "embedding_multiplier": 2.0,
        "lm_head_multiplier": 0.5,
        # a small mixer: transformers 5.17's reference scan over the default one (128 heads,
        # a state of 256, chunks of 256) takes 17 GB and a minute on the CPU
        "mamba_d_ssm": 64,
        "mamba_n_heads": 8,
        "mamba_d_head": 8,
        "mamba_d_state": 16,
        "mamba_chunk_size": 16,
    },
    "lfm2_moe": {
        "layer_types": ["conv", "full_attention"],
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "num_dense_layers": 0,
    },
    # a sliding layer and a full one
    "ministral": {
        "head_dim": 16,
        "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    "olmo3": {"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]},
    # GLM, GLM-4 and ERNIE 4.5 rotate pairs, not halves (GLM's over half of each head); GLM's
    # gate and up projections are one layer, GLM-4 adds norms after attention and the MLP
    "glm": {"pad_token_id": 0, "eos_token_id": 1},
    "glm4": {"pad_token_id": 0, "eos_token_id": 1},
    "ernie4_5_moe": {
        "moe_num_experts": 4,
        "moe_k": 2,
        "moe_intermediate_size": 32,
        "moe_layer_start_index": 0,
        "moe_num_shared_experts": 1,
    },
    "helium": {"head_dim": 16},
    "seed_oss": {"head_dim": 16},
    # the second layer without rotary embeddings (NoPE)
    "smollm3": {"pad_token_id": 0, "no_rope_layer_interval": 2},
    # Cohere rotates pairs, with its query and key LayerNorms weighted per head; Cohere 2 and
    # EXAONE 4 rotate in their sliding-window layers only
    "cohere": {**_TOKENS, "use_qk_norm": True},
    "cohere2": {**_TOKENS, **_SLIDING_THEN_FULL},
    "cohere2_moe": {
        **_TOKENS,
        **_SLIDING_THEN_FULL,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "mlp_layer_types": ["sparse", "sparse"],
    },
    "exaone4": _SLIDING_THEN_FULL,
    "exaone_moe": {
        **_SLIDING_THEN_FULL,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "mlp_layer_types": ["sparse", "sparse"],
        "first_k_dense_replace": 0,
    },
    # Hunyuan normalizes the rotated queries and keys
    "hunyuan_v1_dense": {**_TOKENS, "head_dim": 16},
    "hunyuan_v1_moe": {
        **_TOKENS,
        "head_dim": 16,
        "num_experts": 4,
        "moe_topk": 2,
        "moe_intermediate_size": 32,
    },
    "dots1": {**_GROUPED_ROUTING, "n_shared_experts": 1},
    "vaultgemma": {
        "head_dim": 16,
        "query_pre_attn_scalar": 16,
        "attn_logit_softcapping": 1.0,
        **_SLIDING_THEN_FULL,
    },
    "flex_olmo": {"num_experts": 4, "num_experts_per_tok": 2, **_TOKENS},
    "minimax_m2": {"num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 16},
    "apertus": _TOKENS,
    "arcee": _TOKENS,
    # Llama 4: a rotating layer (pairs, by complex numbers) with a query-key norm without a
    # weight after the rotation, then a NoPE layer whose queries are scaled by their position
    # in the cache from the third on (its temperature); routed experts in both layers, of
    # one bmm each way, and a shared expert
    "llama4": {
        **_TOKENS,
        "head_dim": 16,
        "no_rope_layers": [1, 0],
        "floor_scale": 3,
        "attn_scale": 0.5,
        "attention_chunk_size": 4,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
        "moe_layers": [0, 1],
    },
    # a sliding layer (heads of 16, the default rope) and a full one (heads of 32, the
    # proportional rope on a quarter of each head, the keys' projection serving as values too);
    # without the per-layer inputs, whose norms are counted apart
    "gemma4": {**_GEMMA4},
    # Gemma 4 Unified's text model: Gemma 4's layers; Emu3's text model: Llama's
    "gemma4_unified": {**_GEMMA4},
    "emu3": _TOKENS,
    # Llama 3.2 Vision's language model: its second layer attends an image's states
    "mllama": {**_TOKENS, "cross_attention_layers": [1]},
    # Phi-4-multimodal: rotating part of each head, as the released model's 0.75; a tower of one
    # layer and an encoder of one block, whose attention the rope does not reach
    "phi4_multimodal": {
        **_TOKENS,
        "partial_rotary_factor": 0.5,
        "vision_config": {
            "hidden_size": 32,
            "intermediate_size": 48,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
        },
        "audio_config": {
            "hidden_size": 32,
            "intermediate_size": 48,
            "num_blocks": 1,
            "num_attention_heads": 2,
            "depthwise_separable_out_channel": 32,
            "ext_pw_out_channel": 32,
            "nemo_conv_channels": 32,
        },
    },
    # routed experts beside each layer's MLP, with their own norms and a router's norm
    "gemma4_moe": {
        **_GEMMA4,
        "enable_moe_block": True,
        "num_experts": 4,
        "top_k_experts": 2,
        "moe_intermediate_size": 32,
    },
    # a linear-attention layer (Gated DeltaNet, which stays), then an attention layer whose
    # query projection also gives its output's gate; a rope over half of each head, Qwen
    # 3.5's mixing three positions a token (its sections here fill the four frequencies)
    "qwen3_next": {**_QWEN3_NEXT, **_QWEN_EXPERTS},
    "qwen3_5": {**_QWEN3_NEXT, "rope_parameters": _QWEN3_5_ROPE},
    "qwen3_5_moe": {**_QWEN3_NEXT, **_QWEN_EXPERTS, "rope_parameters": _QWEN3_5_ROPE},
    # CWM: a sliding layer and a full one; Solar Open: a shared expert beside the routed ones;
    # HY V3 and Mellum: query and key norms, a shared expert (HY V3), sliding layers (Mellum)
    "cwm": {**_TOKENS, "head_dim": 16, **_SLIDING_THEN_FULL},
    "solar_open": {
        **_TOKENS,
        "head_dim": 16,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
    },
    "hy_v3": {
        **_TOKENS,
        "head_dim": 16,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "mlp_layer_types": ["sparse", "sparse"],
    },
    "mellum": {
        **_TOKENS,
        "head_dim": 16,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        **_SLIDING_THEN_FULL,
    },
    "apertus1p5": _TOKENS,
    # GPT-OSS: attention sinks (a parameter of the layer given to the attention function), a
    # sliding layer and a full one; its experts clamp their gate and stay
    "gpt_oss": {
        **_TOKENS,
        **_SLIDING_THEN_FULL,
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
    },
    # InternLM 3, IQuest-Coder, EXAONE 3 (Llama's classes); Sarvam's MoE (GLM-4 MoE's) and
    # MLA (DeepSeek V3's)
    "internlm3": {"head_dim": 16},
    "iquestcoder": {"head_dim": 16},
    "exaone": {"head_dim": 16},
    "sarvam_moe": {**_GROUPED_ROUTING, "head_dim": 16},
    "sarvam_mla": {**_DEEPSEEK, "q_lora_rank": None},
    # HyperCLOVA X: Granite's multipliers, norms after attention and the MLP
    "hyperclovax": {
        **_TOKENS,
        "head_dim": 16,
        "embedding_multiplier": 2.0,
        "residual_multiplier": 0.5,
        "attention_multiplier": 0.3,
        "logits_scaling": 4.0,
    },
    # Flint: attention sinks, a sliding layer that rotates and a full one that does not (NoPE);
    # routed experts beside a shared expert that no router output scales
    "flint": {
        **_TOKENS,
        **_SLIDING_THEN_FULL,
        **_QWEN_EXPERTS,
        "head_dim": 16,
        "mlp_only_layers": [],
    },
    # Kolibri 1: EXAONE 4's attention, GLM-4's norms after attention and the MLP, routed
    # experts beside a dense MLP
    "kolibri1": {
        **_TOKENS,
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
    },
    # Lara Mini: its model hands its full-attention layers no position embeddings (they rotate
    # nothing), its sliding ones the rope
    "lara_mini": {
        **_TOKENS,
        **_QWEN3_NEXT,
        **_QWEN_EXPERTS,
        "layer_types": ["sliding_attention", "full_attention"],
        "sliding_window": 4,
    },
    # LFM3: LFM2's layers, an attention output gated by one sigmoid a head
    "lfm3": {**_TOKENS, "head_dim": 16, "layer_types": ["conv", "full_attention"]},
    # MiniMax M3 (its text model): experts and shared experts clamping their gates (they stay)
    "minimax_m3": {
        **_TOKENS,
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "dense_intermediate_size": 96,
        "shared_intermediate_size": 32,
        "moe_intermediate_size": 32,
    },
    # A.X K1 (DeepSeek V3's layers), A.X K2 (V3.2's, with gated norms) and dots3 (V3.2's):
    # latent attention, which stays
    "axk1": {**_TOKENS, **_DEEPSEEK, "q_lora_rank": 24},
    "axk2": {**_TOKENS, **_DEEPSEEK, **_SPARSE_LAYERS, **_INDEXER, "q_lora_rank": 24},
    "dots3_note": {**_TOKENS, **_DEEPSEEK, **_SPARSE_LAYERS, **_INDEXER, "q_lora_rank": 24},
    # Inkling: attention without a rope (relative logits), which stays; a norm on the
    # embeddings; routed experts
    "inkling": _TOKENS,
    # Granite SWA: a rotary module a rope base (and the model's own, unused), handed to the
    # layers of that base; attention sinks
    "granite_swa": {**_SLIDING_THEN_FULL, "head_dim": 16, "layer_rope_theta": [1e4, 5e5]},
    "granitemoe_swa": {
        **_SLIDING_THEN_FULL,
        "head_dim": 16,
        "layer_rope_theta": [1e4, 5e5],
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
    },
    # Laguna: an attention output gated by a softplus (one value a head), a rope of its own
    # width per layer type, shared and routed experts in both layers
    "laguna": {
        **_TOKENS,
        **_SLIDING_THEN_FULL,
        "head_dim": 16,
        "mlp_layer_types": ["sparse", "sparse"],
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
    },
    # Aria's language model: routed experts beside a shared expert
    "aria_text": {**_TOKENS, "moe_num_experts": 4, "moe_topk": 2},
    # Nemotron (Minitron): LayerNorms with an offset of one and an MLP of one activation
    # (ReLU squared), which stay; the rope over half of each head
    "nemotron": {**_TOKENS, "head_dim": 16},
    # StableLM: LayerNorms (they stay), a rope over a quarter of each head, which its attention
    # slices off before it calls its rotation
    "stablelm": _TOKENS,
    # StarCoder2: LayerNorms and an MLP of one activation (they stay), biased projections
    "starcoder2": _TOKENS,
    # OLMo (1): norms without a weight or a bias, LayerNorms (they stay)
    "olmo": _TOKENS,
    # Bamba: a Mamba-2 layer (it stays; a small mixer, as Falcon-H1's), then attention
    "bamba": {
        **_TOKENS,
        "attn_layer_indices": [1],
        "mamba_n_heads": 8,
        "mamba_d_head": 16,
        "mamba_d_state": 16,
        "mamba_chunk_size": 16,
    },
    # Jamba: a Mamba layer (it stays; its norms of the step, B and C convert), then attention
    # without a rope (it stays); routed experts in both
    "jamba": {
        **_TOKENS,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 1,
        "expert_layer_offset": 0,
        "num_experts": 4,
        "mamba_dt_rank": 8,
        "use_mamba_kernels": False,
    },
    # Phi-2 (and 1.5): LayerNorms and an MLP of one activation (they stay), an output
    # projection named `dense`, a rope over half of each head, sliced off by the attention
    "phi": _TOKENS,
    # Gemma 3n (text): four streams (AltUp) through each layer, a low-rank side path
    # (Laurel), inputs per layer; dense MLPs here (`test_gemma3n_...` has sparse ones)
    "gemma3n": {
        **_TOKENS,
        "head_dim": 16,
        "layer_types": ["sliding_attention", "full_attention"],
        "num_kv_shared_layers": 0,
        "activation_sparsity_pattern": [0.0, 0.0],
        "hidden_size_per_layer_input": 16,
        "vocab_size_per_layer_input": 128,
    },
    # Phi-3.5-MoE: LayerNorms (they stay), routed experts, Phi-3's long rope (past four
    # positions, its long factors: the prompt reaches them), computed at each call
    "phimoe": {
        **_TOKENS,
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "rope_parameters": {
            "rope_type": "longrope",
            "rope_theta": 1e4,
            "long_factor": [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5],
            "short_factor": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7],
            "long_mscale": 1.2,
            "short_mscale": 1.1,
            "original_max_position_embeddings": 4,
        },
    },
    # queries scaled from the fourth position on (Llama 4's scale), so the prompt shows it
    "ministral3": {
        **_TOKENS,
        "head_dim": 16,
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 4,
            "llama_4_scaling_beta": 0.5,
            "rope_theta": 1e4,
        },
    },
}
#: families whose gate and up projections are one layer already
JOINED_MLPS = {"phi3", "glm", "glm4", "granite4", "phi4_multimodal"}
#: families whose attention stays as it is (DeepSeek's latent attention rotates on its own)
ATTENTION_STAYS = {
    "axk1",
    "axk2",
    "dots3_note",
    "sarvam_mla",
    "bailing_hybrid",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "glm_moe_dsa",
    "glm4_moe_lite",
    "mistral4",
    "minicpm3",
    "youtu",
}
#: per layer where a family differs from (2 norms, 1 converted MLP, no routed experts): query
#: and key norms (Qwen3, OLMo 2's over the projection), norms after attention and after the MLP
#: (Gemma 2 and 3, OLMo 2, which has no norm before them), and mixture-of-experts blocks, whose
#: routed experts gate on the IR op and whose shared expert, where there is one (Qwen2-MoE,
#: GLM-4 MoE, DeepSeek), converts as a gated MLP; DeepSeek's latent attention has a norm after its
#: key-value projection, and V3's one after its query projection too
LAYER_COUNTS: dict[str, tuple[int, int, int]] = {
    "qwen3": (4, 1, 0),
    "gemma2": (4, 1, 0),
    "gemma3": (6, 1, 0),
    "olmo2": (4, 1, 0),
    "mixtral": (2, 0, 1),
    "qwen2_moe": (2, 1, 1),
    "qwen3_moe": (4, 0, 1),
    "olmoe": (4, 0, 1),
    "granitemoe": (2, 0, 1),
    "granitemoeshared": (2, 1, 1),
    "glm4_moe": (4, 1, 1),
    "deepseek_v2": (3, 1, 1),
    "deepseek_v3": (4, 1, 1),
    "deepseek_v32": (4, 1, 1),
    "glm_moe_dsa": (4, 1, 1),
    "glm4_moe_lite": (4, 1, 1),
    "mistral4": (4, 1, 1),
    "minicpm3": (4, 1, 0),
    "youtu": (4, 1, 0),
    # the attention layer's query and key norms beside two norms a layer: three on average
    "lfm2": (3, 1, 0),
    "lfm2_moe": (3, 0, 1),
    "olmo_hybrid": (3, 1, 0),
    # Jais 2: LayerNorms and an MLP of one activation (ReLU squared), which stay
    "jais2": (0, 0, 0),
    "granite4_h": (2, 1, 1),
    "mimo_v2_flash": (2, 0, 1),
    "minimax": (2, 0, 1),
    "kimi_linear": (2, 1, 1),
    "bailing_hybrid": (2, 1, 1),
    "afmoe": (6, 1, 1),
    "olmo3": (4, 1, 0),
    "glm4": (4, 1, 0),
    "ernie4_5_moe": (2, 1, 1),
    "cohere": (0, 1, 0),
    "cohere2": (0, 1, 0),
    "cohere2_moe": (0, 0, 1),
    "exaone4": (4, 1, 0),
    "exaone_moe": (4, 1, 1),
    "hunyuan_v1_dense": (4, 1, 0),
    "hunyuan_v1_moe": (4, 1, 1),
    "dots1": (4, 1, 1),
    "flex_olmo": (4, 0, 1),
    "minimax_m2": (4, 0, 1),
    "apertus": (4, 0, 0),
    "arcee": (2, 0, 0),
    "llama4": (2, 1, 1),
    "solar_open": (2, 1, 1),
    "hy_v3": (4, 1, 1),
    "mellum": (4, 0, 1),
    "apertus1p5": (4, 0, 0),
    "gpt_oss": (2, 0, 0),
    # query, key and value norms; around the attention and the MLP; with experts, three more
    # and the router's
    "gemma4": (7, 1, 0),
    "gemma4_unified": (7, 1, 0),
    # Mllama's cross-attention layer has query and key norms too: 7 in all
    "mllama": (3, 1, 0),
    "gemma4_moe": (11, 1, 1),
    # two norms a layer, and the attention layer's query and key norms: three on average
    "qwen3_next": (3, 1, 1),
    "qwen3_5": (3, 1, 0),
    "qwen3_5_moe": (3, 1, 1),
    "sarvam_moe": (4, 1, 1),
    "sarvam_mla": (3, 1, 1),
    "hyperclovax": (4, 1, 0),
    "flint": (4, 1, 1),
    "kolibri1": (6, 1, 1),
    "lara_mini": (4, 1, 1),
    "lfm3": (5, 1, 0),
    "minimax_m3": (4, 0, 0),
    "axk1": (5, 1, 1),
    "axk2": (4, 1, 1),
    "dots3_note": (5, 1, 1),
    "inkling": (4, 0, 1),
    "granitemoe_swa": (2, 0, 1),
    "laguna": (4, 1, 1),
    "aria_text": (2, 1, 1),
    "nemotron": (0, 0, 0),
    "phimoe": (0, 0, 1),
    "stablelm": (0, 1, 0),
    "starcoder2": (0, 0, 0),
    "olmo": (0, 1, 0),
    "jamba": (2, 0, 1),
    "phi": (0, 0, 0),
}
#: families without a rotary module (their attention rotates nothing, and stays): Granite 4's
#: hybrids, as released
NO_ROTARY = {"granite4_h", "kimi_linear", "inkling", "jamba"}
NO_ROTARY_WHY = "no rotary module (none named rotary_emb or of a class ending in RotaryEmbedding)"
#: families whose two layers differ in their norms, by their total with the final norm:
#: MiniMax's lightning layer has a norm of its own; Kimi Linear's latent-attention layer a norm
#: after its key-value projection
TOTAL_NORMS = {
    "minimax": 6,
    "kimi_linear": 6,
    "bailing_hybrid": 6,
    "inkling": 10,
    "jamba": 8,
    "gemma3n": 22,
}
#: families whose norms run other than once a forward, and how often in all: Gemma 3n's AltUp
#: norms its router's input twice a layer (to predict the streams and to correct them);
#: Mllama's text-only forward skips the norms of its cross-attention layer
NORM_CALLS = {"gemma3n": 24, "mllama": 3}
#: families whose MLPs run fewer times a forward than they are layers, and how many: Mllama's
#: text-only forward skips its cross-attention layers (and their norms: `NORM_CALLS`)
MLP_CALLS = {"mllama": 1}
#: families whose routed experts gate in their own way and stay (GPT-OSS clamps its gate)
EXPERTS_STAY = {"gpt_oss", "minimax_m3"}
#: families whose shared experts clamp their gate too, and stay
SHARED_EXPERTS_STAY = {"minimax_m3"}
#: parts of other models inside a family's model that stay, and why: Phi-4-multimodal's audio
#: encoder norms its feed-forward blocks' input with a LayerNorm first
TOWERS_STAY = {
    "phi4_multimodal": {
        f"model.embed_tokens_extend.audio_embed.encoder.encoders.0.{part}": (
            "its forward computes other than down(act(gate(x)) * up(x))"
        )
        for part in ("feed_forward_in", "feed_forward_out")
    }
}
#: families whose norms are LayerNorms (they stay), the final one too
LAYER_NORMS = {
    "cohere",
    "cohere2",
    "cohere2_moe",
    "jais2",
    "nemotron",
    "phimoe",
    "stablelm",
    "starcoder2",
    "olmo",
    "phi",
}
#: families with layers that rotate nothing (NoPE), and how many of the two rotate
ROTATING_LAYERS = {
    "smollm3": 1,
    "cohere2": 1,
    "cohere2_moe": 1,
    "exaone4": 1,
    "exaone_moe": 1,
    "llama4": 1,
    "afmoe": 1,
    "flint": 1,
    "lara_mini": 1,
}
#: families with linear-attention layers (Qwen3-Next's, Qwen 3.5's and OLMo Hybrid's Gated
#: DeltaNet, LFM2's short convolutions, which stay), and how many of the two are attention layers
ATTENTION_LAYERS = {
    "qwen3_next": 1,
    "qwen3_5": 1,
    "qwen3_5_moe": 1,
    "lfm2": 1,
    "lfm2_moe": 1,
    "olmo_hybrid": 1,
    "minimax": 1,
    "lfm3": 1,
    "bamba": 1,
    # Mllama's cross attention (keys and values from an image's states) keeps its forward
    "mllama": 1,
}
#: families whose rotating layers alone have a query and key norm, one module for both (run
#: twice a layer)
SHARED_HEAD_NORMS = {"llama4"}


#: families whose parts this table expects to convert only from a transformers release on:
#: Aria's experts (grouped products of its own before 5.24) have no ``_apply_gate`` hook;
#: Gemma 3n's attention before 5.24 shares keys and values by layer index, not layer type,
#: which the probe finds and refuses
MIN_TRANSFORMERS = {"aria_text": "5.24", "gemma3n": "5.24"}


def transformers_classes(*names: str) -> list[Any]:
    """The transformers classes of `names`; the test skips where the installed transformers
    lacks one (a family newer than it)."""
    missing = [name for name in names if not hasattr(transformers, name)]
    if missing:
        pytest.skip(f"transformers {transformers.__version__} has no {missing[0]}")
    return [getattr(transformers, name) for name in names]


def randomize_norms(model: Any, low: float = 0.5, high: float = 1.5) -> None:
    """Draw `model`'s norm weights from [low, high): weights of ones would hide a norm applied
    to the wrong axis."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(low, high)


def build(family: str, **overrides: Any) -> Any:
    torch.manual_seed(0)
    config_class, model_class = transformers_classes(*FAMILIES[family])
    needed = MIN_TRANSFORMERS.get(family)
    if needed is not None and Version(transformers.__version__) < Version(needed):
        pytest.skip(f"{family} converts as this table expects from transformers {needed}")
    options = {**FAMILY_OPTIONS.get(family, {}), **overrides}
    model = model_class(config_class(**{**SIZES, **options})).eval()
    randomize_norms(model)
    return model


def gated_op(family: str) -> str:
    return "gelu_and_mul" if "gemma" in family else "silu_and_mul"


def prompt() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, SIZES["vocab_size"], (2, 9), generator=torch.Generator().manual_seed(2))
    return ids, torch.ones_like(ids)


def convert_keeping_logits(model: Any) -> Any:
    """`convert_hf_model(model)`, checking that the logits on `prompt()` stay (float32); its
    report."""
    ids, mask = prompt()
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits
        report = convert_hf_model(model)
        converted = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(converted, logits, atol=1e-5, rtol=1e-5)
    return report


@pytest.mark.parametrize("family", list(FAMILIES))
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
    norms_a_layer, mlps_a_layer, experts_a_layer = LAYER_COUNTS.get(family, (2, 1, 0))
    norms = norms_a_layer * layers + (0 if family in LAYER_NORMS else 1)
    norms = TOTAL_NORMS.get(family, norms)
    norm_calls = norms
    if family in SHARED_HEAD_NORMS:
        norms += ROTATING_LAYERS[family]
        norm_calls += 2 * ROTATING_LAYERS[family]
    norm_calls = NORM_CALLS.get(family, norm_calls)
    assert len(report.norms) == norms
    assert len(report.mlps) == mlps_a_layer * layers
    assert len(report.experts) == experts_a_layer * layers
    attention_stays = family in ATTENTION_STAYS | NO_ROTARY
    attention_layers = ATTENTION_LAYERS.get(family, layers)
    assert len(report.attentions) == (0 if attention_stays else attention_layers)
    why = "attention of another form in model.layers.0.self_attn"
    skipped = {"model.rotary_emb": why} if attention_stays else {}
    if family in NO_ROTARY:
        skipped = {"rotary_emb": NO_ROTARY_WHY}
    if family in EXPERTS_STAY:
        why = "mixture of experts: its routed experts gate in their own way"
        skipped = {f"model.layers.{i}.mlp.experts": why for i in range(layers)}
    if family in SHARED_EXPERTS_STAY:
        why = "its forward computes other than down(act(gate(x)) * up(x))"
        skipped |= {f"model.layers.{i}.mlp.shared_experts": why for i in range(layers)}
    skipped |= TOWERS_STAY.get(family, {})
    assert report.skipped == skipped
    # most families' `norm`, LFM2's `embedding_norm`, Falcon-H1's `final_layernorm`
    final_norm = next(
        getattr(model.model, name)
        for name in ("norm", "embedding_norm", "final_layernorm")
        if hasattr(model.model, name)
    )
    assert isinstance(final_norm, IRRMSNorm) != (family in LAYER_NORMS)
    mlp = model.get_submodule(report.mlps[0]) if report.mlps else None
    if experts_a_layer:  # the routed experts keep their class and their weights' names
        assert all(path.endswith(".experts") for path in report.experts)
    elif mlps_a_layer:
        assert isinstance(mlp, IRJoinedGatedMLP if family in JOINED_MLPS else IRGatedMLP)
    if family not in NO_ROTARY:
        rotary = getattr(model.model, "rotary_emb", None) or model.model.pos_emb  # LFM2-MoE's
        assert isinstance(rotary, IRRotaryCache) != attention_stays
    calls = {op: n for (op, _), n in ir_dispatch.stats().items()}
    expected = {"rms_norm": norm_calls} if norms else {}
    if not attention_stays:
        expected["rotary_embedding"] = ROTATING_LAYERS.get(family, attention_layers)
    if mlps_a_layer or experts_a_layer:
        gated_calls = (mlps_a_layer + experts_a_layer) * layers
        expected[gated_op(family)] = MLP_CALLS.get(family, gated_calls)
    assert calls == expected
    torch.testing.assert_close(converted, logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(converted_tokens, tokens)
    # the registry (and the docs' model table made from it) names every part that converted
    registered = hf.family_of(model.config.model_type)
    assert registered is not None
    assert converted_parts(report) <= registered.converts, registered.name


def converted_parts(report: hf.ConversionReport) -> set[str]:
    """The parts of the registry's vocabulary (`families.PARTS`) that `report` lists."""
    lists = {
        "norms": report.norms,
        "gated MLP": report.mlps,
        "experts": report.experts,
        "rotary": report.attentions,
    }
    return {part for part, paths in lists.items() if paths}


_attention_calls: list[dict[str, Any]] = []


def _recording_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: Any = None,
    **kwargs: Any,
) -> Any:
    """Records the keyword arguments, then attends as the family's eager function does (the
    mask, by position or by name as AFMoE gives it, is not recorded)."""
    if "attention_mask" in kwargs:
        mask = kwargs.pop("attention_mask")
    _attention_calls.append({"layer": module.layer_idx, **kwargs})
    eager = sys.modules[type(module).__module__].eager_attention_forward
    return eager(module, query, key, value, mask, **kwargs)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in ATTENTION_STAYS | NO_ROTARY])
def test_converted_attention_calls_its_attention_function_as_the_original(family: str) -> None:
    """Beside the tensors, a family's attention forward gives its attention function a sliding
    window (per layer, the model's, or only in sliding layers), a logit cap, the positions...:
    the converted forward gives each layer's function the same keyword arguments. (The
    default ``sdpa`` function ignores some of them, which flash attention reads.)"""
    _assert_same_attention_calls(build(family), ATTENTION_LAYERS.get(family))


def test_a_forward_keeping_the_positions_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forward that names ``position_ids`` and does not hand them on (Ministral 3's under
    transformers 5.17): the converted one does not hand them on either."""
    model = build("llama")
    attention_class = type(model.model.layers[0].self_attn)
    forward = attention_class.forward

    def keeps_positions(self: Any, *args: Any, position_ids: Any = None, **kwargs: Any) -> Any:
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(attention_class, "forward", keeps_positions)
    _assert_same_attention_calls(model)
    assert model.model.layers[0].self_attn.ir_attention_plan.kept_arguments == ("position_ids",)


def _assert_same_attention_calls(model: Any, attention_layers: int | None = None) -> None:
    """`model`'s attention layers (every layer, or `attention_layers` of them) call their
    attention function with the same keyword arguments after `convert_hf_model` as before,
    layer by layer."""
    if attention_layers is None:
        attention_layers = SIZES["num_hidden_layers"]
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register("test_recording", _recording_attention)
    AttentionMaskInterface.register("test_recording", eager_mask)
    model.set_attn_implementation("test_recording")
    ids, mask = prompt()
    calls = []
    for convert in (False, True):
        if convert:
            report = convert_hf_model(model)
            assert len(report.attentions) == attention_layers, report.skipped
        _attention_calls.clear()
        with torch.no_grad():
            model(ids, attention_mask=mask)
        calls.append(list(_attention_calls))
    original, converted = calls
    assert len(converted) == len(original) == attention_layers
    for want, got in zip(original, converted, strict=True):
        assert sorted(got) == sorted(want)
        for name, value in want.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(got[name], value), name
            else:
                assert got[name] == value, name


#: torch 2.11's Inductor corrupts the heap running its CPU code for transformers 5.17's Falcon-H1
#: (the original model too, with stock `torch.compile`): under ``MALLOC_CHECK_=3`` the process
#: aborts ("free(): corrupted unsorted chunks", "double free or corruption"), and without it the
#: abort can take a whole test shard down. transformers 5.24 on torch 2.11, and 5.17 on torch
#: 2.13, run it cleanly.
INDUCTOR_CPU_FALCON_H1 = (
    "torch < 2.13 with transformers < 5.24: Inductor's CPU code for Falcon-H1 corrupts the heap, "
    "stock torch.compile of the original model too"
)


@pytest.mark.parametrize(
    "family",
    [
        "llama",
        "qwen3",
        "gemma",
        "gemma3",
        "phi3",
        "qwen3_moe",
        "glm4",
        "smollm3",
        "hunyuan_v1_dense",
        "ministral3",
        "llama4",
        "gemma4",
        "qwen3_5",
        "lfm2",
        "deepseek_v32",
        pytest.param(
            "falcon_h1",
            marks=pytest.mark.skipif(
                Version(torch.__version__).release < (2, 13)
                and Version(transformers.__version__) < Version("5.24"),
                reason=INDUCTOR_CPU_FALCON_H1,
            ),
        ),
    ],
)
def test_converted_model_compiles_with_its_residual_adds_fused(family: str) -> None:
    """Every residual add fuses with the norm after it, and where the attention normalizes
    each query and key head before the rotation (`QK_NORMS_BEFORE_ROTATION`), the norms and
    the rotation become ``qk_norm_rotary_embedding``; the logits stay."""
    model = build(family)
    ids, mask = prompt()
    convert_hf_model(model)
    # on this CPU every op runs natively, where Inductor fuses the adds itself; forced, the
    # pass shows what it does where a kernel provider is selected
    config = ir_stack.Config(passes=ir_passes.PassConfig(force_fusion=True))
    # the passes must run here, not be served from an earlier run's Inductor cache
    with (
        torch.no_grad(),
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        # without a KV cache, which Gemma 4 would build inside the graph: under torch 2.11
        # its cache's construction breaks the graph, and the last graph holds no adds
        eager = model(ids, attention_mask=mask, use_cache=False).logits
        compiled = ir_stack.compile(model, config)(ids, attention_mask=mask, use_cache=False)
        compiled = compiled.logits
    report = ir_passes.last_report()
    assert report is not None
    # every residual add is followed by a norm: its layer's second, the next layer's first or
    # the final one (Gemma 4 scales its layer's output first: only the attention's add fuses)
    fusions = (1 if family == "gemma4" else 2) * SIZES["num_hidden_layers"]
    expected = {"add+rms_norm": fusions}
    if family in QK_NORMS_BEFORE_ROTATION:
        expected[ir_passes.QK_NORM_ROPE_PATTERN] = QK_NORMS_BEFORE_ROTATION[family]
    assert report.fusions == expected
    torch.testing.assert_close(compiled, eager, atol=1e-4, rtol=1e-4)


#: families of that test whose attention layers (this many at `SIZES`) normalize each query
#: and key head before the rotation (LFM2's first layer is a convolution)
QK_NORMS_BEFORE_ROTATION = {
    "qwen3": SIZES["num_hidden_layers"],
    "gemma3": SIZES["num_hidden_layers"],
    "qwen3_moe": SIZES["num_hidden_layers"],
    "gemma4": SIZES["num_hidden_layers"],
    "lfm2": 1,
}


def test_parts_that_cannot_be_converted_exactly_are_left_alone() -> None:
    """An MLP of another activation stays, reported; the rest converts. (Ropes and attention
    layers left alone: the tests of rotation forms, probes and DeepSeek.)"""
    model = build("llama", hidden_act="relu")
    report = convert_keeping_logits(model)
    assert "activation 'relu'" in report.skipped["model.layers.0.mlp"]
    assert report.mlps == []
    assert len(report.attentions) == SIZES["num_hidden_layers"]
    assert len(report.norms) == 5


def test_an_mlp_computing_more_than_its_gated_form_is_left_alone() -> None:
    """The whole forward of a gated MLP is checked, not its activation alone: one that scales
    its gate by a constant it does not hold as Falcon-H1's do (``gate_multiplier``) stays,
    reported; one without an ``act_fn`` (LFM2's, calling ``F.silu``) converts."""
    model = build("llama")
    scaled = model.model.layers[0].mlp

    def scaled_gate(x: torch.Tensor) -> torch.Tensor:
        gate = scaled.act_fn(scaled.gate_proj(x) * 0.8)
        out: torch.Tensor = scaled.down_proj(gate * scaled.up_proj(x))
        return out

    scaled.forward = scaled_gate
    plain = model.model.layers[1].mlp
    del plain.act_fn
    plain.forward = lambda x: plain.down_proj(
        torch.nn.functional.silu(plain.gate_proj(x)) * plain.up_proj(x)
    )
    report = convert_keeping_logits(model)
    assert report.skipped == {
        "model.layers.0.mlp": "its forward computes other than down(act(gate(x)) * up(x))"
    }
    assert report.mlps == ["model.layers.1.mlp"]
    assert model.model.layers[1].mlp.activation == "silu"


class _ScaledInt8Linear(torch.nn.Linear):
    """A quantized layer as transformers' integrations make them (FP8, compressed tensors,
    bitsandbytes): an ``nn.Linear`` whose ``weight`` holds other values than it multiplies by
    (here int8 steps), rescaled in its own forward."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__(linear.in_features, linear.out_features, bias=False)
        scale = linear.weight.detach().abs().amax(dim=1, keepdim=True) / 127
        steps = (linear.weight.detach() / scale).round().to(torch.int8)
        self.weight = torch.nn.Parameter(steps, requires_grad=False)
        self.register_buffer("scale", scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight.to(x.dtype) * self.scale)


def test_an_mlp_of_quantized_layers_keeps_them() -> None:
    """A gated MLP whose gate and up projections are quantized layers (subclasses of
    ``nn.Linear`` with a forward of their own) stays: joining their ``weight`` would drop
    their scales. One whose layers are an ``nn.Linear`` subclass that keeps its forward
    converts. The converted MLP is checked against the original on a probe besides."""
    model = build("llama")
    quantized = model.model.layers[0].mlp
    quantized.gate_proj = _ScaledInt8Linear(quantized.gate_proj)
    quantized.up_proj = _ScaledInt8Linear(quantized.up_proj)
    renamed = type("NamedLinear", (torch.nn.Linear,), {})
    plain = model.model.layers[1].mlp
    plain.gate_proj.__class__ = renamed
    report = convert_keeping_logits(model)
    assert report.skipped == {
        "model.layers.0.mlp": "its gate and up projections are _ScaledInt8Linear, whose forward "
        "is not nn.Linear's: their weights cannot be joined (a quantized layer's)"
    }
    assert report.mlps == ["model.layers.1.mlp"]
    assert model.model.layers[0].mlp is quantized


def test_quantized_projections_are_called_as_they_are_in_converted_layers() -> None:
    """Quantized query, key, value, output and down projections are called as they are, so
    the attention layers and MLPs around them convert; their probes run in the model's dtype,
    not their weights' (int8 here)."""
    model = build("llama")
    for layer in model.model.layers:
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(layer.self_attn, name, _ScaledInt8Linear(getattr(layer.self_attn, name)))
        layer.mlp.down_proj = _ScaledInt8Linear(layer.mlp.down_proj)
    report = convert_keeping_logits(model)
    assert report.skipped == {}
    assert len(report.attentions) == len(report.mlps) == SIZES["num_hidden_layers"]
    assert isinstance(model.model.layers[0].mlp.down_proj, _ScaledInt8Linear)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_query_key_and_value_projections_become_one_matrix(family: str) -> None:
    """Plain query, key and value layers join into one ``qkv_proj`` (biases too: Qwen2's),
    whose rows are the three weights in order; the converted forward splits its output, and
    one matrix product a layer projects the three."""
    model = build(family)
    attentions = [layer.self_attn for layer in model.model.layers]
    weights = [
        torch.cat([getattr(a, n).weight.detach() for n in ("q_proj", "k_proj", "v_proj")])
        for a in attentions
    ]
    report = convert_keeping_logits(model)
    assert (
        report.joined_qkv
        == report.attentions
        == [f"model.layers.{i}.self_attn" for i in range(SIZES["num_hidden_layers"])]
    )
    assert "2 with q, k and v joined" in str(report)
    for attention, weight in zip(attentions, weights, strict=True):
        assert not {"q_proj", "k_proj", "v_proj"} & set(attention._modules)
        assert torch.equal(attention.qkv_proj.weight, weight)
        assert (attention.qkv_proj.bias is not None) == (family == "qwen2")
        assert sum(attention.ir_attention_plan.qkv_rows) == weight.shape[0]
    products = Counter()
    ids, mask = prompt()

    def count(_module: Any, _args: Any, _out: Any) -> None:
        products["linear"] += 1

    hooks = [a.qkv_proj.register_forward_hook(count) for a in attentions]
    with torch.no_grad():
        model(ids, attention_mask=mask)
    for hook in hooks:
        hook.remove()
    assert products["linear"] == len(attentions)


def test_projections_that_are_not_plain_linear_layers_stay_apart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A quantized key projection (its own forward), a hooked value projection and a frozen
    key projection beside trainable query and value ones keep their attention's three layers:
    the attention still converts, and the debug log says why each kept them."""
    model = build("llama", num_hidden_layers=3)
    first, second, third = (layer.self_attn for layer in model.model.layers)
    first.k_proj = _ScaledInt8Linear(first.k_proj)
    second.v_proj.register_forward_pre_hook(lambda _module, args: None)
    third.k_proj.weight.requires_grad_(False)
    with caplog.at_level("DEBUG", logger="ir_stack"):
        report = convert_hf_model(model)
    assert len(report.attentions) == 3
    assert report.joined_qkv == []
    for attention in (first, second, third):
        assert "qkv_proj" not in attention._modules
        assert attention.ir_attention_plan.qkv_rows is None
    assert "model.layers.0.self_attn keeps its projections: a projection is not a plain" in (
        caplog.text
    )
    assert "some of its projections' parameters are trained and some frozen" in caplog.text


def test_a_joined_projection_differing_on_its_probe_keeps_the_three(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The joined projection runs on a probe beside the three layers before it stays: where
    they differ (here the comparison made to fail), the three stay and nothing was lost."""
    from ir_stack.hf import projections

    model = build("llama")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    monkeypatch.setattr(projections, "close", lambda got, want: False)
    report = convert_keeping_logits(model)
    assert report.joined_qkv == []
    assert len(report.attentions) == 2
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(torch.equal(after[k], v) for k, v in before.items())


def test_a_converted_mlp_computing_other_than_the_original_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The joined MLP runs on a probe beside the original before it replaces it: where they
    differ (here the join is made wrong on purpose), the MLP stays, reported."""
    monkeypatch.setattr(
        hf_mlp, "IRGatedMLP", lambda gate, up, down, *a, **k: IRGatedMLP(up, gate, down, *a, **k)
    )
    model = build("llama")
    report = convert_keeping_logits(model)
    why = "the converted MLP does not compute what its forward does on a probe"
    assert report.skipped == {f"model.layers.{i}.mlp": why for i in range(2)}
    assert report.mlps == []


def test_a_converted_attention_takes_its_arguments_as_its_own_forward_does() -> None:
    """Granite 4's attention forward takes the mask second and the position embeddings last:
    the converted forward, called by position in that order or by name, gives the same; more
    positional arguments than the original takes are refused."""
    model = build("granite4")
    convert_keeping_logits(model)
    attention = model.model.layers[0].self_attn
    parameters = attention.ir_attention_plan.forward_parameters
    # The cache's name differs between transformers releases (past_key_values, cache).
    assert (parameters[:2], parameters[3:]) == (
        ("hidden_states", "attention_mask"),
        ("position_embeddings",),
    )
    hidden = torch.randn(1, 5, SIZES["hidden_size"], generator=torch.Generator().manual_seed(3))
    positions = torch.arange(5).unsqueeze(0)
    with torch.no_grad():
        embeddings = model.model.rotary_emb(hidden, positions)
        by_name, _ = attention(
            hidden_states=hidden, attention_mask=None, position_embeddings=embeddings
        )
        by_position, _ = attention(hidden, None, None, embeddings)
    torch.testing.assert_close(by_position, by_name, atol=0, rtol=0)
    with pytest.raises(TypeError, match="got 5 positional arguments; its own forward takes 4"):
        attention(hidden, None, None, embeddings, None)


class WrappingAttention(torch.nn.Module):
    """An attention layer of another form (no projections of its own) that uses the position
    embeddings it is handed, as DeepSeek's latent attention does."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(
        self, hidden_states: Any, position_embeddings: Any, *args: Any, **kwargs: Any
    ) -> Any:
        return self.inner(hidden_states, position_embeddings, *args, **kwargs)


def test_another_form_of_attention_using_the_rotary_keeps_it_for_every_layer() -> None:
    """A layer of another form beside converted ones: where it uses the rotary module's output
    (found on a probe), the rotary module and every attention layer stay; MiniMax's lightning
    layers, which ignore it, let the others convert (its family's test)."""
    model = build("llama")
    layer = model.model.layers[0]
    layer.self_attn = WrappingAttention(layer.self_attn)
    report = convert_keeping_logits(model)
    assert report.skipped == {
        "model.rotary_emb": "attention of another form in model.layers.0.self_attn"
    }
    assert report.attentions == []


def test_a_model_without_rotary_embeddings_keeps_its_attention() -> None:
    """OLMo Hybrid's released checkpoints rotate nothing (no rope theta, no rotary module):
    the norms and MLPs convert, the attention stays, reported."""
    model = build("olmo_hybrid", rope_parameters={"rope_type": "default", "rope_theta": None})
    assert model.model.rotary_emb is None
    report = convert_keeping_logits(model)
    assert report.skipped == {
        "rotary_emb": "no rotary module (none named rotary_emb or of a class ending in "
        "RotaryEmbedding)"
    }
    assert (len(report.norms), len(report.mlps), report.attentions) == (7, 2, [])


def test_gemma_norms_take_a_float32_scale_in_half_precision() -> None:
    """Gemma scales by 1 + w in float32; rounded to bf16 that scale would round too. In a bf16
    model the converted norms pass it as a float32 weight: each gives bitwise Gemma's own
    result, and the scale stays float32 through casts and follows ``load_state_dict``."""
    model = build("gemma").to(torch.bfloat16)
    randomize_norms(model, -0.5, 0.5)
    original = model.model.layers[0].input_layernorm
    ids, mask = prompt()
    x = torch.randn(3, SIZES["hidden_size"]).to(torch.bfloat16)
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits
        want = original(x)
        report = convert_hf_model(model)
        converted = model(ids, attention_mask=mask).logits
        norm = model.model.layers[0].input_layernorm
        assert isinstance(norm, IRRMSNorm)
        assert torch.equal(norm(x), want)
    layers = SIZES["num_hidden_layers"]
    assert len(report.norms) == 2 * layers + 1
    assert report.skipped == {}
    assert len(report.mlps) == len(report.attentions) == layers
    torch.testing.assert_close(converted, logits, atol=0.02, rtol=0.02)

    assert norm.scale is not None
    assert norm.scale.dtype == torch.float32
    model.to(torch.float16).to(torch.bfloat16)  # a round trip rounds no float32 scale
    assert norm.scale.dtype == torch.float32
    assert torch.equal(norm.scale, norm.weight.float() + 1)
    state = model.state_dict()
    state["model.layers.0.input_layernorm.weight"] = torch.full_like(norm.weight, 0.25)
    model.load_state_dict(state)
    assert torch.equal(norm.scale, torch.full_like(norm.scale, 1.25))


def _gradients(model: Any, compiled: bool = False) -> dict[str, torch.Tensor]:
    """Every parameter's gradient after a backward pass of a weighted sum of the logits on
    `prompt()` (`weighted_sum`: no gradient is uniform); through `ir_stack.compile` with
    `compiled`."""
    ids, mask = prompt()
    call = ir_stack.compile(model) if compiled else model
    weighted_sum(call(ids, attention_mask=mask).logits).backward()
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    ("family", "compiled"),
    [
        *((f, False) for f in ["llama", "gemma3", "vaultgemma", "qwen3_5_moe", "falcon_h1"]),
        ("minimax_m3", False),
        ("gemma3", True),
    ],
)
def test_a_converted_model_fine_tunes_with_the_original_gradients(
    family: str, compiled: bool
) -> None:
    """Training through a converted model, eager or compiled with the IR passes, gives every
    parameter the original's gradient: the norms scaling by 1 + w (Gemma's, Qwen 3.5's)
    included, whose kept float32 sum had none, the joined gate and up rows (the gate's
    divided by Falcon-H1's gate multiplier) and the joined query, key and value rows."""
    torch._dynamo.reset()
    model = build(family)
    original = copy.deepcopy(model)
    with torch.no_grad():
        convert_hf_model(model)
    want, got = _gradients(original), _gradients(model, compiled)
    joined = {}
    for path, module in model.named_modules():
        if isinstance(module, IRGatedMLP):
            prefix = f"{path}." if path else ""
            gate, up, _ = (f"{prefix}{name}.weight" for name in module.names)
            joined[f"{prefix}gate_up.weight"] = torch.cat(
                [want.pop(gate) / module.gate_scale, want.pop(up)]
            )
        rows = getattr(getattr(module, "ir_attention_plan", None), "qkv_rows", None)
        if rows is not None:
            for kind in ("weight", "bias"):
                parts = [f"{path}.{name}.{kind}" for name in ("q_proj", "k_proj", "v_proj")]
                if parts[0] in want:
                    joined[f"{path}.qkv_proj.{kind}"] = torch.cat([want.pop(p) for p in parts])
    want |= joined
    assert set(got) == set(want)
    for name, grad in want.items():
        scale = grad.abs().max().clamp_min(1e-6)
        torch.testing.assert_close(got[name] / scale, grad / scale, atol=1e-4, rtol=0, msg=name)


def test_norm_and_activation_forms_are_found_by_running_them() -> None:
    """A Llama given Gemma's norm (1 + weight) and an exact GELU: each converted as it computes,
    and a norm of neither form left alone."""
    model = build("llama", hidden_act="gelu")
    gemma_norm = transformers.models.gemma.modeling_gemma.GemmaRMSNorm
    layer = model.model.layers[0]
    layer.input_layernorm = gemma_norm(SIZES["hidden_size"], eps=1e-6)
    with torch.no_grad():
        layer.input_layernorm.weight.uniform_(-0.5, 0.5)

    class ScaledRMSNorm(torch.nn.Module):  # x / rms * 2w: neither form
        def __init__(self, weight: torch.nn.Parameter) -> None:
            super().__init__()
            self.weight = weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return ops.rms_norm.native(x, 2 * self.weight, 1e-6)

    layer.post_attention_layernorm = ScaledRMSNorm(layer.post_attention_layernorm.weight)
    report = convert_keeping_logits(model)
    norm = model.model.layers[0].input_layernorm
    assert isinstance(norm, IRRMSNorm)
    assert norm.offset == 1.0
    assert "(1 + w)" in report.skipped["model.layers.0.post_attention_layernorm"]
    assert [m.activation for m in (model.model.layers[0].mlp, model.model.layers[1].mlp)] == [
        "gelu",
        "gelu",
    ]
    # the module keeps the original weight, so its state dict is the original's
    assert "model.layers.0.input_layernorm.weight" in model.state_dict()
    assert "model.layers.0.input_layernorm.scale" not in model.state_dict()


#: families whose state dict comes back within rounding: Falcon-H1's gate rows, divided
#: again by the gate multiplier folded into the joined matrix
ROUNDED_STATE_DICTS = {"falcon_h1"}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_converted_model_keeps_the_original_state_dict_and_loads_one(family: str) -> None:
    """The state dict after the conversion is the original's: the same keys in the same order
    and the same values (a joined MLP shows its matrix as the gate and up layers). A state dict
    of another model of the family, loaded strictly, gives the converted model that model's
    logits."""
    model = build(family)
    before = model.state_dict()
    before = {key: value.clone() for key, value in before.items()}
    convert_hf_model(model)
    after = model.state_dict()
    assert list(after) == list(before)
    exact = family not in ROUNDED_STATE_DICTS
    for key, value in before.items():
        torch.testing.assert_close(after[key], value, rtol=0 if exact else 1e-6, atol=0)
    other = build(family)
    with torch.no_grad():  # other weights, or the logits would match without any loading
        for param in other.parameters():
            param.add_(torch.randn_like(param), alpha=0.1)
    model.load_state_dict(other.state_dict())
    ids, mask = prompt()
    with torch.no_grad():
        want, got = (m(ids, attention_mask=mask).logits for m in (other, model))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["llama", "lfm3", "falcon_h1"])
def test_save_pretrained_writes_a_checkpoint_the_original_class_loads(
    family: str, tmp_path: Any
) -> None:
    """``save_pretrained`` of a converted model writes the original's checkpoint: the
    model's class loads it with no key missing or unexpected, and gives the logits the model
    gave before its conversion (LFM2's MLP layers are ``w1``, ``w3`` and ``w2``; Falcon-H1
    folds a gate multiplier into the joined rows)."""
    model = build(family)
    ids, mask = prompt()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
    convert_hf_model(model)
    model.save_pretrained(tmp_path)
    loaded, info = type(model).from_pretrained(tmp_path, output_loading_info=True)
    assert not any(info[kind] for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    with torch.no_grad():
        got = loaded.eval()(ids, attention_mask=mask).logits
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("family", ["llama", "gemma3", "qwen3_5_moe", "llama4", "phi3"])
def test_a_converted_model_pickles_whole(family: str) -> None:
    """``torch.save(model)`` of a converted model, then ``torch.load``, gives a model of the
    same logits: the converted forwards and hooks are functions of their modules, not
    lambdas or bound methods (Gemma 3's offset norms, Qwen 3.5's rope computed at each call
    and output gate, Llama 4's experts, Phi-3's joined MLP)."""
    model = build(family)
    convert_hf_model(model)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    ids, mask = prompt()
    with torch.no_grad():
        want, got = (m(ids, attention_mask=mask).logits for m in (model, loaded))
    assert torch.equal(got, want)


class _PlanReads:
    """An attention plan that records the fields read from it."""

    def __init__(self, plan: Any) -> None:
        self.plan = plan
        self.read: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        self.read.add(name)
        return getattr(self.plan, name)


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3", "llama4", "gpt_oss", "qwen3_5"])
def test_a_converted_attention_reads_only_the_plan_fields_that_are_set(family: str) -> None:
    """Under Dynamo every field a forward reads is a guard checked at each call of each layer,
    so the converted forward reads a plan's optional fields only where `features` lists them:
    the fields it reads are `neox`, `rotates`, `features` and those set (a plain Llama plan's
    are the rows of its joined projection alone; Qwen3's also its head norms; Gemma 3's its
    sliding window's keyword; Llama 4's, its norms and query scale; GPT-OSS's, its sinks; Qwen
    3.5's, its output gate)."""
    model = build(family)
    convert_hf_model(model)
    ids, mask = prompt()
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
    attentions = [m for m in model.modules() if hasattr(m, "ir_attention_plan")]
    assert attentions
    for attention in attentions:
        attention.ir_attention_plan = _PlanReads(attention.ir_attention_plan)
    with torch.no_grad():
        got = model(ids, attention_mask=mask).logits
    assert torch.equal(got, want)
    for attention in attentions:
        reads = attention.ir_attention_plan
        optional_read = reads.read & hf_attention.OPTIONAL_FEATURES
        assert optional_read <= set(reads.plan.features), (family, optional_read)
        assert reads.read - hf_attention.OPTIONAL_FEATURES <= {
            "features",
            "neox",
            "rotates",
            "norms_per_head",
            "output_gate_function",
        }
    if family == "llama":
        assert all(a.ir_attention_plan.plan.features == ("qkv_rows",) for a in attentions)


def _attributes_found_lacking(model: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(module class, name) of each attribute that a forward of `model` found lacking through
    ``nn.Module.__getattr__``, in order."""
    ids, mask = prompt()
    lacked: list[tuple[str, str]] = []
    module_getattr = torch.nn.Module.__getattr__

    def recording_getattr(module: torch.nn.Module, name: str) -> Any:
        try:
            return module_getattr(module, name)
        except AttributeError:
            lacked.append((type(module).__name__, name))
            raise

    with monkeypatch.context() as patched, torch.no_grad():
        patched.setattr(torch.nn.Module, "__getattr__", recording_getattr)
        model(ids, attention_mask=mask)
    return lacked


@pytest.mark.parametrize("family", FAMILIES)
def test_a_converted_forward_asks_no_module_for_an_attribute_it_lacks(
    family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attribute a module lacks is found lacking by a raise inside ``nn.Module.__getattr__``;
    read so by a forward under Dynamo, it becomes a guard that raises again at every call (a
    16-layer Llama's guard check took 133-136 µs with one such read a layer, 111-116 without,
    as the original model: `hf-guards-cpu.md` in git history). The converted forwards look
    their optional parts up in ``_modules`` instead (Phi-3's joined projection, LFM2's and
    Phi-2's output projections), so they ask for nothing the original's forward does not
    (transformers' own: the decoder's slice of its layers, a new ``ModuleList``; Llama 4's
    attention asks for its ``qk_norm``, Phi-3.5-MoE's rotary module for its long table)."""
    model = build(family)
    original = Counter(_attributes_found_lacking(model, monkeypatch))
    convert_hf_model(model)
    assert Counter(_attributes_found_lacking(model, monkeypatch)) - original == Counter()


def test_a_plans_features_are_its_fields_set_apart_from_their_defaults() -> None:
    plain = hf_attention.AttentionPlan(neox=True)
    assert plain.features == ()
    scaled = dataclasses.replace(plain, key_scale=0.5, attention_kwargs={"sliding_window": 4})
    assert scaled.features == ("key_scale", "attention_kwargs")
    assert dataclasses.replace(scaled, key_scale=1.0).features == ("attention_kwargs",)
    assert scaled == dataclasses.replace(scaled)  # `features` takes no part in equality


def test_a_converted_model_generates_compiled_with_a_static_cache() -> None:
    """transformers' fast generation, a static KV cache and the forward compiled whole
    (``fullgraph=True``: no graph break in the converted forwards), gives the greedy tokens the
    original gives."""
    model = build("llama")
    ids, mask = prompt()
    options = {"max_new_tokens": 6, "do_sample": False, "cache_implementation": "static"}
    with torch.no_grad():
        tokens = model.generate(ids, attention_mask=mask, **options)
    convert_hf_model(model)
    torch._dynamo.reset()
    model.forward = torch.compile(model.forward, fullgraph=True, dynamic=False)
    try:
        with torch.no_grad():
            converted_tokens = model.generate(ids, attention_mask=mask, **options)
    finally:
        torch._dynamo.reset()
    assert torch.equal(converted_tokens, tokens)


def test_a_gated_mlp_joins_weights_and_biases_in_their_dtype() -> None:
    """The joined layer holds the gate's rows (times `gate_scale`) over the up's, weights and
    biases, in their dtype and gradient flag, and computes the MLP."""
    torch.manual_seed(0)
    gate, up = (torch.nn.Linear(8, 6, dtype=torch.float16) for _ in range(2))
    down = torch.nn.Linear(6, 8, dtype=torch.float16)
    gate.requires_grad_(False)
    mlp = IRGatedMLP(gate, up, down, gate_scale=0.5)
    assert mlp.gate_up.weight.dtype == mlp.gate_up.bias.dtype == torch.float16
    assert not mlp.gate_up.weight.requires_grad
    assert torch.equal(mlp.gate_up.weight, torch.cat([gate.weight * 0.5, up.weight]))
    assert torch.equal(mlp.gate_up.bias, torch.cat([gate.bias * 0.5, up.bias]))
    x = torch.randn(3, 8, dtype=torch.float16)
    with torch.no_grad():
        want = down(torch.nn.functional.silu(gate(x) * 0.5) * up(x))
        torch.testing.assert_close(mlp(x), want)


def test_a_gated_mlp_refuses_names_it_cannot_keep_apart() -> None:
    layer = torch.nn.Linear(4, 4)
    with pytest.raises(ValueError, match="argument 'names' got \\('a', 'a', 'b'\\)"):
        IRGatedMLP(layer, layer, layer, names=("a", "a", "b"))
    with pytest.raises(ValueError, match="other than 'gate_up'"):
        IRGatedMLP(layer, layer, layer, names=("gate_up", "b", "c"))


def test_a_state_dict_of_the_joined_layer_still_loads() -> None:
    """A state dict saved before the joined MLP showed the original layers (``gate_up``
    entries) loads as it is."""
    model = build("llama")
    convert_hf_model(model)
    mlp = model.model.layers[0].mlp
    joined = {
        "gate_up.weight": mlp.gate_up.weight.detach() + 1,
        "down_proj.weight": mlp.down_proj.weight,
    }
    mlp.load_state_dict(joined)
    assert torch.equal(mlp.gate_up.weight, joined["gate_up.weight"])


_HEAD = SIZES["hidden_size"] // SIZES["num_attention_heads"]


@pytest.mark.parametrize(
    ("family", "rope"),
    [
        # Phi-3's long rope (Phi-3 128k, Phi-3.5, Phi-4 mini): other factors past 32 positions
        (
            "phi3",
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * (_HEAD // 4),
                "long_factor": [2.0] * (_HEAD // 4),
                "original_max_position_embeddings": 32,
                "partial_rotary_factor": 0.5,
            },
        ),
        # Phi-4-multimodal's decoder: Phi-3's, its long rope as the released model's
        (
            "phi4_multimodal",
            {
                "rope_type": "longrope",
                "short_factor": [1.0] * (_HEAD // 4),
                "long_factor": [2.0] * (_HEAD // 4),
                "original_max_position_embeddings": 32,
                "partial_rotary_factor": 0.5,
            },
        ),
        # dynamic NTK scaling: a larger base past the model's 64 positions
        ("llama", {"rope_type": "dynamic", "factor": 8.0, "rope_theta": 1e4}),
    ],
)
def test_a_rope_changing_with_the_length_is_computed_at_each_call(
    family: str, rope: dict[str, Any]
) -> None:
    """A rope whose frequencies change with the sequence's length (`DYNAMIC_ROPE_TYPES`) has
    no table ahead: the model's own rotary module computes each call's angles, which the
    converted layers take as a table of a row a token. The logits stay at a long prompt past
    the switch (first: the module's state is the original's, since the probes, which reached
    position 999, ran on a copy), a short one and the long one again, and so do greedy tokens
    generated across Phi-3's switch. (The
    table of the static ropes stops at `max_positions`; these have none.)"""
    # Phi-3's config (Phi-4-multimodal's too) sets the original length over its rope's
    options = {"original_max_position_embeddings": 32} if family != "llama" else {}
    model = build(family, rope_parameters=rope, **options)
    ids = torch.randint(0, SIZES["vocab_size"], (2, 80), generator=torch.Generator().manual_seed(1))
    short, long = ids[:, :9], ids
    with torch.no_grad():
        want = [model(ids).logits for ids in (long, short, long)]
        tokens = model.generate(short, max_new_tokens=30, do_sample=False, pad_token_id=0)
        # the probes reach the last of max_positions, far past the prompts
        report = convert_hf_model(model, max_positions=1000)
        got = [model(ids).logits for ids in (long, short, long)]
        converted_tokens = model.generate(short, max_new_tokens=30, do_sample=False, pad_token_id=0)
    assert report.skipped == TOWERS_STAY.get(family, {})
    assert len(report.attentions) == SIZES["num_hidden_layers"]
    assert isinstance(model.model.rotary_emb, IRRotaryCache)
    assert model.model.rotary_emb.per_token is not None
    # past the switch, the same first tokens rotate otherwise: their logits move by more than
    # ten times the tolerance below (the small random model's attention weighs the rope little)
    assert (want[0][:, :9] - want[1]).abs().max() > 1e-4
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    assert torch.equal(converted_tokens, tokens)


#: Qwen4-Exp: a Gated DeltaNet layer, then attention whose indexer picks blocks of keys;
#: residual streams mixed by hyper-connections; routed experts and a gated shared expert
_QWEN4_EXP: dict[str, Any] = {
    **_TOKENS,
    **_QWEN_EXPERTS,
    "head_dim": 16,
    # (transformers 5.24 names the second type `indexed_attention`; 5.17 only this)
    "layer_types": ["linear_attention", "full_attention"],
    "indexer_n_heads": 2,
    "indexer_kv_heads": 1,
    "indexer_head_dim": 16,
    "indexer_budget": 8,
    "indexer_compress_ratio": 2,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "hc_lowrank": 8,
}


def test_qwen4_exp_converts_its_experts_and_leaves_its_streams_and_sparse_attention() -> None:
    """Qwen4-Exp's experts gate on the op and its shared experts and the attention's norms
    convert; the hyper-connections' norms (over each stream, a weight of its own for each)
    stay, as does the attention, whose indexer picks keys by the prompt's length; logits and
    greedy tokens are unchanged."""
    if not hasattr(transformers, "Qwen4ExpTextConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no Qwen4ExpTextConfig")
    torch.manual_seed(0)
    config = transformers.Qwen4ExpTextConfig(**{**SIZES, **_QWEN4_EXP})
    model = transformers.Qwen4ExpForCausalLM(config).eval()
    ids, mask = prompt()
    with torch.no_grad():
        tokens = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        report = convert_keeping_logits(model)
        converted = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    assert torch.equal(converted, tokens)
    layers = range(SIZES["num_hidden_layers"])
    assert report.experts == [f"model.layers.{i}.mlp.experts" for i in layers]
    assert report.mlps == [f"model.layers.{i}.mlp.shared_expert" for i in layers]
    assert "model.layers.1.self_attn.q_norm" in report.norms
    streams = [
        *(
            f"model.layers.{i}.{part}_hyper_connection.hc_norm"
            for i in layers
            for part in ("attn", "mlp")
        ),
        "model.hyper_connection_mixer.hc_norm",
    ]
    assert set(report.skipped) == {*streams, "model.rotary_emb"}
    assert "an indexer of its own" in report.skipped["model.rotary_emb"]
    assert report.attentions == []


def test_experts_gating_inline_or_in_their_own_way_are_left_alone() -> None:
    """transformers' ``"eager"`` experts loop gates inline, not through ``_apply_gate``; and a
    model's own ``_apply_gate`` (GPT-OSS clamps its gate) is not ``silu_and_mul``. Either
    leaves the experts as they are, reported, and the outputs unchanged."""
    model = build("qwen3_moe")
    model.set_experts_implementation("eager")
    report = convert_keeping_logits(model)
    assert report.experts == []
    why = report.skipped["model.layers.0.mlp.experts"]
    assert "experts implementation 'eager' gates inline" in why

    model = build("mixtral")
    experts = model.model.layers[1].mlp.experts

    class ClampedExperts(type(experts)):  # type: ignore[misc]
        def _apply_gate(self, gate_up: torch.Tensor) -> torch.Tensor:
            gate, up = gate_up.clamp(max=1.0).chunk(2, dim=-1)
            return self.act_fn(gate) * up

    experts.__class__ = ClampedExperts
    report = convert_hf_model(model)
    assert report.experts == ["model.layers.0.mlp.experts"]
    assert "gate in their own way" in report.skipped["model.layers.1.mlp.experts"]


@pytest.mark.parametrize("limit", [None, 7.0, 1000.0])
def test_experts_with_their_own_gate_hook_convert_only_where_it_computes_the_default(
    limit: float | None,
) -> None:
    """A model's own ``_apply_gate`` (Ling 2.5's, from transformers 5.25: it clips the gate and
    up values where its config sets a per-layer limit) converts where a probe finds it computing
    ``act(gate) * up``, and stays where it clips, even at a limit far past a probe of standard
    deviation 3. The logits stay the model's either way."""
    model = build("mixtral")
    experts = model.model.layers[1].mlp.experts

    class OwnHookExperts(type(experts)):  # type: ignore[misc]
        def _apply_gate(self, gate_up: torch.Tensor) -> torch.Tensor:
            gate, up = gate_up.chunk(2, dim=-1)
            gate = self.act_fn(gate)
            if limit is not None:
                gate = gate.clamp(max=limit)
                up = up.clamp(min=-limit, max=limit)
            return gate * up

    experts.__class__ = OwnHookExperts
    report = convert_keeping_logits(model)
    if limit is None:
        assert report.experts == ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"]
    else:
        assert report.experts == ["model.layers.0.mlp.experts"]
        assert "gate in their own way" in report.skipped["model.layers.1.mlp.experts"]


def test_llama4_experts_gate_on_the_op_where_their_forward_is_found_to_do_so() -> None:
    """Llama 4's routed experts gate inline in their own forward (no ``_apply_gate`` hook):
    that forward becomes one gating with the IR op, with the same weights (the same
    parameters, under the same names). Experts whose forward computes anything else (here the
    activation on the up half) stay, reported."""
    model = build("llama4")
    before = {n: p for n, p in model.named_parameters() if ".experts." in n}
    report = convert_keeping_logits(model)
    assert report.experts == [f"model.layers.{i}.feed_forward.experts" for i in range(2)]
    after = {n: p for n, p in model.named_parameters() if ".experts." in n}
    assert after.keys() == before.keys()
    assert all(after[n] is p for n, p in before.items())

    model = build("llama4")
    experts = model.model.layers[1].feed_forward.experts

    class UpGatedExperts(type(experts)):  # type: ignore[misc]
        def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
            rows = hidden_states.view(self.num_experts, -1, self.hidden_size)
            gate, up = torch.bmm(rows, self.gate_up_proj).chunk(2, dim=-1)
            return torch.bmm(gate * self.act_fn(up), self.down_proj).view(-1, self.hidden_size)

    experts.__class__ = UpGatedExperts
    report = convert_keeping_logits(model)
    assert report.experts == ["model.layers.0.feed_forward.experts"]
    assert "gate in their own way" in report.skipped["model.layers.1.feed_forward.experts"]


def test_llama4_plans_its_norms_without_weight_and_its_nope_layers_scale() -> None:
    """Llama 4's rotating layers norm the rotated queries and keys with one norm without a
    weight (an `IRRMSNorm` of none); its NoPE layers scale their queries by their position in
    the KV cache, counted from 1, not by the caller's positions: a batch with left padding,
    whose caller numbers each row's tokens from its first real one, keeps its logits."""
    model = build("llama4")
    ids, mask = prompt()
    mask[0, :4] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(ids, attention_mask=mask, position_ids=positions).logits
        convert_hf_model(model)
        converted = model(ids, attention_mask=mask, position_ids=positions).logits
    torch.testing.assert_close(converted, logits, atol=1e-5, rtol=1e-5)
    rotating, nope = (layer.self_attn for layer in model.model.layers)
    assert isinstance(rotating.qk_norm, IRRMSNorm)
    assert rotating.qk_norm.weight is None
    assert rotating.ir_attention_plan.head_norms == ("qk_norm", "qk_norm")
    assert rotating.ir_attention_plan.norms_after_rotation
    assert rotating.ir_attention_plan.query_scale is None
    assert not nope.ir_attention_plan.rotates
    assert nope.ir_attention_plan.query_scale == QueryScale(
        0.5, 3, offset=1, from_cache=True, in_float=True
    )


def test_gemma4_plans_value_norms_keys_as_values_and_the_keys_and_values_it_shares() -> None:
    """Gemma 4's layers norm their values (a norm without a weight); its full-attention layer
    attends its key projection as values (no ``v_proj``), with heads twice as wide and a rope
    on a quarter of each; the last layer of each type stores its keys and values for its
    caller (``shared_kv_states``): the converted model returns the same ones."""
    model = build("gemma4")
    ids, mask = prompt()

    def shared_keys_and_values() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        with torch.no_grad():
            out = model.model(ids, attention_mask=mask, return_shared_kv_states=True)
        return dict(out.shared_kv_states)

    before = shared_keys_and_values()
    report = convert_keeping_logits(model)
    assert len(report.attentions) == 2
    assert not report.skipped
    after = shared_keys_and_values()
    assert sorted(after) == sorted(before) == ["full_attention", "sliding_attention"]
    for layer_type, tensors in before.items():
        for got, want in zip(after[layer_type], tensors, strict=True):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    sliding, full = (layer.self_attn for layer in model.model.layers)
    assert full.v_proj is None
    assert full.head_dim == 2 * sliding.head_dim
    for attention in (sliding, full):
        plan = attention.ir_attention_plan
        assert plan.value_norm == "v_norm"
        assert plan.stores_shared_kv
        assert isinstance(attention.v_norm, IRRMSNorm)
        assert attention.v_norm.weight is None


def test_gemma3n_keeps_its_sparse_mlps_and_converts_its_kv_shared_layers() -> None:
    """Gemma 3n (text) as its released models are built: the first layers' MLPs keep only the
    top of each gate (activation sparsity), which the op does not do: they stay, reported;
    the last layers reuse earlier layers' keys and values, and convert as Gemma 4's do."""
    model = build(
        "gemma3n",
        num_hidden_layers=4,
        layer_types=["sliding_attention", "full_attention"] * 2,
        num_kv_shared_layers=2,
        activation_sparsity_pattern=[0.95, 0.95, 0.0, 0.0],
    )
    report = convert_keeping_logits(model)
    why = "its forward computes other than down(act(gate(x)) * up(x))"
    assert report.skipped == {f"model.layers.{i}.mlp": why for i in (0, 1)}
    assert report.mlps == ["model.layers.2.mlp", "model.layers.3.mlp"]
    assert len(report.attentions) == 4
    assert model.model.layers[3].self_attn.ir_attention_plan.reuses_shared_kv


@pytest.mark.parametrize("family", ["gemma4", "gemma4_unified"])
def test_gemma4_layers_reusing_keys_and_values_convert(family: str) -> None:
    """Gemma 4's smaller models reuse the keys and values an earlier layer of the same type
    stored (KV sharing) in their last layers, which project only their queries, and slice the
    position embeddings to the tokens whose logits are kept before those layers: the rotary
    module's pair keeps its table whole under that slice. Logits (all, and the last token's
    alone) and greedy tokens of a left-padded batch stay. Gemma 4 Unified's text model too."""
    full = ["full_attention"] * SIZES["num_hidden_layers"]
    # with per-layer inputs, as those models have (transformers 5.24 needs them with sharing)
    model = build(family, num_kv_shared_layers=1, layer_types=full, hidden_size_per_layer_input=8)
    ids, mask = prompt()
    mask[0, :3] = 0
    with torch.no_grad():
        last = model(ids, attention_mask=mask, logits_to_keep=1).logits
        tokens = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    report = convert_keeping_logits(model)
    assert len(report.attentions) == 2
    assert not report.skipped
    assert model.model.rotary_emb.sliced_by_token
    with torch.no_grad():
        converted_last = model(ids, attention_mask=mask, logits_to_keep=1).logits
        converted_tokens = model.generate(
            ids, attention_mask=mask, max_new_tokens=6, do_sample=False
        )
    assert converted_last.shape[1] == 1
    torch.testing.assert_close(converted_last, last, atol=1e-5, rtol=1e-5)
    assert torch.equal(converted_tokens, tokens)
    storing, reusing = (layer.self_attn.ir_attention_plan for layer in model.model.layers)
    assert (storing.stores_shared_kv, storing.reuses_shared_kv) == (True, False)
    assert (reusing.stores_shared_kv, reusing.reuses_shared_kv) == (False, True)
    assert reusing.head_norms == ("q_norm", "k_norm")
    assert reusing.value_norm is None


def test_qwen3_5_gates_its_attention_output_and_rotates_by_three_positions_a_token() -> None:
    """Qwen 3.5's attention layers project each head's query and then its gate, and multiply
    the attention's output by the gate's sigmoid; its rope takes a time, a height and a width
    position a token and mixes their frequencies, so the table is computed at each call from
    the model's own rotary module, a row a token. Positions of an image grid (the height and
    width differing from the time) change the logits, and the converted model gives the
    original's; so do text positions."""
    model = build("qwen3_5")
    ids, _ = prompt()
    grid = torch.arange(ids.shape[1]).expand(4, *ids.shape).clone()
    grid[2, :, 3:6] = torch.tensor([0, 0, 1])
    grid[3, :, 3:6] = torch.tensor([0, 1, 0])
    with torch.no_grad():
        text = model(ids).logits
        image = model(ids, position_ids=grid).logits
        convert_hf_model(model)
        converted_text = model(ids).logits
        converted_image = model(ids, position_ids=grid).logits
    assert not torch.allclose(image, text, atol=1e-3)
    torch.testing.assert_close(converted_image, image, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(converted_text, text, atol=1e-5, rtol=1e-5)
    rotary = model.model.rotary_emb
    assert isinstance(rotary, IRRotaryCache)
    assert rotary.per_token is not None
    plan = model.model.layers[1].self_attn.ir_attention_plan
    assert plan.gates_output
    assert plan.head_norms == ("q_norm", "k_norm")


def test_the_rotation_form_is_found_by_running_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """GLM rotates pairs and Llama halves: each converted attention rotates as its model does.
    A rotation of neither form (here Llama's with the sines negated) leaves the attention and
    the rotary module alone, reported."""
    forms = {}
    for family in ("glm", "llama", "llama4"):
        model = build(family)
        convert_hf_model(model)
        forms[family] = {layer.self_attn.ir_attention_plan.neox for layer in model.model.layers}
    # Llama 4 multiplies pairs by complex numbers: the interleaved form
    assert forms == {"glm": {False}, "llama": {True}, "llama4": {False}}

    model = build("llama")
    module = sys.modules[type(model.model.layers[0].self_attn).__module__]
    rotate = module.apply_rotary_pos_emb

    def backwards(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Any:
        return rotate(q, k, cos, -sin)

    monkeypatch.setattr(module, "apply_rotary_pos_emb", backwards)
    report = convert_keeping_logits(model)
    assert (
        "rotates in neither the op's neox nor its interleaved form"
        in report.skipped["model.rotary_emb"]
    )
    assert report.attentions == []


def test_hunyuan_ntk_alpha_rope_converts_fixed_or_dynamic() -> None:
    """Hunyuan's checkpoints name their rope "dynamic" with an ``alpha``, which stretches the
    base once. transformers 5.24 gives that rope its own type, ``ntk_alpha``, whose
    frequencies are fixed: it converts to a table. Earlier versions keep the type "dynamic",
    whose module recomputes the frequencies past its longest position: it converts too, the
    module computing each call's angles."""
    rope = {"rope_type": "dynamic", "alpha": 1000.0, "factor": 1.0, "rope_theta": 1e4}
    model = build("hunyuan_v1_dense", rope_parameters=rope)
    fixed = model.model.rotary_emb.rope_type == "ntk_alpha"
    report = convert_keeping_logits(model)
    assert report.skipped == {}
    assert len(report.attentions) == SIZES["num_hidden_layers"]
    assert (model.model.rotary_emb.per_token is None) == fixed


def test_an_attention_doing_more_than_its_plan_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forward that scales its rotated queries (Ministral 3 does, by position) does what no
    plan describes. Each plan is checked by running both forwards on a probe: the converted
    queries differ from those the original gives its attention function, so the attention
    and the rotary module are left alone, reported, and the outputs unchanged."""
    model = build("llama")
    module = sys.modules[type(model.model.layers[0].self_attn).__module__]
    rotate = module.apply_rotary_pos_emb

    def scaled(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> Any:
        q, k = rotate(q, k, cos, sin)
        # the model's queries have more heads than its keys; the rotation-form probe's do not
        return (1.5 * q if q.shape[1] != k.shape[1] else q), k

    monkeypatch.setattr(module, "apply_rotary_pos_emb", scaled)
    report = convert_keeping_logits(model)
    why = "does not give its attention function the original's inputs in model.layers.0.self_attn"
    assert why in report.skipped["model.rotary_emb"]
    assert report.attentions == []
    assert len(report.mlps) == SIZES["num_hidden_layers"]


def test_an_attention_doing_more_after_its_attention_function_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forward that gates what its attention function returns by something the plan does
    not know (here the projected output by its own sigmoid) gives that function the plan's
    inputs, but the converted forward would drop the gate. The probe runs
    both forwards to the end, the attention function answering the same probe to each, and
    compares what they return: the attention stays, reported."""
    model = build("llama")
    attention_class = type(model.model.layers[0].self_attn)
    forward = attention_class.forward

    def gated(self: Any, *args: Any, **kwargs: Any) -> Any:
        out, weights = forward(self, *args, **kwargs)
        return out * torch.sigmoid(out), weights

    monkeypatch.setattr(attention_class, "forward", gated)
    report = convert_keeping_logits(model)
    why = "does not make of its attention function's output what the original does"
    assert why in report.skipped["model.rotary_emb"]
    assert report.attentions == []


def test_an_output_gate_passes_through_the_function_its_forward_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The function that makes a gate projection a factor is found by running the layer:
    LFM3's sigmoid, Laguna's softplus (in float32). A gate through any other function stays,
    reported."""
    lfm3, laguna = build("lfm3"), build("laguna")
    for model in (lfm3, laguna):
        convert_keeping_logits(model)
    plans = [m.model.layers[1].self_attn.ir_attention_plan for m in (lfm3, laguna)]
    assert [(p.output_gate, p.output_gate_function) for p in plans] == [
        ("g_proj", "sigmoid"),
        ("g_proj", "softplus"),
    ]

    class TanhGate:  # the functional namespace of Laguna's module, its softplus a tanh
        softplus = staticmethod(torch.tanh)

        def __getattr__(self, name: str) -> Any:
            return getattr(torch.nn.functional, name)

    model = build("laguna")
    monkeypatch.setattr(sys.modules[type(model).__module__], "F", TanhGate())
    report = convert_keeping_logits(model)
    why = "does not make of its attention function's output what the original does"
    assert why in report.skipped["model.rotary_emb"]
    assert report.attentions == []


def test_granite_swa_hands_each_layer_the_rope_of_its_base() -> None:
    """Granite SWA: a rotary module a rope base, each handed to the layers of that base, and
    the model's own, which its forward does not use; a layer of base 0 is handed none
    (NoPE). Each module becomes a cache with its own frequencies; the NoPE layer rotates
    nothing."""
    model = build(
        "granite_swa",
        num_hidden_layers=3,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"],
        layer_rope_theta=[1e4, 5e5, 0],
    )
    report = convert_keeping_logits(model)
    assert report.skipped == {}
    assert len(report.attentions) == 3
    ropes = [model.model.rotary_emb, *model.model.rotary_embs]
    assert all(isinstance(rope, IRRotaryCache) for rope in ropes)
    low, high = (rope.cache_for() for rope in model.model.rotary_embs)
    assert not torch.equal(low, high)
    ir_dispatch.reset_stats()
    ir_dispatch.collect_stats(True)
    with torch.no_grad():
        model(*prompt())
    ir_dispatch.collect_stats(False)
    calls = {op: n for (op, _), n in ir_dispatch.stats().items()}
    assert calls["rotary_embedding"] == 2


def test_an_attention_giving_a_mask_of_its_own_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forward that makes a mask of its own (Doge's, from its values: dynamic mask
    attention) gives the attention function what the converted forward would not; the probe
    compares the masks too, and the attention stays, reported."""
    model = build("llama")
    attention_class = type(model.model.layers[0].self_attn)
    forward = attention_class.forward

    def own_mask(self: Any, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("attention_mask") is None:
            batch, tokens = hidden_states.shape[:2]
            kwargs["attention_mask"] = hidden_states.new_zeros(batch, 1, tokens, tokens)
        return forward(self, hidden_states, *args, **kwargs)

    monkeypatch.setattr(attention_class, "forward", own_mask)
    report = convert_keeping_logits(model)
    why = "the converted forward gives its attention function another mask"
    assert report.skipped == {"model.rotary_emb": f"{why} in model.layers.0.self_attn"}
    assert report.attentions == []


def test_an_attention_giving_other_arguments_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A forward that gives its attention function another scaling than its layer's `scaling`
    attribute, which the converted forward passes: the probe compares every keyword argument
    the two forwards give, and the attention stays, reported."""
    model = build("llama")
    attention_class = type(model.model.layers[0].self_attn)
    forward = attention_class.forward

    def rescaled(self: Any, *args: Any, **kwargs: Any) -> Any:
        scaling = self.scaling
        self.scaling = 2 * scaling
        try:
            return forward(self, *args, **kwargs)
        finally:
            self.scaling = scaling

    monkeypatch.setattr(attention_class, "forward", rescaled)
    report = convert_keeping_logits(model)
    why = "gives its attention function other keyword arguments in model.layers.0.self_attn"
    assert why in report.skipped["model.rotary_emb"]
    assert report.attentions == []


def test_an_attention_taking_parameters_the_converted_forward_would_drop_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HRM-Text's attention takes a ``cycle_offset`` that moves its KV-cache slot: a probe
    without a cache cannot see what it does, and the converted forward would drop it. A
    forward naming a parameter the converted one does not handle stays, reported."""
    model = build("llama")
    attention_class = type(model.model.layers[0].self_attn)
    forward = attention_class.forward

    def offset_slot(
        self: Any, hidden_states: Any, position_embeddings: Any, cycle_offset: int = 0, **kw: Any
    ) -> Any:
        return forward(self, hidden_states, position_embeddings, **kw)

    monkeypatch.setattr(attention_class, "forward", offset_slot)
    report = convert_keeping_logits(model)
    why = "its forward takes 'cycle_offset', which a converted forward would drop"
    assert why in report.skipped["model.rotary_emb"]
    assert report.attentions == []
    assert len(report.mlps) == SIZES["num_hidden_layers"]


def test_a_layer_handed_no_position_embeddings_rotates_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Lara's model hands its full-attention layers None for the position embeddings, and
    their forward then rotates nothing: the converted forward does the same (the probe runs
    both forwards so). Here the second layer is handed None."""
    model = build("llama")
    decoder_class = type(model.model.layers[0])
    attention_class = type(model.model.layers[0].self_attn)
    layer_forward, attention_forward = decoder_class.forward, attention_class.forward

    def none_for_the_second(self: Any, *args: Any, position_embeddings: Any, **kw: Any) -> Any:
        if self.self_attn.layer_idx == 1:
            position_embeddings = None
        return layer_forward(self, *args, position_embeddings=position_embeddings, **kw)

    def rotating_when_given(
        self: Any, hidden_states: Any, position_embeddings: Any = None, *args: Any, **kw: Any
    ) -> Any:
        if position_embeddings is None:  # a rotation by angles of zero
            shape = (*hidden_states.shape[:-1], self.head_dim)
            position_embeddings = hidden_states.new_ones(shape), hidden_states.new_zeros(shape)
        return attention_forward(self, hidden_states, position_embeddings, *args, **kw)

    monkeypatch.setattr(decoder_class, "forward", none_for_the_second)
    monkeypatch.setattr(attention_class, "forward", rotating_when_given)
    report = convert_keeping_logits(model)
    assert len(report.attentions) == SIZES["num_hidden_layers"]
    ir_dispatch.reset_stats()
    ir_dispatch.collect_stats(True)
    try:
        with torch.no_grad():
            model(*prompt())
    finally:
        ir_dispatch.collect_stats(False)
    calls = {op: n for (op, _), n in ir_dispatch.stats().items()}
    assert calls["rotary_embedding"] == 1


def test_a_sparse_attention_picking_keys_with_an_indexer_is_left_alone() -> None:
    """MiniMax M3's sparse layers pick blocks of keys for each query with an indexer of their
    own, by the prompt's length: every attention layer stays (they share the rotary module),
    reported, and the logits with them."""
    sparse = {
        "layer_types": ["minimax_m3_sparse", "full_attention"],
        "index_block_size": 2,
        "index_topk_blocks": 1,
        "index_local_blocks": 1,
        "index_n_heads": 2,
        "index_head_dim": 16,
    }
    model = build("minimax_m3", **sparse)
    report = convert_keeping_logits(model)
    why = "picks the keys each query attends with an indexer of its own (sparse attention)"
    assert why in report.skipped["model.rotary_emb"]
    assert report.attentions == []


def test_an_attention_failing_on_the_probe_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer whose own forward cannot run on the probe is not converted: the report says why,
    and the conversion goes on with the other parts."""
    model = build("llama")
    attention_class = type(model.model.layers[0].self_attn)

    def needs_more(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("needs an argument the probe does not pass")

    monkeypatch.setattr(attention_class, "forward", needs_more)
    report = convert_hf_model(model)
    why = report.skipped["model.rotary_emb"]
    assert "failed on a probe (RuntimeError: needs an argument" in why
    assert report.attentions == []
    assert len(report.mlps) == SIZES["num_hidden_layers"]


def test_a_rotation_failing_on_the_probe_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rotary module (or rotation) that cannot run on the rotation probe, as transformers
    5.17's Qwen 3.5 module did on positions of one grid, leaves the attention and the rotary
    module alone, reported, rather than failing the conversion."""
    model = build("llama")
    rotary_class = type(model.model.rotary_emb)

    def one_form_only(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise IndexError("positions of another form")

    monkeypatch.setattr(rotary_class, "forward", one_form_only)
    report = convert_hf_model(model)
    assert report.skipped == {
        "model.rotary_emb": "its rotation failed on a probe (IndexError: positions of another form)"
    }
    assert report.attentions == []
    assert len(report.mlps) == SIZES["num_hidden_layers"]


def test_forwards_bound_on_instances_are_replaced() -> None:
    """A model whose norms and MLPs carry a forward of their own instance (as Liger-Kernel's
    patches of a loaded model bind them) converts like the original: the converted model runs
    the IR ops, not the instances' forwards, and the logits stay."""
    calls: Counter[str] = Counter()

    def norm_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        calls["norm"] += 1
        variance = x.float().pow(2).mean(-1, keepdim=True)
        normed = x.float() * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * normed.to(x.dtype)

    def mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
        calls["mlp"] += 1
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    bound_forwards = {"LlamaRMSNorm": norm_forward, "LlamaMLP": mlp_forward}
    model = build("llama")
    for module in model.modules():
        forward = bound_forwards.get(type(module).__name__)
        if forward is not None:
            module.__dict__["forward"] = forward.__get__(module, type(module))
    ids, mask = prompt()
    with torch.no_grad():
        model(ids, attention_mask=mask)
    layers = SIZES["num_hidden_layers"]
    assert calls == {"norm": 2 * layers + 1, "mlp": layers}
    report = convert_keeping_logits(model)
    assert (len(report.norms), len(report.mlps)) == (2 * layers + 1, layers)
    calls.clear()  # the conversion's probes ran them
    with torch.no_grad():
        model(ids, attention_mask=mask)
    assert not calls


def test_max_positions_sizes_the_rotary_table(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``max_positions`` sets the rotary table's rows (the prompt's 9 positions fit in 16); a
    bad value is refused, naming the argument; a table over 1 GiB is reported with the way to
    shrink it (its size computed before it is built)."""
    model = build("llama")
    ids, mask = prompt()
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits
        convert_hf_model(model, max_positions=16)
        converted = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(converted, logits, atol=1e-5, rtol=1e-5)
    assert model.model.rotary_emb.cache_for().shape == (16, SIZES["hidden_size"] // 4)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=f"'max_positions' got {bad!r}; expected a positive"):
            convert_hf_model(build("llama"), max_positions=bad)  # type: ignore[arg-type]

    monkeypatch.setattr(hf_rotary, "LARGE_TABLE_BYTES", 16 * 16 * 4 - 1)  # this table, less a byte
    with caplog.at_level("WARNING", logger="ir_stack"):
        convert_hf_model(build("llama"), max_positions=16)
    assert "rotary table of 16 positions" in caplog.text
    assert "max_positions=" in caplog.text


@pytest.mark.parametrize("family", ["llama", "gemma3", "ministral3", "llama4", "granite_swa"])
def test_a_model_on_several_devices_hands_its_layers_the_rows_of_their_tokens(
    family: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A model whose weights span devices (a ``device_map``) gets rotary caches that hand each
    layer the table's rows of the call's tokens: accelerate moves a layer's arguments to its
    device, so the whole table would be copied to every layer on another device at every call.
    The logits and greedy tokens stay (Gemma 3's rope a layer type, Ministral 3's queries
    scaled at the caller's positions, Llama 4's at positions counted in the cache, Granite
    SWA's rope a base). One CPU stands in for the devices here; the GPU tests split a model
    over two GPUs."""
    devices = [torch.device("cuda", 0), torch.device("cuda", 1)]
    monkeypatch.setattr(hf_rotary, "model_devices", lambda model: devices)
    model = build(family)
    ids, mask = prompt()
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits
        tokens = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        with caplog.at_level("INFO", logger="ir_stack"):
            report = convert_hf_model(model)
        converted = model(ids, attention_mask=mask).logits
        converted_tokens = model.generate(
            ids, attention_mask=mask, max_new_tokens=6, do_sample=False
        )
    assert "spans cuda:0, cuda:1" in caplog.text
    assert report.attentions
    assert not report.skipped
    caches = [m for m in model.modules() if isinstance(m, IRRotaryCache)]
    assert caches
    assert all(cache.gather_rows for cache in caches)
    cache = caches[0]
    positions = torch.tensor([[3, 0, 7]])
    rows, given = cache(torch.zeros(1, 3, 4), positions, *cache.layer_types[:1])
    assert torch.equal(rows, cache.cache_for(cache.layer_types[0])[positions])
    assert torch.equal(given, positions)
    torch.testing.assert_close(converted, logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(converted_tokens, tokens)


def test_model_devices_lists_each_device_once_without_meta() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2, device="meta"))
    model.register_buffer("steps", torch.zeros(1))
    assert hf_rotary.model_devices(model) == [torch.device("cpu")]
    assert hf_rotary.model_devices(build("llama")) == [torch.device("cpu")]


def test_a_rotary_cache_gathers_rows_only_from_a_table_ahead() -> None:
    tables = {None: (torch.ones(4), 1.0)}
    for options in ({"sliced_by_token": True}, {"per_token": torch.nn.Identity()}):
        with pytest.raises(ValueError, match="'gather_rows' got True"):
            IRRotaryCache(tables, 8, gather_rows=True, **options)  # type: ignore[arg-type]


def test_a_rotary_cache_takes_the_layout_of_pairs_only_for_a_rope_computed_at_each_call() -> None:
    with pytest.raises(ValueError, match="'per_token_pairs' got True without 'per_token'"):
        IRRotaryCache({None: (torch.ones(4), 1.0)}, 8, per_token_pairs=True)


def test_a_rope_rounded_by_a_cast_is_refused_with_the_way_to_load_it() -> None:
    """Phimoe's rotary module computes its frequencies from the config at each call, so after
    ``model.to(bfloat16)`` its rounded buffer, which the table is built from, is not what it
    rotates by: the attention stays, and the reason says to load the model in bf16 instead,
    which keeps the frequencies float32 and converts."""
    rope = {"rope_type": "default", "rope_theta": 1e4}
    cast = build("phimoe", rope_parameters=rope).to(torch.bfloat16)
    why = convert_hf_model(cast).skipped["model.rotary_emb"]
    assert "rotates in neither" in why
    assert "frequencies are torch.bfloat16, as after model.to(dtype)" in why
    loaded = type(cast)._from_config(cast.config, dtype=torch.bfloat16).eval()
    assert loaded.model.rotary_emb.inv_freq.dtype == torch.float32
    assert not convert_hf_model(loaded).skipped


def _with_second_rope(**config_changes: Any) -> Any:
    """A Llama holding a second rotary module (unused by its forward) built from its config
    with `config_changes`, under ``model.model.other_rotary_emb``."""
    model = build("llama")
    config = copy.deepcopy(model.config)
    for name, value in config_changes.items():
        setattr(config, name, value)
    rope_class = type(model.model.rotary_emb)
    model.model.other_rotary_emb = rope_class(config)
    return model


def test_several_rotary_modules_of_one_width_become_a_cache_each() -> None:
    """Each rotary module becomes a cache of its own, with its own frequencies (Granite SWA
    hands each layer the module of its rope base); the model keeps its logits."""
    model = _with_second_rope(rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    report = convert_keeping_logits(model)
    assert report.skipped == {}
    assert len(report.attentions) == SIZES["num_hidden_layers"]
    first, second = model.model.rotary_emb, model.model.other_rotary_emb
    assert isinstance(first, IRRotaryCache)
    assert isinstance(second, IRRotaryCache)
    assert first.cache_for().shape == second.cache_for().shape
    assert not torch.equal(first.cache_for(), second.cache_for())


def test_rotary_modules_of_several_widths_or_classes_leave_the_attention_alone() -> None:
    """One plan, probed with the first rotary module, fits every layer only where the modules
    rotate alike: of other widths or classes, every attention layer stays, saying why."""
    model = _with_second_rope(head_dim=_HEAD // 2)
    report = convert_keeping_logits(model)
    assert report.skipped == {
        "rotary_emb": "rotary modules of several widths: "
        "['model.rotary_emb', 'model.other_rotary_emb']"
    }
    assert report.attentions == []
    assert not isinstance(model.model.rotary_emb, IRRotaryCache)

    model = build("llama")
    rope_class = type(model.model.rotary_emb)
    other_class = type("OtherRotaryEmbedding", (rope_class,), {})
    model.model.other_rotary_emb = other_class(model.config)
    report = convert_keeping_logits(model)
    assert report.skipped["rotary_emb"].startswith("rotary modules of several classes")
    assert report.attentions == []


def test_rotary_cache_names_the_layer_types_it_has() -> None:
    model = build("gemma3")
    convert_hf_model(model)
    rotary = model.model.rotary_emb
    assert isinstance(rotary, IRRotaryCache)
    assert sorted(rotary.layer_types) == ["full_attention", "sliding_attention"]
    x, positions = torch.randn(1, 3, 64), torch.arange(3)[None]
    with pytest.raises(ValueError, match="'layer_type' got 'chunked_attention'; expected one of"):
        rotary(x, positions, "chunked_attention")


def test_a_report_reads_as_counts_and_reasons() -> None:
    """``str(report)``: what was converted, counted, then what was left alone, its paths
    grouped by reason (three shown, the rest counted)."""
    why = "mixture of experts: its routed experts gate in their own way"
    report = hf.ConversionReport(
        norms=["a", "b"],
        attentions=["c"],
        skipped={f"model.layers.{i}.mlp.experts": why for i in range(5)} | {"x": "another"},
    )
    assert str(report).splitlines() == [
        "2 norms, 0 MLPs, 0 routed experts' gating, 1 attention layers on IR ops",
        "left alone:",
        "  model.layers.0.mlp.experts, model.layers.1.mlp.experts, model.layers.2.mlp.experts "
        f"and 2 more: {why}",
        "  x: another",
    ]
    assert str(hf.ConversionReport()).endswith("left alone: nothing")


def test_a_converted_model_is_not_converted_again() -> None:
    """A second conversion would find the converted modules' forms unknown and report them
    as skipped for the wrong reasons; it is refused, naming a converted module."""
    model = build("phi3")
    convert_hf_model(model)
    with pytest.raises(ValueError, match=r"'model' is converted already \(model.layers.0"):
        convert_hf_model(model)


def test_other_model_types_are_refused() -> None:
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64)
    types = len(hf.SUPPORTED_MODEL_TYPES)
    with pytest.raises(ValueError, match=f"type 'gpt2'; expected .* one of the {types} types in "):
        convert_hf_model(transformers.GPT2LMHeadModel(config))


_VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "image_size": 28,
    "patch_size": 14,
}


def _multimodal(outer: str, family: str) -> tuple[Any, str]:
    """A multimodal transformers model of type `outer` whose language model is `family`'s, and
    where it holds that model (Llama 4's at the top, the others' one level down)."""
    text = {**SIZES, **FAMILY_OPTIONS.get(family, {})}
    if outer in ("llava", "mistral3"):  # LLaVA's wrapper of a CLIP tower; Mistral 3's of Pixtral
        vision = {**_VISION, "num_hidden_layers": 1, "num_attention_heads": 2}
        if outer == "llava":
            config = transformers.LlavaConfig(
                text_config={**text, "model_type": family},
                vision_config={**vision, "model_type": "clip_vision_model"},
                image_token_index=5,
            )
            return transformers.LlavaForConditionalGeneration(config).eval(), "model.language_model"
        config = transformers.Mistral3Config(
            text_config={**text, "model_type": family},
            vision_config={**vision, "model_type": "pixtral", "head_dim": 16},
            image_token_index=5,
        )
        return transformers.Mistral3ForConditionalGeneration(config).eval(), "model.language_model"
    if family == "llama4":
        vision = {
            **_VISION,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "vision_output_dim": 32,
            "projector_input_dim": 32,
            "projector_output_dim": SIZES["hidden_size"],
        }
        config = transformers.Llama4Config(text_config=text, vision_config=vision)
        return transformers.Llama4ForConditionalGeneration(config).eval(), "language_model"
    if family == "gemma3":
        vision = {**_VISION, "num_hidden_layers": 1, "num_attention_heads": 2}
        config = transformers.Gemma3Config(text_config=text, vision_config=vision)
        return transformers.Gemma3ForConditionalGeneration(config).eval(), "model.language_model"
    vision = {
        **_VISION,
        "num_hidden_layers": 2,
        "num_global_layers": 1,
        "attention_heads": 2,
        "vision_output_dim": 64,
        "intermediate_layers_indices": [0],
        "max_num_tiles": 1,
        "supported_aspect_ratios": [[1, 1]],
    }
    config = transformers.MllamaConfig(text_config=text, vision_config=vision)
    return transformers.MllamaForConditionalGeneration(config).eval(), "model.language_model"


@pytest.mark.parametrize(
    ("family", "outer", "inner"),
    [
        ("llama4", "llama4", "llama4_text"),
        ("gemma3", "gemma3", "gemma3_text"),
        ("mllama", "mllama", "mllama_text_model"),
        ("llama", "llava", "llama"),
        ("mistral", "mistral3", "mistral"),
    ],
)
def test_a_multimodal_model_is_refused_with_the_way_to_convert_its_language_model(
    family: str, outer: str, inner: str
) -> None:
    """A multimodal model (Llama 4's of type 'llama4', Gemma 3's, Llama 3.2 Vision's, and
    LLaVA's and Mistral 3's wrappers of a Llama and a Mistral) is refused, naming its language
    model's type and the call that converts it; that model converts (Llama 4's a
    ``Llama4ForCausalLM`` whose logits stay; the others' a bare text model one level down,
    which transformers versions may name at the top too, as Gemma 3's). Mllama's
    cross-attention layer keeps its forward."""
    torch.manual_seed(0)
    model, path = _multimodal(outer, family)
    where = r"model(\.model)?\.language_model" if family == "gemma3" else re.escape(f"model.{path}")
    hint = f"language model is of type '{inner}'.*convert_hf_model\\({where}\\)"
    with pytest.raises(ValueError, match=f"type '{outer}'; expected .*{hint}"):
        convert_hf_model(model)
    language_model = model.get_submodule(path)
    if family == "llama4":
        report = convert_keeping_logits(language_model)
    else:
        report = convert_hf_model(language_model)
    rotating = 1 if family == "mllama" else SIZES["num_hidden_layers"]
    assert len(report.attentions) == rotating


#: vision-language models whose language model converts: (config, model class), and the
#: options of their vision tower (one block, 32 wide, its output as wide as the text model)
VISION_LANGUAGE = {
    "qwen2_vl": ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration"),
    "qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration"),
    "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration"),
    "qwen3_vl_moe": ("Qwen3VLMoeConfig", "Qwen3VLMoeForConditionalGeneration"),
    "glm4v": ("Glm4vConfig", "Glm4vForConditionalGeneration"),
    "glm4v_moe": ("Glm4vMoeConfig", "Glm4vMoeForConditionalGeneration"),
}
_VISION_TOWER: dict[str, Any] = {
    "depth": 1,
    "num_heads": 2,
    "hidden_size": 32,
    "intermediate_size": 48,
    "out_hidden_size": SIZES["hidden_size"],
    # Qwen2-VL's: its width, and its output as `hidden_size`
    "embed_dim": 32,
    "mlp_ratio": 1,
    # Qwen3-VL's: positions learned, the first block's states added to the first layers'
    "num_position_embeddings": 64,
    "deepstack_visual_indexes": [0],
}
_IMAGE_TOKEN, _VISION_START, _VISION_END = 5, 7, 8


def _vision_language(family: str) -> Any:
    """`family`'s vision-language model: a text model of `SIZES` (two routed experts of four
    in every layer for the MoE forms; GLM-4.5V's first layer dense), heads of 16 rotated in
    three position sections (time, height, width) of 2, 3 and 3 frequencies (GLM-4.1V's and
    GLM-4.5V's half-rotated heads: 1, 1 and 2; GLM-4.1V's rope gives its angles in pairs),
    Qwen3-VL's sections interleaved."""
    torch.manual_seed(0)
    config_class, model_class = transformers_classes(*VISION_LANGUAGE[family])
    sections = [1, 1, 2] if family.startswith("glm") else [2, 3, 3]
    rope = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": sections}
    if family.startswith("qwen3"):
        rope["mrope_interleaved"] = True
    if family.startswith("glm"):  # half of each head, as the released models
        rope["partial_rotary_factor"] = 0.5
    text: dict[str, Any] = {**SIZES, **_TOKENS, "head_dim": 16, "rope_parameters": rope}
    if family.endswith("moe"):
        text |= {
            "num_experts": 4,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "first_k_dense_replace": 1,
            "n_group": 1,
            "topk_group": 1,
        }
    vision = {**_VISION_TOWER}
    if family == "qwen2_vl":
        vision["hidden_size"] = SIZES["hidden_size"]
    config = config_class(
        text_config=text,
        vision_config=vision,
        image_token_id=_IMAGE_TOKEN,
        video_token_id=6,
        vision_start_token_id=_VISION_START,
        vision_end_token_id=_VISION_END,
    )
    model = model_class(config).eval()
    randomize_norms(model)
    return model


def _image_prompt(model: Any, image_tokens: int) -> tuple[torch.Tensor, dict[str, Any]]:
    """A prompt holding one image of 4 x 4 patches, which `model`'s vision tower turns into
    `image_tokens` tokens, and the image's arguments (random pixels)."""
    vision = model.config.vision_config
    patch = 3 * vision.temporal_patch_size * vision.patch_size**2
    image = [_VISION_START, *[_IMAGE_TOKEN] * image_tokens, _VISION_END]
    ids = torch.tensor([[1, 9, *image, 17, 33, 40, 41]])
    return ids, {
        "pixel_values": torch.randn(16, patch, generator=torch.Generator().manual_seed(2)),
        "image_grid_thw": torch.tensor([[1, 4, 4]]),
        "mm_token_type_ids": (ids == _IMAGE_TOKEN).long(),
    }


@pytest.mark.parametrize("family", list(VISION_LANGUAGE))
def test_a_vision_language_models_language_model_converts(family: str) -> None:
    """Qwen2-VL, Qwen2.5-VL, Qwen3-VL (dense and MoE), GLM-4.1V and GLM-4.5V: the whole model is
    refused, naming its language model, which converts whole: its rope, of three positions a
    token (an image's tokens take their place in its grid), computed at each call. The logits
    stay with and without an image (4 tokens: a 4 x 4 grid of patches merged 2 x 2), and the
    image changes them; so do greedy tokens generated after it."""
    model = _vision_language(family)
    inner = model.model.language_model.config.model_type
    hint = f"language model is of type '{inner}'.*convert_hf_model\\(model.model.language_model\\)"
    with pytest.raises(ValueError, match=f"expected .*{hint}"):
        convert_hf_model(model)
    ids, image = _image_prompt(model, 4)
    with torch.no_grad():
        text = model(ids).logits
        with_image = model(ids, **image).logits
        tokens = model.generate(ids, max_new_tokens=8, do_sample=False, **image)
        report = convert_hf_model(model.model.language_model)
        converted_text = model(ids).logits
        converted_with_image = model(ids, **image).logits
        converted_tokens = model.generate(ids, max_new_tokens=8, do_sample=False, **image)
    assert not report.skipped
    assert report.attentions == [f"layers.{i}.self_attn" for i in range(2)]
    assert isinstance(model.model.language_model.rotary_emb, IRRotaryCache)
    assert not torch.allclose(with_image, text, atol=1e-3)
    torch.testing.assert_close(converted_text, text, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(converted_with_image, with_image, atol=1e-5, rtol=1e-5)
    assert torch.equal(converted_tokens, tokens)


def test_a_vision_language_model_compiles_with_its_language_models_adds_fused() -> None:
    """Qwen2.5-VL with an image, its language model converted, compiled whole: the vision
    tower's and the position code's graph breaks are stock ``torch.compile``'s; the language
    model is one graph, where every residual add fuses with the norm after it, and the logits
    stay."""
    model = _vision_language("qwen2_5_vl")
    ids, image = _image_prompt(model, 4)
    image["use_cache"] = False
    convert_hf_model(model.model.language_model)
    config = ir_stack.Config(passes=ir_passes.PassConfig(force_fusion=True))
    with (
        torch.no_grad(),
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
        ir_passes.collect_reports() as reports,
    ):
        eager = model(ids, **image).logits
        compiled = ir_stack.compile(model, config)(ids, **image).logits
    fused = [report.fusions for report in reports if report.fusions]
    assert fused == [{"add+rms_norm": 2 * SIZES["num_hidden_layers"]}]
    torch.testing.assert_close(compiled, eager, atol=1e-4, rtol=1e-4)


def test_hunyuan_vl_keeps_its_attention_whose_head_halves_rotate_by_different_axes() -> None:
    """HunYuan-VL's rope takes four positions a token, and gives the two halves of a head the
    angles of different ones: a text prompt (every axis alike) rotates as the op does, an
    image's tokens do not (a probe run converting it anyway, its query and key norms placed
    after the rotation as its attention has them, moved the logits with an image by 0.1). The
    rope and attention stay, reported, and the logits with an image stay; the norms and MLPs
    convert."""
    config_class, model_class = transformers_classes(
        "HunYuanVLConfig", "HunYuanVLForConditionalGeneration"
    )
    torch.manual_seed(0)
    rope = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 2, 2, 2]}
    text = {**SIZES, **_TOKENS, "head_dim": 16, "rope_parameters": rope}
    vision = {
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "out_hidden_size": SIZES["hidden_size"],
        "text_hidden_size": SIZES["hidden_size"],
    }
    config = config_class(
        text_config=text,
        vision_config=vision,
        image_token_id=_IMAGE_TOKEN,
        image_start_token_id=_VISION_START,
        image_end_token_id=_VISION_END,
    )
    model = model_class(config).eval()
    randomize_norms(model)
    # its 4 x 4 patches merged 2 x 2, with a token closing each row and two around them
    ids, image = _image_prompt(model, 8)
    with torch.no_grad():
        text_logits = model(ids).logits
        with_image = model(ids, **image).logits
        report = convert_hf_model(model.model.language_model)
        converted_with_image = model(ids, **image).logits
    assert not torch.allclose(with_image, text_logits, atol=1e-3)
    torch.testing.assert_close(converted_with_image, with_image, atol=1e-5, rtol=1e-5)
    why = "its rope computed at each call gives its angles in neither halves nor pairs"
    assert report.skipped == {"rotary_emb": why}
    assert report.attentions == []
    assert (len(report.norms), len(report.mlps)) == (9, 2)


#: layouts of a rope of two positions a token
_AXES = ("axes in each half", "an axis a half")


class _AnglesOfEachCall(torch.nn.Module):
    """A rotary module computing each call's angles (4 frequencies), given in `layout`; those
    of the `_AXES` layouts take two positions a token (``mrope_section``), one a frequency
    section (frequencies 0-1 and 2-3)."""

    def __init__(self, layout: str) -> None:
        super().__init__()
        self.layout = layout
        self.register_buffer("inv_freq", 1.0 / 10.0 ** torch.arange(4.0))
        if layout in _AXES:
            self.mrope_section = [2, 2]

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        angles = position_ids[..., None].float() * self.inv_freq
        if self.layout == "halves":
            angles = torch.cat([angles, angles], dim=-1)
        elif self.layout == "pairs":
            angles = angles.repeat_interleave(2, dim=-1)
        elif self.layout == "axes in each half":  # Qwen2-VL's: each half takes both axes
            mixed = torch.cat([angles[0, ..., :2], angles[1, ..., 2:]], dim=-1)
            angles = torch.cat([mixed, mixed], dim=-1)
        elif self.layout == "an axis a half":  # HunYuan-VL's: the halves take different axes
            angles = torch.cat([angles[0], angles[1]], dim=-1)
        else:  # four frequencies, then four others
            angles = torch.cat([angles, 2 * angles], dim=-1)
        return angles.cos(), angles.sin()


@pytest.mark.parametrize(
    ("layout", "pairs"),
    [
        ("halves", False),
        ("pairs", True),
        ("other", None),
        ("axes in each half", False),
        ("an axis a half", None),
    ],
)
def test_the_layout_of_a_rope_computed_at_each_call_is_probed(
    layout: str, pairs: bool | None
) -> None:
    """Qwen's modules give a frequency's cosine in each half, GLM-4.1V's twice in a row; the
    table the cache builds takes one of each. Any other layout is neither, and refused: among
    them a rope of several positions a token whose halves take different positions, which only
    a probe with different positions on each axis (an image's tokens) shows."""
    rotary = _AnglesOfEachCall(layout)
    assert per_token_pairs(rotary, torch.device("cpu")) is pairs
    if pairs is None or layout in _AXES:
        return
    cache = IRRotaryCache(
        {None: (rotary.inv_freq, 1.0)}, 8, per_token=rotary, per_token_pairs=pairs
    )
    positions = torch.tensor([[3, 5]])
    table, rows = cache(torch.randn(1, 2, 16), positions)
    angles = positions.flatten()[:, None].float() * rotary.inv_freq
    torch.testing.assert_close(table[rows.flatten()], torch.cat([angles.cos(), angles.sin()], -1))


def test_mllama_converts_its_self_attention_and_keeps_its_cross_attention() -> None:
    """Llama 3.2 Vision's language model: its self-attention layers rotate and convert; its
    cross-attention layers attend an image's states, unrotated, with query and key norms of
    their own (which convert): they keep their forward, since a probe shows them ignoring the
    position embeddings. The logits stay with and without an image's states, and the image
    changes them (so its layer ran)."""
    model = build("mllama")
    ids, mask = prompt()
    states = torch.randn(2, 5, SIZES["hidden_size"], generator=torch.Generator().manual_seed(3))
    image = {
        "cross_attention_states": states,
        "cross_attention_mask": torch.zeros(2, 1, ids.shape[1], 5),
        "full_text_row_masked_out_mask": torch.ones(2, 1, ids.shape[1], 1),
    }
    with torch.no_grad():
        # the gates before the cross attention and its MLP start at zero: open them
        for name, param in model.named_parameters():
            if name.endswith(("cross_attn_attn_gate", "cross_attn_mlp_gate")):
                param.fill_(0.5)
        text = model(ids, attention_mask=mask).logits
        with_image = model(ids, attention_mask=mask, **image).logits
        report = convert_hf_model(model)
        converted_text = model(ids, attention_mask=mask).logits
        converted_with_image = model(ids, attention_mask=mask, **image).logits
    assert not torch.allclose(with_image, text, atol=1e-3)
    torch.testing.assert_close(converted_text, text, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(converted_with_image, with_image, atol=1e-5, rtol=1e-5)
    assert report.attentions == ["model.layers.0.self_attn"]
    assert not report.skipped
    cross = model.model.layers[1].cross_attn
    assert not hasattr(cross, "ir_attention_plan")
    assert isinstance(cross.q_norm, IRRMSNorm)
    assert isinstance(cross.k_norm, IRRMSNorm)


def test_phi4_multimodal_converts_its_decoder_and_leaves_its_towers_attention() -> None:
    """Phi-4-multimodal holds its vision tower and audio encoder inside its embeddings: models of
    their own, holding no rope. Their attention (the vision tower's of the planned form, with
    an ``out_proj``) keeps its forward; the decoder's layers convert. The logits stay with and
    without an image, and the image changes them (so the tower ran)."""
    vision = {**FAMILY_OPTIONS["phi4_multimodal"]["vision_config"], "image_token_id": 5}
    # one crop of 2 x 2 patches beside the global one: 5 image tokens
    model = build("phi4_multimodal", vision_config={**vision, "image_size": 28, "crop_size": 28})
    ids = torch.tensor([[1, 9, 5, 5, 5, 5, 5, 17, 33, 40]])
    image = {
        "image_pixel_values": torch.randn(
            1, 2, 3, 28, 28, generator=torch.Generator().manual_seed(3)
        ),
        "image_sizes": torch.tensor([[28, 28]]),
        "image_attention_mask": torch.ones(1, 2, 2, 2),
    }
    with torch.no_grad():
        text = model(ids).logits
        with_image = model(ids, **image).logits
        report = convert_hf_model(model)
        converted_text = model(ids).logits
        converted_with_image = model(ids, **image).logits
    assert not torch.allclose(with_image, text, atol=1e-3)
    torch.testing.assert_close(converted_text, text, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(converted_with_image, with_image, atol=1e-5, rtol=1e-5)
    assert report.attentions == [f"model.layers.{i}.self_attn" for i in range(2)]
    towers = model.model.embed_tokens_extend
    tower_attentions = [
        m for _, m in towers.named_modules() if type(m).__name__.endswith("Attention")
    ]
    assert len(tower_attentions) >= 2
    assert not any(hasattr(m, "ir_attention_plan") for m in tower_attentions)


def test_query_and_key_norms_of_mixed_forms_leave_the_rotary_alone() -> None:
    """A query norm over the whole projection (OLMo 2's form) beside a key norm over each head
    (Qwen3's) is neither form the converted attention applies."""
    model = build("qwen3")
    attention = model.model.layers[0].self_attn
    width = attention.q_proj.out_features
    attention.q_norm = type(attention.q_norm)(width, eps=1e-6)
    report = convert_hf_model(model)
    assert "neither over one head nor over the projection" in report.skipped["model.rotary_emb"]
    assert report.attentions == []


def _dense_positions_only(
    positions: torch.Tensor,
    x_query: torch.Tensor,
    x_key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox_style: bool,
) -> bool:
    return positions.is_contiguous()


ops.rotary_embedding.register_impl("test_dense_positions", supports_args=_dense_positions_only)(
    ops.rotary_embedding.native
)


def test_a_batch_reaches_rotary_kernels_that_need_dense_positions() -> None:
    """The triton and cuda rotary kernels accept only dense positions; transformers passes one
    row for the whole batch, which, broadcast, sent every layer to the native function."""
    model = build("llama")
    convert_hf_model(model)
    ids, mask = prompt()  # a batch of 2
    ir_dispatch.reset_stats()
    ir_dispatch.collect_stats(True)
    try:
        with torch.no_grad(), ir_dispatch.priority(rotary_embedding=["test_dense_positions"]):
            model(ids, attention_mask=mask)
    finally:
        ir_dispatch.collect_stats(False)
    calls = {provider: n for (op, provider), n in ir_dispatch.stats().items() if "rotary" in op}
    assert calls == {"test_dense_positions": SIZES["num_hidden_layers"]}
