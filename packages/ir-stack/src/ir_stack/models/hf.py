"""`convert_hf_model`: run a Hugging Face ``transformers`` model on IR ops: Llama, Mistral,
Ministral and Ministral 3, Qwen2, Qwen3, Gemma 1-3 (text), VaultGemma, Phi-3 (Phi-4), Granite,
OLMo 2 and 3, GLM and GLM-4, ERNIE 4.5, Helium, Seed-OSS, SmolLM3, Cohere (Command R) and Cohere
2, EXAONE 4, Hunyuan, Apertus and Apertus 1.5, Arcee, CWM, Jais 2 (attention alone: its norms
are LayerNorms, its MLP not gated), and the mixtures of experts Mixtral, Qwen2-MoE, Qwen3-MoE,
OLMoE, FlexOlmo, Granite MoE (and its shared-expert form), GLM-4 MoE, ERNIE 4.5 MoE, Cohere 2
MoE, EXAONE MoE, Hunyuan MoE, HY V3, dots.llm1, MiniMax M2, Solar Open, Mellum, MiMo-V2 Flash
(value heads of their own width), Llama 4 (text), Gemma 4 (text, dense or with experts),
Qwen3-Next and Qwen 3.5 (text, dense or with experts; their linear-attention layers stay),
GPT-OSS (its experts, which clamp their gate, stay), the latent-attention models DeepSeek V2, V3
and V3.2, GLM-5 (MoE DSA), GLM-4.7 Flash (MoE Lite), Mistral 4, MiniCPM3 and Youtu (their latent
attention, which rotates its own way, stays; V3.2's and GLM-5's indexer with it), AFMoE (Arcee's
Trinity), and the hybrids LFM2 and LFM2-MoE (their short-convolution layers stay), OLMo Hybrid
(its Gated DeltaNet layers stay), MiniMax (Text-01, M1: its lightning-attention layers stay),
Kimi Linear (its KDA layers and its latent attention, which has no rope, stay), Ling 2.5's
hybrid (its linear and latent attention stay), Granite 4 (dense, or the H models, whose Mamba-2
layers stay and whose attention has no rope), Falcon-H1 (its Mamba-2 mixers stay; its
multipliers on the keys and on the MLP's gate and output are applied), InternLM 3, IQuest-Coder
and EXAONE 3 (on Llama's classes), HyperCLOVA X, Sarvam MoE, Flint, Kolibri 1, Lara Mini (whose
full-attention layers are handed no position embeddings), LFM3 (its attention output gated a
head), MiniMax M3 (text; its experts stay, and so does its attention where a layer is sparse),
Sarvam MLA, A.X K1 and K2 and dots3 (their latent attention stays), Qwen4-Exp (text; its
hyper-connections and indexed attention stay), Inkling (text; its rope-less attention stays),
Granite SWA and Granite MoE SWA (a rotary module a rope base: each becomes a table of its own),
Laguna (its attention output gated by a softplus), Aria's language model, Nemotron
(attention alone: its norms are LayerNorms, its MLP not gated), Phi-3.5-MoE (its attention
and routed experts; its LayerNorms stay), StableLM (whose attention rotates the quarter of each
head it slices off), StarCoder2 and OLMo (their LayerNorms stay), Bamba (its Mamba-2 layers
stay), Jamba (its Mamba layers and rope-less attention stay), Gemma 3n (text; its
sparse-activation MLPs stay), Phi-2 (attention alone), the text models of Gemma 4 Unified
(Gemma 4's layers) and Emu3 (Llama's), and Llama 3.2 Vision's language model (Mllama: its
cross-attention layers, which attend an image's states unrotated, stay).

The conversion is in place and keeps the weights (the same ``Parameter`` objects):

- every RMSNorm becomes `IRRMSNorm` (``ir_spec.ops.rms_norm``), so does a norm without a weight
  (Llama 4's query and key norm); Gemma's, which scale by
  ``1 + weight`` in float32, take that sum as a float32 weight whatever the model's dtype
  (rounded to bf16 it would round the scale);
- every gated MLP with a SiLU or GELU activation (exact or tanh) becomes `IRGatedMLP`: gate and
  up projections joined into one ``gate_up`` linear layer, then ``ir_spec.ops.silu_and_mul`` or
  ``gelu_and_mul``; Phi-3's, joined already, become `IRJoinedGatedMLP` around its own layers.
  Its whole forward must compute ``down(act(gate(x)) * up(x))`` on a probe, with Falcon-H1's
  multipliers on the gate and output where it holds them: one that does more stays, and so
  does one whose gate and up projections are quantized layers (transformers' FP8 or
  bitsandbytes layers subclass ``nn.Linear`` with a forward of their own: joining their
  weights would drop their scales); the converted MLP runs on a probe beside the original
  before it replaces it;
- rotary embeddings are applied by ``ir_spec.ops.rotary_embedding``: the model's rotary module
  becomes `IRRotaryCache` (one ``cos_sin_cache`` table computed from its frequencies; Gemma
  3's local and global ropes one each; a model holding several rotary modules of one class and
  width, as Granite SWA holds one a rope base, gets a cache for each, see `hf_rotary`), and
  each attention layer rotates its projections with what its model hands it before the
  model's own attention function runs, in the form that the model's ``apply_rotary_pos_emb``
  (Llama 4: ``apply_rotary_emb``, by complex numbers) is found to rotate by a probe: the
  halves of each head, or pairs (GLM, ERNIE, Helium, Cohere, Llama 4).
  Gemma 4's layers of each type have heads of their own width and their own table (its
  full-attention layers' proportional rope rotates the whole head, with frequencies of zero
  past a quarter); they norm their values too, attend the key projection as values where they
  have no ``v_proj``, store their keys and values for the caller (``shared_kv_states``), and,
  in the smaller models, reuse an earlier layer's (KV sharing: those project only queries).
  Qwen3-Next's and Qwen 3.5's query projections give each head's gate too, AFMoE's a
  projection of its own, which the converted forward applies to the attention's output
  through a sigmoid (Laguna's through a softplus in float32: which one is found by running it). A
  rope with no table ahead (Qwen 3.5's, which mixes the frequencies of three positions a
  token; one whose frequencies change with the length: Phi-3's long rope, dynamic NTK) is
  computed at each call by the model's own rotary module, and the op takes those angles as a
  table of a row a token.
  Query and key norms come first (Hunyuan's and Llama 4's after the rotation), as converted
  norms, over each head (Qwen3) or over the whole projection (OLMo 2);
  Phi-3's one ``qkv_proj`` is split into views; a rope narrower than the head rotates its
  leading part, as transformers' partial rotary does; NoPE layers (SmolLM3's, and Cohere 2's
  and EXAONE 4's global layers, Llama 4's NoPE layers) rotate nothing; Ministral 3's rotated
  queries and the queries of Llama 4's NoPE layers are scaled by position (`QueryScale`), as
  their forwards do. The keyword arguments each layer's own
  forward gives its attention function (a sliding window, a logit cap) are found by running
  it, and the converted forward gives the same. Each layer keeps what the conversion found
  in an `AttentionPlan`, checked on a probe: a layer whose converted forward would give its
  attention function other queries, keys, values or mask than its own (Doge's makes a mask of
  its own), or make another output of
  that function's answer (a gate after attention), stays as it is; so does a layer whose
  forward takes a parameter the converted forward would drop (HRM-Text's ``cycle_offset``) or
  that picks its keys with an indexer of its own. A layer handed no position embeddings
  rotates nothing, as its own forward does where a probe runs it so. A model with
  an attention layer of another form that uses the rotary module's output (DeepSeek's latent
  attention) keeps that module and every attention layer as they are; one that ignores it
  (MiniMax's lightning attention, Mllama's cross attention: found on a probe) keeps its own
  forward while the others convert;
- the routed experts of a mixture-of-experts block (transformers holds them as one tensor per
  projection) gate with the IR op: their ``_apply_gate`` hook, which transformers' grouped,
  batched and fused experts implementations call on the ``(tokens x experts, 2 x width)`` rows
  of all the experts at once, runs ``silu_and_mul`` or ``gelu_and_mul``; their weights and
  matrix products stay transformers'. Under the ``"eager"`` experts implementation, whose loop
  gates inline, they are left alone and reported. Llama 4's experts, which have no hook and
  gate in their own forward between two batched products, get a forward (checked on a probe)
  that gates with the op between the same products. A shared expert converts as a gated MLP.

The residual adds stay plain ``+``: under ``ir_stack.compile`` the fusion pass turns each add
followed by a norm into ``fused_add_rms_norm``.

Which norm form and which activation a module computes is found by running it once on a probe
input beside each candidate, so a module that computes neither is left alone (and reported),
whatever its class is called. A converted model's state dict is the original's, keys, order
and values: a joined MLP shows its matrix as the original gate and up layers and joins them
again in ``load_state_dict``, so ``save_pretrained`` writes a checkpoint the original class
loads, and the original's checkpoints load into the converted model (Gemma's norm scales
follow their weights through ``load_state_dict``, ``.to`` and ``.cuda``).

``transformers`` is imported only by the functions that need it; it is not a dependency of
ir-stack (``pip install ir-stack[hf]`` adds it).
"""

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ir_spec import ops

from . import hf_attention
from .hf_attention import AttentionPlan, QueryScale, has_linears
from .hf_experts import convert_experts
from .hf_modules import (
    GATED_ACTIVATIONS,
    IRGatedMLP,
    IRJoinedGatedMLP,
    IRRMSNorm,
    IRRotaryCache,
    reference_gate,
)
from .hf_probes import activation_of, close, gated_activation, input_dtype, probe
from .hf_rotary import DYNAMIC_ROPE_TYPES, STATIC_ROPE_TYPES, convert_rotary

__all__ = [
    "DYNAMIC_ROPE_TYPES",
    "GATED_ACTIVATIONS",
    "STATIC_ROPE_TYPES",
    "SUPPORTED_MODEL_TYPES",
    "AttentionPlan",
    "ConversionReport",
    "IRGatedMLP",
    "IRJoinedGatedMLP",
    "IRRMSNorm",
    "IRRotaryCache",
    "QueryScale",
    "convert_hf_model",
]

logger = logging.getLogger("ir_stack")

#: the ``config.model_type`` values `convert_hf_model` takes
SUPPORTED_MODEL_TYPES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "granite",
    "olmo2",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "olmoe",
    "granitemoe",
    "granitemoeshared",
    "glm4_moe",
    "deepseek_v2",
    "deepseek_v3",
    "glm",
    "glm4",
    "ernie4_5",
    "ernie4_5_moe",
    "helium",
    "ministral",
    "olmo3",
    "seed_oss",
    "smollm3",
    "cohere",
    "cohere2",
    "exaone4",
    "hunyuan_v1_dense",
    "hunyuan_v1_moe",
    "dots1",
    "vaultgemma",
    "flex_olmo",
    "exaone_moe",
    "minimax_m2",
    "cohere2_moe",
    "apertus",
    "arcee",
    "ministral3",
    "llama4_text",
    "cwm",
    "solar_open",
    "hy_v3",
    "mellum",
    "apertus1p5_text",
    "gpt_oss",
    "gemma4_text",
    "qwen3_next",
    "qwen3_5_text",
    "qwen3_5_moe_text",
    "deepseek_v32",
    "glm_moe_dsa",
    "glm4_moe_lite",
    "mistral4",
    "minicpm3",
    "youtu",
    "lfm2",
    "lfm2_moe",
    "olmo_hybrid",
    "falcon_h1",
    "afmoe",
    "jais2",
    "granitemoehybrid",
    "mimo_v2_flash",
    "minimax",
    "kimi_linear",
    "bailing_hybrid",
    "internlm3",
    "iquestcoder",
    "exaone",
    "sarvam_moe",
    "sarvam_mla",
    "hyperclovax",
    "flint",
    "kolibri1",
    "lara_mini",
    "lfm3",
    "minimax_m3_vl_text",
    "axk1",
    "axk2",
    "dots3_note_text",
    "qwen4_exp_text",
    "inkling_text",
    "granite_swa",
    "granitemoe_swa",
    "laguna",
    "aria_text",
    "nemotron",
    "phimoe",
    "stablelm",
    "starcoder2",
    "olmo",
    "bamba",
    "jamba",
    "gemma3n_text",
    "phi",
    "gemma4_unified_text",
    "emu3_text_model",
    "mllama_text_model",
    "phi4_multimodal",
    "qwen2_vl_text",
    "qwen2_5_vl_text",
    "qwen3_vl_text",
    "qwen3_vl_moe_text",
    "glm4v_text",
    "glm4v_moe_text",
    "hunyuan_vl_text",
)


@dataclass
class ConversionReport:
    """What `convert_hf_model` replaced, by module path, and what it left alone and why."""

    norms: list[str] = field(default_factory=list)
    mlps: list[str] = field(default_factory=list)
    attentions: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    #: routed experts whose gating runs on the IR op (their module keeps its class)
    experts: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        """The counts converted, then what was left alone, the paths grouped by reason."""
        lines = [
            f"{len(self.norms)} norms, {len(self.mlps)} MLPs, {len(self.experts)} routed "
            f"experts' gating, {len(self.attentions)} attention layers on IR ops"
        ]
        by_reason: dict[str, list[str]] = {}
        for path, why in self.skipped.items():
            by_reason.setdefault(why, []).append(path)
        lines.append("left alone: nothing" if not by_reason else "left alone:")
        for why, paths in by_reason.items():
            shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
            lines.append(f"  {shown}: {why}")
        return "\n".join(lines)


def _norm_offset(module: nn.Module, eps: float) -> float | None:
    """0 where `module` computes ``x / rms * weight``, 1 where it computes
    ``x / rms * (1 + weight)`` (Gemma), None otherwise: run on a float32 probe beside both."""
    weight: Tensor = module.weight  # type: ignore[assignment]
    if weight.device.type == "meta":
        return None
    x = probe((4, weight.shape[-1]), weight.device)
    with torch.no_grad():
        got = module(x)
    return next((o for o in (0.0, 1.0) if _same_as_rms_norm(got, x, weight.float() + o, eps)), None)


def _same_as_rms_norm(got: Any, x: Tensor, weight: Tensor | None, eps: float) -> bool:
    """Whether a norm's output `got` on the float32 probe `x` is ``rms_norm(x, weight, eps)``."""
    want = ops.rms_norm.native(x, weight, eps)
    return (
        isinstance(got, Tensor)
        and got.shape == want.shape
        and torch.allclose(got.float(), want, rtol=1e-5, atol=1e-6)
    )


def _norm_epsilon(module: nn.Module) -> Any:
    """A norm's epsilon attribute, by either name transformers gives it, or None."""
    return getattr(module, "variance_epsilon", getattr(module, "eps", None))


def _mlp_activation(mlp: nn.Module, parts: tuple[str, ...], config: Any) -> tuple[str | None, str]:
    """The `GATED_ACTIVATIONS` name of a gated MLP whose whole forward computes
    ``down(act(gate(x)) * up(x))`` with its own layers `parts` (gate, up, down; or gate-up,
    gate rows first, and down) and its multipliers (`_mlp_scales`), and nothing more, checked
    on a probe in its dtype; else ``(None, why)``. The activation is its ``act_fn``'s (found
    in float32); an MLP without one (LFM2's, which calls ``F.silu``) must match exactly one
    candidate. `config`: the model's, which names the activation in the reason."""
    if activation_of(mlp) is not None:
        activation = gated_activation(mlp)
        if activation is None:
            name = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", None)
            return None, f"activation {name!r}: not silu, gelu or gelu_pytorch_tanh"
        candidates = [activation]
    else:
        candidates = list(GATED_ACTIVATIONS)
    first: nn.Linear = getattr(mlp, parts[0])
    if first.weight.device.type == "meta":
        return None, "its weights are on the meta device"
    rows = probe((3, first.in_features), first.weight.device).to(input_dtype(mlp))
    try:
        with torch.no_grad():
            got = mlp(rows)
            matches = [
                a for a in candidates if close(got, _gated_mlp_reference(mlp, parts, a, rows))
            ]
    except Exception as error:  # a forward of other arguments or outputs: not this form
        return None, f"its forward failed on a probe ({type(error).__name__}: {error})"
    if len(matches) == 1:
        return matches[0], ""
    if not matches:
        return None, "its forward computes other than down(act(gate(x)) * up(x))"
    return None, f"its activation is any of {matches} on a probe in {rows.dtype}"


def _convert_gated_mlp(
    mlp: nn.Module, parts: tuple[str, ...], config: Any
) -> tuple[nn.Module | None, str]:
    """The IR form of a gated MLP with the layers `parts`: `IRGatedMLP` (gate and up joined)
    or `IRJoinedGatedMLP` (joined already), run on a probe beside the MLP before it may
    replace it; else ``(None, why)``."""
    layers = [getattr(mlp, name) for name in parts]
    if len(parts) == 3:
        # a quantized layer (transformers' FP8, compressed tensors, bitsandbytes) subclasses
        # nn.Linear, but its `weight` is not what it multiplies by: its own forward says how
        own = next((m for m in layers[:2] if type(m).forward is not nn.Linear.forward), None)
        if own is not None:
            return None, (
                f"its gate and up projections are {type(own).__name__}, whose forward is not "
                "nn.Linear's: their weights cannot be joined (a quantized layer's)"
            )
    activation, why = _mlp_activation(mlp, parts, config)
    if activation is None:
        return None, why
    gate_scale, output_scale = _mlp_scales(mlp)
    if len(parts) == 3:
        gate, up, down = layers
        converted: nn.Module = IRGatedMLP(
            gate,
            up,
            down,
            activation,
            gate_scale=gate_scale,
            output_scale=output_scale,
            names=(parts[0], parts[1], parts[2]),
        )
    elif (gate_scale, output_scale) != (1.0, 1.0):
        return None, "a joined gate-up layer with multipliers"
    else:
        gate_up, down = layers
        converted = IRJoinedGatedMLP(gate_up, down, activation, (parts[0], parts[1]))
    rows = probe((3, layers[0].in_features), layers[0].weight.device).to(input_dtype(mlp))
    try:
        with torch.no_grad():
            same = close(converted(rows), mlp(rows))
    except Exception as error:
        return None, f"the converted MLP failed on a probe ({type(error).__name__}: {error})"
    if not same:
        return None, "the converted MLP does not compute what its forward does on a probe"
    return converted, ""


def _mlp_scales(mlp: nn.Module) -> tuple[float, float]:
    """The multipliers of a gated MLP's gate and output (Falcon-H1's ``gate_multiplier`` and
    ``down_multiplier``; 1 where it has none), which `IRGatedMLP` takes."""
    return (
        float(getattr(mlp, "gate_multiplier", 1.0)),
        float(getattr(mlp, "down_multiplier", 1.0)),
    )


def _gated_mlp_reference(
    mlp: nn.Module, parts: tuple[str, ...], activation: str, x: Tensor
) -> Tensor:
    """``down(act(gate(x) * g) * up(x)) * d`` through the MLP's own layers `parts`, with its
    multipliers ``(g, d)`` (`_mlp_scales`)."""
    approximate = GATED_ACTIVATIONS[activation]
    layers = [getattr(mlp, name) for name in parts]
    if len(layers) == 3:
        gate, up = layers[0](x), layers[1](x)
    else:
        gate, up = layers[0](x).chunk(2, dim=-1)
    gate_scale, output_scale = _mlp_scales(mlp)
    out: Tensor = layers[-1](reference_gate(gate * gate_scale, approximate) * up) * output_scale
    return out


def _weightless_norm_eps(module: nn.Module, device: torch.device) -> float | None:
    """The epsilon of a norm without a weight that computes ``x / rms`` (Llama 4's query and
    key norm), found by running it on a float32 probe beside the op's; else None."""
    eps = _norm_epsilon(module)
    if (
        not type(module).__name__.endswith("Norm")
        or not isinstance(eps, float)
        or next(module.parameters(), None) is not None
        or next(module.buffers(), None) is not None
        or device.type == "meta"
    ):
        return None
    x = probe((4, 48), device)
    try:
        with torch.no_grad():
            got = module(x)
    except Exception:  # a norm of another shape (groups, channels): not this form
        return None
    return eps if _same_as_rms_norm(got, x, None, eps) else None


def _is_rms_norm(module: nn.Module) -> bool:
    return type(module).__name__.endswith("RMSNorm") and isinstance(
        getattr(module, "weight", None), nn.Parameter
    )


def _gated_mlp_parts(module: nn.Module) -> tuple[str, ...] | None:
    """The names of a gated MLP's layers, where `module` is one: gate, up and down (one of
    `_MLP_PARTS`), or gate-up and down (one of `_JOINED_MLP_PARTS`)."""
    forms = (*_MLP_PARTS, *_JOINED_MLP_PARTS)
    return next((parts for parts in forms if has_linears(module, parts)), None)


def _is_gated_mlp(module: nn.Module) -> bool:
    return _gated_mlp_parts(module) is not None


def _is_mixture_of_experts(module: nn.Module) -> bool:
    """A routed block whose experts are not separate gated MLPs: transformers 5 holds them as
    one tensor per projection (a list of gated MLPs would convert one by one)."""
    experts = getattr(module, "experts", None)
    return (
        isinstance(experts, nn.Module)
        and (hasattr(module, "gate") or hasattr(module, "router"))
        and not any(_is_gated_mlp(m) for m in experts.children())
    )


#: gate, up and down: most families'; LFM2's
_MLP_PARTS = (("gate_proj", "up_proj", "down_proj"), ("w1", "w3", "w2"))
#: Phi-3's; Granite MoE's shared expert's
_JOINED_MLP_PARTS = (("gate_up_proj", "down_proj"), ("input_linear", "output_linear"))


def _set_submodule(root: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    setattr(root.get_submodule(parent_path) if parent_path else root, name, module)


#: the modules a conversion puts in: a model holding one was converted
_CONVERTED_MODULES = (IRRMSNorm, IRGatedMLP, IRJoinedGatedMLP, IRRotaryCache)


def convert_hf_model(model: nn.Module, *, max_positions: int | None = None) -> ConversionReport:
    """Swap the norms, gated MLPs, routed experts' gating and rotary embeddings of a
    ``transformers`` model of a type in `SUPPORTED_MODEL_TYPES` (``*ForCausalLM`` or the bare
    model) for IR ops, in place.

    `max_positions`: the rows of the rotary table (float32, ``rotary dim`` wide), so the
    positions the converted model can run, 0 to ``max_positions - 1``; by default the config's
    ``max_position_embeddings`` (Llama 4 Scout's 10M would make a 5 GiB table: give the
    longest sequence you serve).

    Raises ValueError for other model types, for a model converted already and for a
    `max_positions` below 1. Parts that cannot be converted exactly (another activation, a
    norm of another form, an attention of another form) are left as they are and listed in
    the report's ``skipped``. A rope whose frequencies change with the sequence length
    (`DYNAMIC_ROPE_TYPES`) is computed at each call, so `max_positions` bounds only its
    probes.
    """
    if max_positions is not None and (
        isinstance(max_positions, bool) or not isinstance(max_positions, int) or max_positions < 1
    ):
        raise ValueError(
            f"convert_hf_model: argument 'max_positions' got {max_positions!r}; expected a "
            "positive int or None"
        )
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        # the types named in full are too many to read in a message: the first few, and where
        # the rest are
        some = ", ".join(SUPPORTED_MODEL_TYPES[:6])
        raise ValueError(
            f"convert_hf_model: got a model of type {model_type!r}; expected a transformers "
            f"model of one of the {len(SUPPORTED_MODEL_TYPES)} types in "
            f"ir_stack.models.hf.SUPPORTED_MODEL_TYPES ({some}, ...)"
            f"{_language_model_hint(model)}"
        )
    assert config is not None
    converted_already = next(
        ((p, m) for p, m in model.named_modules() if isinstance(m, _CONVERTED_MODULES)), None
    )
    if converted_already is not None:
        path, module = converted_already
        raise ValueError(
            f"convert_hf_model: argument 'model' is converted already ({path} is an "
            f"{type(module).__name__}); convert each model once"
        )
    import transformers
    from packaging.version import Version

    hf_attention.cache_update_takes_kwargs = Version(transformers.__version__).major >= 5
    report = ConversionReport()
    device = next(model.parameters()).device
    for path, module in list(model.named_modules()):
        if (eps := _weightless_norm_eps(module, device)) is not None:
            _set_submodule(model, path, IRRMSNorm(None, eps))
            report.norms.append(path)
        elif _is_rms_norm(module):
            eps = _norm_epsilon(module)
            eps = 1e-6 if eps is None else float(eps)
            offset = _norm_offset(module, eps)
            if offset is None:
                report.skipped[path] = "computes neither x / rms * w nor x / rms * (1 + w)"
                continue
            _set_submodule(model, path, IRRMSNorm(module.weight, eps, offset))
            report.norms.append(path)
        elif _is_mixture_of_experts(module):
            experts_path = f"{path}.experts" if path else "experts"
            why = convert_experts(module.experts)
            if why:
                report.skipped[experts_path] = why
                continue
            report.experts.append(experts_path)
        elif (parts := _gated_mlp_parts(module)) is not None:
            converted, why = _convert_gated_mlp(module, parts, config)
            if converted is None:
                report.skipped[path] = why
                continue
            _set_submodule(model, path, converted)
            report.mlps.append(path)
    positions = int(config.max_position_embeddings) if max_positions is None else max_positions
    rotary = convert_rotary(model, positions)
    report.attentions.extend(rotary.attentions)
    report.skipped.update(rotary.skipped)
    logger.info("convert_hf_model: %s", report)
    return report


#: where multimodal models hold their language model: Llama 4's, Gemma 3's
_LANGUAGE_MODEL_PATHS = ("language_model", "model.language_model")


def _language_model_hint(model: nn.Module) -> str:
    """Where a multimodal model's language model is of a type `convert_hf_model` takes, how to
    convert it; else ``""``."""
    for path in _LANGUAGE_MODEL_PATHS:
        try:
            language_model = model.get_submodule(path)
        except AttributeError:
            continue
        text_type = getattr(getattr(language_model, "config", None), "model_type", None)
        if text_type in SUPPORTED_MODEL_TYPES:
            return (
                f"; its language model is of type {text_type!r}: convert that, "
                f"convert_hf_model(model.{path})"
            )
    return ""
