"""The registry of model families `convert_hf_model` takes, and the docs' model table made from it.

Each `Family` says which ``config.model_type`` values it covers and the transformers classes
a model of each comes in (`ModelType`), what the conversion puts on IR ops (norms, gated MLPs,
routed experts' gating, rotary embeddings in the attention layers) and how, what stays as
transformers runs it and why, and the few facts about its attention that the conversion does
not find by running the layer (`Family.norms_after_rotation`, `Family.query_scale`).
`SUPPORTED_MODEL_TYPES` is read from it, and so is ``docs/models.md``:

    python -m ir_stack.hf.families --markdown --output docs/models.md

A family joins the registry only once its attention forward has been read and tested: the
converted attention layer replaces that whole forward (see `ir_stack.hf.attention`).
"""

import argparse
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

#: the oldest transformers release the converter's tests run on, which has the classes of every
#: model type not marked newer (`ModelType.min_transformers`)
OLDEST_TESTED = "5.17"

#: the parts of a model that the conversion can put on IR ops
Part = Literal["norms", "gated MLP", "experts", "rotary"]
PARTS: tuple[Part, ...] = ("norms", "gated MLP", "experts", "rotary")

#: how a family's attention scales its queries by position, which a probe of two tokens would
#: not tell apart: ``"scaling beta"`` (Ministral 3: its rope's ``llama_4_scaling_beta`` over
#: the caller's positions) or ``"nope temperature"`` (Llama 4's NoPE layers: ``attn_scale``
#: over the positions in the KV cache); see `ir_stack.hf.attention.QueryScale`
QueryScaleForm = Literal["scaling beta", "nope temperature"]


@dataclass(frozen=True)
class ModelType:
    """One ``config.model_type`` and the transformers classes of its models."""

    #: the ``config.model_type`` value
    name: str
    #: the transformers configuration class
    config_class: str
    #: the class `convert_hf_model` takes (a ``*ForCausalLM``, or a multimodal model's text
    #: model)
    model_class: str
    #: where a multimodal model holds this one, as ``"Class: attribute.path"``
    held_by: str = ""
    #: the first transformers release that has the classes, where newer than `OLDEST_TESTED`
    min_transformers: str = ""


@dataclass(frozen=True)
class Family:
    """A model family: its model types, what the conversion puts on IR ops and what stays."""

    #: the family's display name
    name: str
    model_types: tuple[ModelType, ...]
    #: the parts converted where the model holds them
    converts: frozenset[Part]
    #: what becomes ``rms_norm`` (or why the norms stay)
    norms: str
    #: what the gated MLPs and routed experts run (or why they stay)
    mlp: str
    #: how the attention layers rotate on ``rotary_embedding`` (or why they stay)
    rotary: str
    #: what stays as transformers runs it, and why; empty where nothing does
    stays: str = ""
    #: the query and key norms take the rotated projections (Hunyuan, Llama 4)
    norms_after_rotation: bool = False
    #: how the attention scales its queries by position, where it does
    query_scale: QueryScaleForm | None = None

    def __post_init__(self) -> None:
        unknown = set(self.converts) - set(PARTS)
        if unknown:
            raise ValueError(
                f"Family {self.name!r}: argument 'converts' got {sorted(unknown)}; expected "
                f"parts among {PARTS}"
            )
        if not self.model_types:
            raise ValueError(f"Family {self.name!r}: argument 'model_types' is empty")


def _types(*rows: tuple[str, ...]) -> tuple[ModelType, ...]:
    return tuple(ModelType(*row) for row in rows)


def _converts(*parts: Part) -> frozenset[Part]:
    return frozenset(parts)


_RMS = "`rms_norm`"
_SILU = "`silu_and_mul`"
_GELU = "`gelu_and_mul` (tanh)"
_ROUTED = "routed experts gate with `silu_and_mul`"
_YES = "yes"
_DENSE = _converts("norms", "gated MLP", "rotary")
_MOE = _converts("norms", "gated MLP", "experts", "rotary")
_NO_ROPE = _converts("norms", "gated MLP", "experts")
_LATENT_STAYS = "the latent attention, which rotates its own way, and its rotary module"
_NOT_GATED = "not gated: stays"
_LAYER_NORMS = "LayerNorms: they stay"
_VISION = "the vision tower"
_NEWER = "5.24"

#: every family `convert_hf_model` takes, in the order the docs list them
FAMILIES: tuple[Family, ...] = (
    Family(
        "Llama", _types(("llama", "LlamaConfig", "LlamaForCausalLM")), _DENSE, _RMS, _SILU, _YES
    ),
    Family(
        "Mistral",
        _types(("mistral", "MistralConfig", "MistralForCausalLM")),
        _DENSE,
        _RMS,
        _SILU,
        _YES,
    ),
    Family(
        "Qwen2", _types(("qwen2", "Qwen2Config", "Qwen2ForCausalLM")), _DENSE, _RMS, _SILU, _YES
    ),
    Family(
        "Qwen3",
        _types(("qwen3", "Qwen3Config", "Qwen3ForCausalLM")),
        _DENSE,
        "`rms_norm`, per-head query / key norms too",
        _SILU,
        _YES,
    ),
    Family(
        "Granite",
        _types(("granite", "GraniteConfig", "GraniteForCausalLM")),
        _DENSE,
        _RMS,
        _SILU,
        _YES,
    ),
    Family(
        "Ministral",
        _types(("ministral", "MinistralConfig", "MinistralForCausalLM")),
        _DENSE,
        _RMS,
        _SILU,
        "yes (its sliding-window layers too)",
    ),
    Family(
        "Ministral 3",
        _types(("ministral3", "Ministral3Config", "Ministral3ForCausalLM")),
        _DENSE,
        _RMS,
        _SILU,
        "yes, then the queries scaled by position (Llama 4's scale)",
        query_scale="scaling beta",
    ),
    Family(
        "Seed-OSS",
        _types(("seed_oss", "SeedOssConfig", "SeedOssForCausalLM")),
        _DENSE,
        _RMS,
        _SILU,
        _YES,
    ),
    Family(
        "SmolLM3",
        _types(("smollm3", "SmolLM3Config", "SmolLM3ForCausalLM")),
        _DENSE,
        _RMS,
        _SILU,
        "yes; its NoPE layers rotate nothing",
    ),
    Family(
        "GLM, GLM-4",
        _types(("glm", "GlmConfig", "GlmForCausalLM"), ("glm4", "Glm4Config", "Glm4ForCausalLM")),
        _DENSE,
        "`rms_norm`, GLM-4's after attention and the MLP too",
        f"joined already: {_SILU}",
        "pairs, over half of each head",
    ),
    Family(
        "ERNIE 4.5",
        _types(("ernie4_5", "Ernie4_5Config", "Ernie4_5ForCausalLM")),
        _DENSE,
        _RMS,
        _SILU,
        "pairs",
    ),
    Family(
        "Helium",
        _types(("helium", "HeliumConfig", "HeliumForCausalLM")),
        _DENSE,
        _RMS,
        _SILU,
        "pairs",
    ),
    Family(
        "Gemma, Gemma 2",
        _types(
            ("gemma", "GemmaConfig", "GemmaForCausalLM"),
            ("gemma2", "Gemma2Config", "Gemma2ForCausalLM"),
        ),
        _DENSE,
        "`1 + w` as a float32 weight",
        _GELU,
        "yes (Gemma 2's logit cap and sliding window passed on)",
    ),
    Family(
        "Gemma 3 text",
        _types(
            (
                "gemma3_text",
                "Gemma3TextConfig",
                "Gemma3ForCausalLM",
                "Gemma3ForConditionalGeneration: model.language_model",
            )
        ),
        _DENSE,
        "`1 + w` as a float32 weight, query / key norms too",
        _GELU,
        "a table per layer type (its local and global ropes differ in base and scaling)",
        f"{_VISION} of the multimodal model",
    ),
    Family(
        "VaultGemma",
        _types(("vaultgemma", "VaultGemmaConfig", "VaultGemmaForCausalLM")),
        _DENSE,
        "`1 + w` as a float32 weight",
        _GELU,
        _YES,
    ),
    Family(
        "Phi-3, Phi-4",
        _types(("phi3", "Phi3Config", "Phi3ForCausalLM")),
        _DENSE,
        _RMS,
        f"joined already: {_SILU}",
        "over the leading part of each head; a long rope computed at each call",
    ),
    Family(
        "OLMo 2, OLMo 3",
        _types(
            ("olmo2", "Olmo2Config", "Olmo2ForCausalLM"),
            ("olmo3", "Olmo3Config", "Olmo3ForCausalLM"),
        ),
        _DENSE,
        "`rms_norm`, query / key norms over the whole projection too",
        _SILU,
        _YES,
    ),
    Family(
        "Mixtral",
        _types(("mixtral", "MixtralConfig", "MixtralForCausalLM")),
        _MOE,
        _RMS,
        _ROUTED,
        _YES,
    ),
    Family(
        "Qwen2-MoE, Qwen3-MoE",
        _types(
            ("qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
            ("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
        ),
        _MOE,
        "`rms_norm`, Qwen3-MoE's per-head query / key norms too",
        f"{_ROUTED}; Qwen2-MoE's shared expert converts",
        _YES,
    ),
    Family(
        "OLMoE",
        _types(("olmoe", "OlmoeConfig", "OlmoeForCausalLM")),
        _MOE,
        "`rms_norm`, query / key norms over the whole projection too",
        _ROUTED,
        _YES,
    ),
    Family(
        "FlexOlmo",
        _types(("flex_olmo", "FlexOlmoConfig", "FlexOlmoForCausalLM")),
        _MOE,
        "`rms_norm`, query / key norms over the whole projection too",
        _ROUTED,
        _YES,
    ),
    Family(
        "Granite MoE",
        _types(
            ("granitemoe", "GraniteMoeConfig", "GraniteMoeForCausalLM"),
            ("granitemoeshared", "GraniteMoeSharedConfig", "GraniteMoeSharedForCausalLM"),
        ),
        _MOE,
        _RMS,
        f"{_ROUTED}; the shared expert converts in place",
        _YES,
    ),
    Family(
        "GLM-4 MoE",
        _types(("glm4_moe", "Glm4MoeConfig", "Glm4MoeForCausalLM")),
        _MOE,
        "`rms_norm`, per-head query / key norms too",
        f"{_ROUTED}; the shared and dense MLPs convert",
        "over half of each head",
    ),
    Family(
        "Sarvam MoE",
        _types(
            ("sarvam_moe", "SarvamMoEConfig", "Glm4MoeForCausalLM", "", _NEWER),
        ),
        _MOE,
        "as GLM-4 MoE",
        "as GLM-4 MoE",
        "as GLM-4 MoE",
    ),
    Family(
        "ERNIE 4.5 MoE",
        _types(("ernie4_5_moe", "Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM")),
        _MOE,
        _RMS,
        f"{_ROUTED}; the shared experts convert",
        "pairs",
    ),
    Family(
        "DeepSeek V2, V3",
        _types(
            ("deepseek_v2", "DeepseekV2Config", "DeepseekV2ForCausalLM"),
            ("deepseek_v3", "DeepseekV3Config", "DeepseekV3ForCausalLM"),
        ),
        _NO_ROPE,
        "`rms_norm`, the latent attention's norms too",
        f"{_ROUTED}; the shared and dense MLPs convert",
        "no: the latent attention stays",
        _LATENT_STAYS,
    ),
    Family(
        "DeepSeek V3.2, GLM-5, GLM-4.7 Flash, Mistral 4",
        _types(
            ("deepseek_v32", "DeepseekV32Config", "DeepseekV32ForCausalLM"),
            ("glm_moe_dsa", "GlmMoeDsaConfig", "GlmMoeDsaForCausalLM"),
            ("glm4_moe_lite", "Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM"),
            ("mistral4", "Mistral4Config", "Mistral4ForCausalLM"),
        ),
        _NO_ROPE,
        "as DeepSeek V3 (the sparse attention's indexer keeps its LayerNorm)",
        "as DeepSeek V3 (Mistral 4 routes by softmax)",
        "no: the latent attention and its indexer stay",
        f"{_LATENT_STAYS}; V3.2's and GLM-5's indexer with it",
    ),
    Family(
        "MiniCPM3, Youtu",
        _types(
            ("minicpm3", "MiniCPM3Config", "MiniCPM3ForCausalLM"),
            ("youtu", "YoutuConfig", "YoutuForCausalLM"),
        ),
        _converts("norms", "gated MLP"),
        "`rms_norm`, the latent attention's norms too",
        _SILU,
        "no: the latent attention stays",
        _LATENT_STAYS,
    ),
    Family(
        "Sarvam MLA, A.X K1, A.X K2, dots3",
        _types(
            ("sarvam_mla", "SarvamMLAConfig", "DeepseekV3ForCausalLM", "", _NEWER),
            ("axk1", "AXK1Config", "AXK1ForCausalLM"),
            ("axk2", "AXK2Config", "AXK2ForCausalLM"),
            ("dots3_note_text", "Dots3NoteTextConfig", "Dots3NoteForCausalLM", "", _NEWER),
        ),
        _NO_ROPE,
        "`rms_norm`, the latent attention's norms too (A.X K2's gated norms: the norm inside "
        "converts, the gate stays)",
        f"{_ROUTED}; the shared and dense MLPs convert",
        "no: the latent attention (and its indexer) stays",
        _LATENT_STAYS,
    ),
    Family(
        "OLMo Hybrid",
        _types(("olmo_hybrid", "OlmoHybridConfig", "OlmoHybridForCausalLM")),
        _DENSE,
        "`rms_norm`, query / key norms over the projection, after attention and the MLP; the "
        "Gated DeltaNet layers' gated norms stay",
        _SILU,
        "in the attention layers where the model has a rope (the released checkpoints have "
        "none: their attention stays)",
        "its Gated DeltaNet layers",
    ),
    Family(
        "AFMoE (Arcee's Trinity)",
        _types(("afmoe", "AfmoeConfig", "AfmoeForCausalLM")),
        _MOE,
        "`rms_norm`, per-head query / key norms, norms before and after attention and the MLP",
        f"{_ROUTED}; shared experts and dense MLPs convert",
        "in its sliding-window layers (the global ones are NoPE); its attention output's gate, "
        "from a projection of its own (`gate_proj`), applied",
    ),
    Family(
        "Granite 4",
        _types(("granitemoehybrid", "GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM")),
        _MOE,
        "`rms_norm`; the Mamba-2 layers' gated norms stay",
        f"{_SILU} on the shared MLP's one gate-up layer; the H models' routed experts gate with it",
        "the dense models' attention rotates (its forward takes the mask before the position "
        "embeddings, which the converted forward follows); the H models have no rope",
        "the H models' Mamba-2 layers, and their attention, which has no rope",
    ),
    Family(
        "MiMo-V2 Flash",
        _types(("mimo_v2_flash", "MiMoV2FlashConfig", "MiMoV2FlashForCausalLM")),
        _MOE,
        _RMS,
        f"{_ROUTED}; dense MLPs convert",
        "over a third of each head, a table per layer type; value heads of their own width, "
        "and scaled (transformers 5.24); the sliding layers' attention sinks passed on",
    ),
    Family(
        "MiniMax (Text-01, M1)",
        _types(("minimax", "MiniMaxConfig", "MiniMaxForCausalLM")),
        _converts("norms", "experts", "rotary"),
        "`rms_norm`, the lightning layers' output norm too",
        _ROUTED,
        "in the softmax-attention layers",
        "its lightning-attention layers, which ignore the position embeddings (a probe shows it)",
    ),
    Family(
        "MiniMax M2",
        _types(("minimax_m2", "MiniMaxM2Config", "MiniMaxM2ForCausalLM")),
        _MOE,
        "`rms_norm`, query / key norms too",
        _ROUTED,
        _YES,
    ),
    Family(
        "Kimi Linear",
        _types(("kimi_linear", "KimiLinearConfig", "KimiLinearForCausalLM")),
        _NO_ROPE,
        "`rms_norm`, the latent attention's key-value norm too; the KDA layers' gated norms stay",
        f"{_ROUTED}; shared experts and dense MLPs convert",
        "no: its latent attention has no rope",
        "its KDA layers, and its latent attention, which has no rope",
    ),
    Family(
        "Ling 2.5 hybrid",
        _types(("bailing_hybrid", "BailingHybridConfig", "BailingHybridForCausalLM", "", _NEWER)),
        _NO_ROPE,
        "`rms_norm`, the latent attention's key-value norm too",
        f"{_ROUTED}; shared experts and dense MLPs convert",
        "no: its latent attention stays with the rotary module",
        "its linear attention, and its latent attention",
    ),
    Family(
        "Falcon-H1",
        _types(("falcon_h1", "FalconH1Config", "FalconH1ForCausalLM")),
        _DENSE,
        "`rms_norm`; the Mamba-2 mixers' gated norms stay",
        f"{_SILU}, its gate and output multipliers applied (the gate's folded into the joined "
        "weights)",
        "yes, its key multiplier applied before the rotation",
        "its Mamba-2 mixers",
    ),
    Family(
        "LFM2, LFM2-MoE",
        _types(
            ("lfm2", "Lfm2Config", "Lfm2ForCausalLM"),
            ("lfm2_moe", "Lfm2MoeConfig", "Lfm2MoeForCausalLM"),
        ),
        _MOE,
        "`rms_norm`, per-head query / key norms too (`q_layernorm`, `k_layernorm`)",
        f"{_SILU} (`w1`, `w3`, `w2`; found by running the MLP, which calls `F.silu`); LFM2-MoE's "
        "routed experts gate with it",
        "in the attention layers (output `out_proj`; LFM2-MoE's rotary module is `pos_emb`)",
        "their short-convolution layers",
    ),
    Family(
        "LFM3",
        _types(("lfm3", "Lfm3Config", "Lfm3ForCausalLM", "", _NEWER)),
        _DENSE,
        "as LFM2",
        "as LFM2",
        "in the attention layers, the output gated by one sigmoid a head (`g_proj`)",
        "its short-convolution layers",
    ),
    Family(
        "Cohere (Command R), Cohere 2",
        _types(
            ("cohere", "CohereConfig", "CohereForCausalLM"),
            ("cohere2", "Cohere2Config", "Cohere2ForCausalLM"),
        ),
        _converts("gated MLP", "rotary"),
        _LAYER_NORMS,
        _SILU,
        "pairs; Cohere 2 in its sliding-window layers only (the global ones are NoPE)",
        "their norms, which are LayerNorms",
    ),
    Family(
        "Cohere 2 MoE",
        _types(("cohere2_moe", "Cohere2MoeConfig", "Cohere2MoeForCausalLM")),
        _converts("gated MLP", "experts", "rotary"),
        _LAYER_NORMS,
        f"{_ROUTED}; shared experts, where there are some, convert",
        "as Cohere 2",
        "its norms, which are LayerNorms",
    ),
    Family(
        "EXAONE 4, EXAONE MoE",
        _types(
            ("exaone4", "Exaone4Config", "Exaone4ForCausalLM"),
            ("exaone_moe", "ExaoneMoeConfig", "ExaoneMoeForCausalLM"),
        ),
        _MOE,
        "`rms_norm`, per-head query / key norms, after attention and the MLP",
        f"{_SILU}; EXAONE MoE's {_ROUTED}",
        "in the sliding-window layers only (the global ones are NoPE)",
    ),
    Family(
        "Hunyuan",
        _types(
            ("hunyuan_v1_dense", "HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM"),
            ("hunyuan_v1_moe", "HunYuanMoEV1Config", "HunYuanMoEV1ForCausalLM"),
        ),
        _MOE,
        "`rms_norm`, per-head query / key norms too, after the rotation",
        f"{_SILU}; the MoE's {_ROUTED}",
        "yes; NTK-alpha under transformers 5.24 (which fixes its frequencies)",
        norms_after_rotation=True,
    ),
    Family(
        "dots.llm1",
        _types(("dots1", "Dots1Config", "Dots1ForCausalLM")),
        _MOE,
        "`rms_norm`, per-head query / key norms too",
        f"{_ROUTED}; the shared experts convert",
        _YES,
    ),
    Family(
        "Apertus, Arcee",
        _types(
            ("apertus", "ApertusConfig", "ApertusForCausalLM"),
            ("arcee", "ArceeConfig", "ArceeForCausalLM"),
        ),
        _converts("norms", "rotary"),
        "`rms_norm` (Apertus: query / key norms too)",
        f"{_NOT_GATED} (xIELU, ReLU²)",
        _YES,
        "their MLP, which is not gated",
    ),
    Family(
        "Apertus 1.5 text",
        _types(
            (
                "apertus1p5_text",
                "Apertus1p5TextConfig",
                "Apertus1p5TextForCausalLM",
                "",
                _NEWER,
            )
        ),
        _converts("norms", "rotary"),
        "`rms_norm`, query / key norms too",
        f"{_NOT_GATED} (xIELU)",
        _YES,
        "its MLP, which is not gated",
    ),
    Family(
        "Jais 2",
        _types(("jais2", "Jais2Config", "Jais2ForCausalLM")),
        _converts("rotary"),
        _LAYER_NORMS,
        f"{_NOT_GATED} (ReLU²)",
        "yes (biased projections)",
        "its norms, which are LayerNorms, and its MLP, which is not gated",
    ),
    Family(
        "Llama 4 text",
        _types(
            (
                "llama4_text",
                "Llama4TextConfig",
                "Llama4ForCausalLM",
                "Llama4ForConditionalGeneration: language_model",
            )
        ),
        _MOE,
        "`rms_norm`; in rotating layers, one query / key norm without a weight, after the rotation",
        f"{_ROUTED} in a forward of their own; the shared expert and dense MLPs convert",
        "pairs (complex numbers); NoPE layers rotate nothing and scale their queries by their "
        "place in the cache",
        _VISION + " of the multimodal model",
        norms_after_rotation=True,
        query_scale="nope temperature",
    ),
    Family(
        "CWM",
        _types(("cwm", "CwmConfig", "CwmForCausalLM")),
        _DENSE,
        _RMS,
        _SILU,
        "yes (its sliding-window layers too)",
    ),
    Family(
        "Solar Open",
        _types(("solar_open", "SolarOpenConfig", "SolarOpenForCausalLM")),
        _MOE,
        _RMS,
        f"{_ROUTED}; shared experts convert",
        _YES,
    ),
    Family(
        "HY V3, Mellum",
        _types(
            ("hy_v3", "HYV3Config", "HYV3ForCausalLM"),
            ("mellum", "MellumConfig", "MellumForCausalLM"),
        ),
        _MOE,
        "`rms_norm`, per-head query / key norms too",
        f"{_ROUTED}; shared experts, where there are some, convert",
        _YES,
    ),
    Family(
        "Gemma 4 text",
        _types(
            (
                "gemma4_text",
                "Gemma4TextConfig",
                "Gemma4ForCausalLM",
                "Gemma4ForConditionalGeneration: model.language_model",
            )
        ),
        _MOE,
        "`rms_norm` (`x * w`, no offset): query / key norms per head, the values' norm without a "
        "weight, the per-layer inputs' norms",
        f"{_GELU}; with experts (`enable_moe_block`), they gate with it too",
        "a table per layer type, each as wide as its layers' heads (the full-attention layers' "
        "proportional rope over the whole head); the keys' projection as values where there is "
        "no `v_proj`; the keys and values stored for the caller, and reused by the KV-shared "
        "layers of the smaller models",
        _VISION + " of the multimodal model",
    ),
    Family(
        "Gemma 4 Unified text",
        _types(
            (
                "gemma4_unified_text",
                "Gemma4UnifiedTextConfig",
                "Gemma4UnifiedForCausalLM",
            )
        ),
        _MOE,
        "as Gemma 4",
        "as Gemma 4",
        "as Gemma 4, KV-shared layers too",
    ),
    Family(
        "Gemma 3n text",
        _types(
            (
                "gemma3n_text",
                "Gemma3nTextConfig",
                "Gemma3nForCausalLM",
                "Gemma3nForConditionalGeneration: model.language_model",
            )
        ),
        _DENSE,
        "`rms_norm` (`x * w`): query / key / value norms, around attention and the MLP, AltUp's "
        "router norm, Laurel's, the per-layer inputs'",
        f"{_GELU} in the dense layers",
        "a table per layer type; the KV-shared layers reuse earlier keys and values "
        "(transformers 5.24: 5.17's shares them by layer index, and its attention stays, "
        "reported)",
        "the first layers' sparse-activation MLPs",
    ),
    Family(
        "Qwen3-Next, Qwen 3.5 text",
        _types(
            ("qwen3_next", "Qwen3NextConfig", "Qwen3NextForCausalLM"),
            (
                "qwen3_5_text",
                "Qwen3_5TextConfig",
                "Qwen3_5ForCausalLM",
                "Qwen3_5ForConditionalGeneration: model.language_model",
            ),
            (
                "qwen3_5_moe_text",
                "Qwen3_5MoeTextConfig",
                "Qwen3_5MoeForCausalLM",
                "Qwen3_5MoeForConditionalGeneration: model.language_model",
            ),
        ),
        _MOE,
        "`1 + w` as a float32 weight, query / key norms too; the linear-attention layers' gated "
        "norms stay",
        f"{_SILU}; routed experts gate with it, shared experts convert",
        "in the attention layers, over the share of each head the config gives "
        "(`partial_rotary_factor`), the output gated as the original does; Qwen 3.5's three "
        "positions a token (an image grid's too) from a table its rotary module computes at "
        "each call",
        "their linear-attention (Gated DeltaNet) layers",
    ),
    Family(
        "GPT-OSS",
        _types(("gpt_oss", "GptOssConfig", "GptOssForCausalLM")),
        _converts("norms", "rotary"),
        _RMS,
        "routed experts clamp their gate: they stay, reported",
        "yes; its attention sinks passed on",
        "its routed experts, which clamp their gate (`silu_and_mul` does not)",
    ),
    Family(
        "InternLM 3, IQuest-Coder, EXAONE 3",
        _types(
            ("internlm3", "InternLM3Config", "LlamaForCausalLM", "", _NEWER),
            ("iquestcoder", "IQuestCoderConfig", "LlamaForCausalLM", "", _NEWER),
            ("exaone", "ExaoneConfig", "LlamaForCausalLM", "", _NEWER),
        ),
        _DENSE,
        _RMS,
        _SILU,
        "yes (configs of their own on Llama's classes)",
    ),
    Family(
        "HyperCLOVA X",
        _types(("hyperclovax", "HyperCLOVAXConfig", "HyperCLOVAXForCausalLM")),
        _DENSE,
        "`rms_norm`, after attention and the MLP too",
        _SILU,
        "yes (Granite's multipliers applied as Granite's)",
    ),
    Family(
        "Flint",
        _types(("flint", "FlintConfig", "FlintForCausalLM", "", _NEWER)),
        _MOE,
        "`rms_norm`, per-head query / key norms too",
        f"{_ROUTED}; the shared expert converts",
        "in its sliding-window layers (the full ones are NoPE); its attention sinks passed on",
    ),
    Family(
        "Kolibri 1",
        _types(("kolibri1", "Kolibri1Config", "Kolibri1ForCausalLM", "", _NEWER)),
        _MOE,
        "`rms_norm`, per-head query / key norms, after attention and the MLP",
        f"{_ROUTED}; the dense MLPs convert",
        "yes (EXAONE 4's attention)",
    ),
    Family(
        "Lara Mini",
        _types(("lara_mini", "LaraMiniConfig", "LaraMiniForCausalLM", "", _NEWER)),
        _MOE,
        "`rms_norm`, per-head query / key norms too; the Gated DeltaNet layers' gated norms stay",
        f"{_ROUTED}; shared experts convert",
        "in its sliding-window layers; its model hands the full-attention layers no position "
        "embeddings, and they rotate nothing, as the original's do",
        "its Gated DeltaNet layers",
    ),
    Family(
        "MiniMax M3 text",
        _types(
            (
                "minimax_m3_vl_text",
                "MiniMaxM3VLTextConfig",
                "MiniMaxM3VLForCausalLM",
            )
        ),
        _converts("norms", "rotary"),
        "`1 + w` as a float32 weight, query / key norms too",
        "routed and shared experts clamp their gate: they stay, reported",
        "where no layer is sparse: a sparse layer picks keys with an indexer of its own, and "
        "then every attention layer stays, reported",
        "its experts, which clamp their gate, and its attention where a layer is sparse",
    ),
    Family(
        "Qwen4-Exp text",
        _types(("qwen4_exp_text", "Qwen4ExpTextConfig", "Qwen4ExpForCausalLM")),
        _NO_ROPE,
        "the attention's query / key norms and its indexer's; the hyper-connections' norms (over "
        "each residual stream, a weight of its own for each) and the Gated DeltaNet layers' gated "
        "norms stay",
        f"{_ROUTED}; shared experts convert",
        "no: its attention picks keys with an indexer of its own",
        "its hyper-connections, and its indexed attention",
    ),
    Family(
        "Inkling text",
        _types(("inkling_text", "InklingTextConfig", "InklingForCausalLM")),
        _converts("norms", "experts"),
        "`rms_norm`, the embeddings' norm and query / key norms too",
        _ROUTED,
        "no: its attention has no rope (relative logits)",
        "its attention, which has no rope",
    ),
    Family(
        "Granite SWA, Granite MoE SWA",
        _types(
            ("granite_swa", "GraniteSWAConfig", "GraniteSWAForCausalLM"),
            ("granitemoe_swa", "GraniteMoeSWAConfig", "GraniteMoeSWAForCausalLM"),
        ),
        _MOE,
        _RMS,
        f"{_SILU}; the MoE form's routed experts gate with it",
        "a rotary module a rope base, each a table of its own, each layer handed the one of its "
        "base (base 0: NoPE); attention sinks passed on",
    ),
    Family(
        "Laguna",
        _types(("laguna", "LagunaConfig", "LagunaForCausalLM")),
        _MOE,
        "`rms_norm`, per-head query / key norms too",
        f"{_ROUTED}; shared experts and dense MLPs convert",
        "a table per layer type (the full layers' over half of each head); the output gated by "
        "a softplus, a head or a channel (`g_proj`)",
    ),
    Family(
        "Aria text",
        _types(
            (
                "aria_text",
                "AriaTextConfig",
                "AriaTextForCausalLM",
                "AriaForConditionalGeneration: model.language_model",
            )
        ),
        _MOE,
        _RMS,
        f"{_ROUTED} (transformers 5.24; under 5.17 they have no `_apply_gate` hook and stay, "
        "reported); shared experts convert",
        _YES,
        _VISION + " of the multimodal model",
    ),
    Family(
        "Nemotron (Nemotron-4, Minitron)",
        _types(("nemotron", "NemotronConfig", "NemotronForCausalLM")),
        _converts("rotary"),
        "LayerNorms with `1 + w`: they stay",
        f"{_NOT_GATED} (ReLU²)",
        "over half of each head",
        "its norms, which are LayerNorms, and its MLP, which is not gated",
    ),
    Family(
        "Phi-3.5-MoE",
        _types(("phimoe", "PhimoeConfig", "PhimoeForCausalLM")),
        _converts("experts", "rotary"),
        _LAYER_NORMS,
        _ROUTED,
        "Phi-3's long rope, computed at each call",
        "its norms, which are LayerNorms",
    ),
    Family(
        "StableLM",
        _types(("stablelm", "StableLmConfig", "StableLmForCausalLM")),
        _converts("gated MLP", "rotary"),
        _LAYER_NORMS,
        _SILU,
        "over the quarter of each head its attention slices off",
        "its norms, which are LayerNorms",
    ),
    Family(
        "StarCoder2",
        _types(("starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM")),
        _converts("rotary"),
        _LAYER_NORMS,
        _NOT_GATED,
        _YES,
        "its norms, which are LayerNorms, and its MLP, which is not gated",
    ),
    Family(
        "OLMo",
        _types(("olmo", "OlmoConfig", "OlmoForCausalLM")),
        _converts("gated MLP", "rotary"),
        "LayerNorms without a weight: they stay",
        _SILU,
        _YES,
        "its norms, which are LayerNorms",
    ),
    Family(
        "Bamba",
        _types(("bamba", "BambaConfig", "BambaForCausalLM")),
        _DENSE,
        "`rms_norm`; the Mamba-2 layers' gated norms stay",
        _SILU,
        "in its attention layers",
        "its Mamba-2 layers",
    ),
    Family(
        "Jamba",
        _types(("jamba", "JambaConfig", "JambaForCausalLM")),
        _NO_ROPE,
        "`rms_norm`, the Mamba layers' norms of the step, B and C too",
        f"{_ROUTED}; dense MLPs convert",
        "no: its attention has no rope",
        "its Mamba layers, and its attention, which has no rope",
    ),
    Family(
        "Phi-2, Phi-1.5",
        _types(("phi", "PhiConfig", "PhiForCausalLM")),
        _converts("rotary"),
        _LAYER_NORMS,
        f"{_NOT_GATED} (GELU)",
        "over part of each head, sliced off by the attention; the output projection is `dense`",
        "its norms, which are LayerNorms, and its MLP, which is not gated",
    ),
    Family(
        "Emu3 text",
        _types(
            (
                "emu3_text_model",
                "Emu3TextConfig",
                "Emu3ForCausalLM",
                "Emu3ForConditionalGeneration: model.text_model",
            )
        ),
        _DENSE,
        _RMS,
        _SILU,
        _YES,
        "the multimodal model's image tokenizer",
    ),
    Family(
        "Llama 3.2 Vision text (Mllama)",
        _types(
            (
                "mllama_text_model",
                "MllamaTextConfig",
                "MllamaForCausalLM",
                "MllamaForConditionalGeneration: model.language_model",
            )
        ),
        _DENSE,
        "`rms_norm`, the cross attention's query / key norms too",
        _SILU,
        "in the self-attention layers",
        "its cross-attention layers, which attend an image's states unrotated (a probe shows "
        "them ignoring the position embeddings), and the vision tower",
    ),
    Family(
        "Phi-4-multimodal",
        _types(("phi4_multimodal", "Phi4MultimodalConfig", "Phi4MultimodalForCausalLM")),
        _DENSE,
        "`rms_norm` in the decoder",
        f"{_SILU} (Phi-3's joined projection)",
        "in the decoder's layers, as Phi-3's (long rope computed at each call)",
        "the vision tower and the audio encoder (models of their own inside the embeddings, "
        "which hold no rope): their LayerNorms, feed-forward blocks and attention",
    ),
    Family(
        "Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4.1V, GLM-4.5V language models",
        _types(
            (
                "qwen2_vl_text",
                "Qwen2VLTextConfig",
                "Qwen2VLTextModel",
                "Qwen2VLForConditionalGeneration: model.language_model",
            ),
            (
                "qwen2_5_vl_text",
                "Qwen2_5_VLTextConfig",
                "Qwen2_5_VLTextModel",
                "Qwen2_5_VLForConditionalGeneration: model.language_model",
            ),
            (
                "qwen3_vl_text",
                "Qwen3VLTextConfig",
                "Qwen3VLTextModel",
                "Qwen3VLForConditionalGeneration: model.language_model",
            ),
            (
                "qwen3_vl_moe_text",
                "Qwen3VLMoeTextConfig",
                "Qwen3VLMoeTextModel",
                "Qwen3VLMoeForConditionalGeneration: model.language_model",
            ),
            (
                "glm4v_text",
                "Glm4vTextConfig",
                "Glm4vTextModel",
                "Glm4vForConditionalGeneration: model.language_model",
            ),
            (
                "glm4v_moe_text",
                "Glm4vMoeTextConfig",
                "Glm4vMoeTextModel",
                "Glm4vMoeForConditionalGeneration: model.language_model",
            ),
        ),
        _MOE,
        "`rms_norm` (Qwen3-VL: query / key norms too)",
        f"{_SILU}; routed experts gate with it, GLM-4.5V's shared experts convert",
        "the rope of three positions a token (time, height, width; Qwen3-VL's sections "
        "interleaved) computed at each call by the model's own module, so an image's tokens "
        "rotate by their place in its grid; GLM's over half of each head",
        _VISION,
    ),
    Family(
        "HunYuan-VL language model",
        _types(
            (
                "hunyuan_vl_text",
                "HunYuanVLTextConfig",
                "HunYuanVLTextModel",
                "HunYuanVLForConditionalGeneration: model.language_model",
            )
        ),
        _converts("norms", "gated MLP"),
        "`rms_norm`, per-head query / key norms too",
        _SILU,
        "no: its rope of four positions a token gives the two halves of a head the angles of "
        "different positions, which the op does not compute",
        "its rope and attention, and the vision tower",
    ),
)


def _check_unique(families: Iterable[Family]) -> dict[str, Family]:
    by_type: dict[str, Family] = {}
    for family in families:
        for model_type in family.model_types:
            other = by_type.setdefault(model_type.name, family)
            if other is not family:
                raise ValueError(
                    f"model type {model_type.name!r} is in two families: {other.name!r} and "
                    f"{family.name!r}"
                )
    return by_type


_BY_MODEL_TYPE = _check_unique(FAMILIES)

#: the ``config.model_type`` values `convert_hf_model` takes, in the registry's order
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_BY_MODEL_TYPE)


def family_of(model_type: str | None) -> Family | None:
    """The family of `model_type` (a ``config.model_type``), or None where none takes it."""
    return None if model_type is None else _BY_MODEL_TYPE.get(model_type)


def language_model_paths() -> tuple[str, ...]:
    """Where the registry's multimodal models hold their language models (``ModelType.held_by``
    paths, such as ``"model.language_model"``), each once, the shallowest first."""
    paths = (t.held_by.partition(": ")[2] for f in FAMILIES for t in f.model_types)
    return tuple(sorted(dict.fromkeys(p for p in paths if p), key=lambda p: p.count(".")))


def _cell(text: str) -> str:
    """`text` as one markdown table cell: a pipe escaped, empty as a dash."""
    return text.replace("|", "\\|") if text else "-"


def _codes(names: Iterable[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def markdown_table(families: Sequence[Family] = FAMILIES) -> str:
    """The families as a markdown table: family and model types, then each part's conversion,
    then what stays."""
    lines = [
        "| family | `model_type` | norms | MLP and experts | rotary and attention | stays |",
        "|---|---|---|---|---|---|",
    ]
    for family in families:
        cells = (
            family.name,
            _codes(t.name for t in family.model_types),
            family.norms,
            family.mlp,
            family.rotary,
            family.stays,
        )
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def classes_table(families: Sequence[Family] = FAMILIES) -> str:
    """The model types as a markdown table: their transformers classes, where a multimodal
    model holds them, and the first transformers release with them where it is newer than the
    oldest tested."""
    lines = [
        "| `model_type` | configuration | model class | held by | transformers |",
        "|---|---|---|---|---|",
    ]
    for family in families:
        for t in family.model_types:
            holder, _, path = t.held_by.partition(": ")
            held = f"`{holder}` at `.{path}`" if t.held_by else ""
            since = f">= {t.min_transformers}" if t.min_transformers else ""
            cells = (f"`{t.name}`", f"`{t.config_class}`", f"`{t.model_class}`", held, since)
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


#: the page's text before the tables; ``{types}`` and ``{families}`` are counts
_PAGE_HEAD = """\
<!-- Generated by `python -m ir_stack.hf.families --markdown --output docs/models.md`
from the registry in packages/ir-stack/src/ir_stack/hf/families.py: edit that, not this. -->
# Supported models

`ir_stack.hf.convert_hf_model(model)` takes a Hugging Face `transformers` model of any of the
{types} model types below ({families} families; `pip install "ir-stack[hf]"`) and, in place,
keeping its weights, makes its parts run on IR ops. The table says what each family runs on
which op:

- **norms**: RMSNorms become `rms_norm` (Gemma's `1 + w` form takes the sum as a float32
  weight);
- **MLP and experts**: a gated MLP joins its gate and up projections and runs `silu_and_mul` or
  `gelu_and_mul`; routed experts keep their weights and matrix products and gate with the op;
- **rotary and attention**: each attention layer rotates its queries and keys with
  `rotary_embedding` from a cosine / sine table ("yes": the halves of each head; "pairs":
  interleaved pairs), then calls the model's own attention function; its query, key and value
  projections, where they are plain linear layers, become one matrix;
- **stays**: what keeps running as transformers runs it, and why.

Each part converts only where a probe shows the converted form computes what the original
does; the rest stays, listed with its reason in the `ConversionReport`. The
[tutorial](tutorials/hf-model.md) walks through a conversion.

## Families

"""

_PAGE_CLASSES = """
## Model types and their classes

`convert_hf_model` takes the model class (or its bare model); a multimodal model converts
through the language model it holds, which the refusal of the whole model names: the vision
tower stays. The last column gives the first transformers release with the classes, where it is
newer than the oldest the tests run on ({oldest}).

"""


def models_page(families: Sequence[Family] = FAMILIES) -> str:
    """The docs' model page (``docs/models.md``): its introduction and both tables."""
    types = sum(len(f.model_types) for f in families)
    head = _PAGE_HEAD.format(types=types, families=len(families))
    classes = _PAGE_CLASSES.format(oldest=OLDEST_TESTED)
    return head + markdown_table(families) + classes + classes_table(families)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ir_stack.hf.families --markdown [--output PATH]``: write the model page to
    PATH, or print it."""
    parser = argparse.ArgumentParser(
        prog="python -m ir_stack.hf.families", description="The registry of model families."
    )
    parser.add_argument(
        "--markdown", action="store_true", help="write the docs' model page (docs/models.md)"
    )
    parser.add_argument("--output", type=Path, help="the file to write; stdout by default")
    args = parser.parse_args(argv)
    if not args.markdown:
        parser.error("nothing to do: pass --markdown")
    page = models_page()
    if args.output is None:
        sys.stdout.write(page)
    else:
        args.output.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
