"""`convert_hf_model`: run a Hugging Face ``transformers`` model on IR ops: Llama, Mistral,
Ministral and Ministral 3, Qwen2, Qwen3, Gemma 1-3 (text), VaultGemma, Phi-3 (Phi-4), Granite,
OLMo 2 and 3, GLM and GLM-4, ERNIE 4.5, Helium, Seed-OSS, SmolLM3, Cohere (Command R) and
Cohere 2, EXAONE 4, Hunyuan, Apertus and Apertus 1.5, Arcee, CWM, and the mixtures of experts
Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, FlexOlmo, Granite MoE (and its shared-expert form),
GLM-4 MoE, ERNIE 4.5 MoE, Cohere 2 MoE, EXAONE MoE, Hunyuan MoE, HY V3, dots.llm1, MiniMax M2,
Solar Open, Mellum, Llama 4 (text), GPT-OSS (its experts, which clamp their gate, stay) and
DeepSeek V2 and V3 (their latent attention, which rotates its own way, stays).

The conversion is in place and keeps the weights (the same ``Parameter`` objects):

- every RMSNorm becomes `IRRMSNorm` (``ir_spec.ops.rms_norm``), so does a norm without a weight
  (Llama 4's query and key norm); Gemma's, which scale by
  ``1 + weight`` in float32, take that sum as a float32 weight whatever the model's dtype
  (rounded to bf16 it would round the scale);
- every gated MLP with a SiLU or GELU activation (exact or tanh) becomes `IRGatedMLP`: gate and
  up projections joined into one ``gate_up`` linear layer, then ``ir_spec.ops.silu_and_mul`` or
  ``gelu_and_mul``; Phi-3's, joined already, become `IRJoinedGatedMLP` around its own layers;
- rotary embeddings are applied by ``ir_spec.ops.rotary_embedding``: the model's rotary module
  becomes `IRRotaryCache` (one ``cos_sin_cache`` table computed from its frequencies; Gemma
  3's local and global ropes one each), and each attention layer rotates its projections with
  it before the model's own attention function runs, in the form that the model's
  ``apply_rotary_pos_emb`` (Llama 4: ``apply_rotary_emb``, by complex numbers) is found to
  rotate by a probe: the halves of each head, or pairs (GLM, ERNIE, Helium, Cohere, Llama 4).
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
  attention function other queries, keys or values than its own, or make another output of
  that function's answer (a gate after attention), stays as it is. A model with
  an attention layer of another form (DeepSeek's latent attention) keeps its rotary module;
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
whatever its class is called. The MLP weights joined here are copies: load weights before
converting (Phi-3's MLPs keep their own layers, and Gemma's norm scales follow their weights
through ``load_state_dict``).

``transformers`` is imported only by the functions that need it; it is not a dependency of
ir-stack (``pip install ir-stack[hf]`` adds it).
"""

import copy
import functools
import inspect
import logging
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ir_spec import ops

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
)
#: rope types whose frequencies are fixed at construction (a table holds them exactly);
#: ``ntk_alpha`` is Hunyuan's NTK scaling with a fixed alpha, which only stretches the base
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "ntk_alpha")


@dataclass
class ConversionReport:
    """What `convert_hf_model` replaced, by module path, and what it left alone and why."""

    norms: list[str] = field(default_factory=list)
    mlps: list[str] = field(default_factory=list)
    attentions: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    #: routed experts whose gating runs on the IR op (their module keeps its class)
    experts: list[str] = field(default_factory=list)


class IRRMSNorm(nn.Module):
    """RMSNorm over the last dimension with ``ir_spec.ops.rms_norm``; `weight` None for a norm
    without one (Llama 4's query and key norms). With `offset` (Gemma's norms: 1) the op's
    weight is ``offset + weight`` in float32, computed here and again after every move or cast
    of the module (``.to``, ``.cuda``, ``.half``: never rounded to the model's dtype) and every
    ``load_state_dict``; the module keeps `weight` itself, so its state dict is the original's.
    The sum is made without autograd: the conversion is for inference, and gradients would not
    reach `weight` through it."""

    weight: nn.Parameter | None
    scale: Tensor | None

    def __init__(self, weight: nn.Parameter | None, eps: float, offset: float = 0.0) -> None:
        super().__init__()
        if weight is None and offset:
            raise ValueError(
                f"IRRMSNorm: argument 'offset' got {offset!r} without a weight; expected 0"
            )
        self.weight = weight
        self.eps = eps
        self.offset = offset
        self.register_buffer("scale", None, persistent=False)
        self.refresh_scale()
        refresh = self.register_load_state_dict_post_hook  # torch leaves it untyped
        refresh(lambda module, _keys: module.refresh_scale())  # type: ignore[no-untyped-call]

    def refresh_scale(self) -> None:
        """Compute the op's weight, ``offset + weight`` in float32, from `weight` as it is."""
        if self.offset and self.weight is not None:
            with torch.no_grad():
                self.scale = self.weight.detach().float() + self.offset

    def _apply(self, fn: Any, recurse: bool = True) -> "IRRMSNorm":
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        self.refresh_scale()  # from the moved weight, so float32 again after a cast
        return self

    def forward(self, x: Tensor) -> Tensor:
        weight = self.weight if self.scale is None else self.scale
        out: Tensor = ops.rms_norm(x, weight, self.eps)
        return out

    def extra_repr(self) -> str:
        offset = f", offset={self.offset}" if self.offset else ""
        width = "no weight" if self.weight is None else str(tuple(self.weight.shape))
        return f"{width}, eps={self.eps}{offset}"


#: the gated activations the IR has: name -> None for ``silu_and_mul``, else the
#: ``approximate`` argument of ``gelu_and_mul``
GATED_ACTIVATIONS: dict[str, str | None] = {"silu": None, "gelu": "none", "gelu_tanh": "tanh"}


def _gate(x: Tensor, approximate: str | None) -> Tensor:
    """The activation a `GATED_ACTIVATIONS` entry applies to the gate, in torch."""
    if approximate is None:
        return torch.nn.functional.silu(x)
    return torch.nn.functional.gelu(x, approximate=approximate)


class IRGatedMLP(nn.Module):
    """``down_proj(act_and_mul(gate_up(x)))``: the gate and up projections as one matrix, then
    ``ir_spec.ops.silu_and_mul`` or ``gelu_and_mul`` (`activation`, a `GATED_ACTIVATIONS`
    name)."""

    def __init__(
        self,
        gate_proj: nn.Linear,
        up_proj: nn.Linear,
        down_proj: nn.Linear,
        activation: str = "silu",
    ) -> None:
        super().__init__()
        _check_activation("IRGatedMLP", activation)
        self.activation = activation
        bias = gate_proj.bias is not None
        self.gate_up = nn.Linear(
            gate_proj.in_features,
            gate_proj.out_features + up_proj.out_features,
            bias=bias,
            device=gate_proj.weight.device,
            dtype=gate_proj.weight.dtype,
        )
        with torch.no_grad():
            self.gate_up.weight.copy_(torch.cat([gate_proj.weight, up_proj.weight]))
            if bias:
                self.gate_up.bias.copy_(torch.cat([gate_proj.bias, up_proj.bias]))
        self.down_proj = down_proj

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.down_proj(_act_and_mul(self.gate_up(x), self.activation))
        return out

    def extra_repr(self) -> str:
        return f"activation={self.activation}"


class IRJoinedGatedMLP(nn.Module):
    """A gated MLP whose gate and up projections are one layer already, gate rows first (Phi-3's
    ``gate_up_proj`` and ``down_proj``; Granite MoE's shared expert's ``input_linear`` and
    ``output_linear``): ``down(act_and_mul(gate_up(x)))``. It holds the original layers under
    their own `names`, so its state dict is the original's."""

    def __init__(
        self,
        gate_up: nn.Linear,
        down: nn.Linear,
        activation: str,
        names: tuple[str, str] = ("gate_up_proj", "down_proj"),
    ) -> None:
        super().__init__()
        _check_activation("IRJoinedGatedMLP", activation)
        self.activation = activation
        self.names = names
        setattr(self, names[0], gate_up)
        setattr(self, names[1], down)

    def forward(self, x: Tensor) -> Tensor:
        gate_up, down = (getattr(self, name) for name in self.names)
        out: Tensor = down(_act_and_mul(gate_up(x), self.activation))
        return out

    def extra_repr(self) -> str:
        return f"activation={self.activation}"


def _check_activation(owner: str, activation: str) -> None:
    if activation not in GATED_ACTIVATIONS:
        raise ValueError(
            f"{owner}: argument 'activation' got {activation!r}; expected one of "
            f"{list(GATED_ACTIVATIONS)}"
        )


def _act_and_mul(h: Tensor, activation: str) -> Tensor:
    """``act(h[..., :d]) * h[..., d:]`` with the IR op of `activation`."""
    approximate = GATED_ACTIVATIONS[activation]
    out: Tensor = ops.silu_and_mul(h) if approximate is None else ops.gelu_and_mul(h, approximate)
    return out


class IRRotaryCache(nn.Module):
    """Stands in for the model's rotary module: returns ``(cos_sin_cache, positions)`` instead
    of ``(cos, sin)``; converted attention layers take that pair.

    `tables` maps a layer type to its ``(inv_freq, attention_scaling)``; a model with one rope
    for every layer has the single type None. Gemma 3's module is asked per layer type
    (``"sliding_attention"`` and ``"full_attention"`` have their own frequencies): each type
    gets its own table, ``<type>_cos_sin_cache`` (``cos_sin_cache`` for None)."""

    def __init__(self, tables: dict[str | None, tuple[Tensor, float]], max_positions: int) -> None:
        super().__init__()
        self.layer_types = list(tables)
        for layer_type, (inv_freq, scaling) in tables.items():
            positions = torch.arange(max_positions, dtype=torch.float32, device=inv_freq.device)
            freqs = torch.outer(positions, inv_freq.float())
            cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1) * scaling
            self.register_buffer(self._buffer_name(layer_type), cache, persistent=False)

    @staticmethod
    def _buffer_name(layer_type: str | None) -> str:
        return "cos_sin_cache" if layer_type is None else f"{layer_type}_cos_sin_cache"

    def cache_for(self, layer_type: str | None = None) -> Tensor:
        """The ``cat(cos, sin)`` table of `layer_type`'s rope."""
        if layer_type not in self.layer_types:
            raise ValueError(
                f"IRRotaryCache: argument 'layer_type' got {layer_type!r}; expected one of "
                f"{self.layer_types}"
            )
        table: Tensor = getattr(self, self._buffer_name(layer_type))
        return table

    def forward(
        self, x: Tensor, position_ids: Tensor, layer_type: str | None = None
    ) -> tuple[Tensor, Tensor]:
        # transformers passes one row of positions for a whole batch; the rotary kernels read
        # a dense position per token (a broadcast one sent them to the native function), so
        # the rows are copied out once here rather than in every layer
        positions = position_ids.expand(x.shape[:-1]).contiguous()
        return self.cache_for(layer_type), positions


@dataclass(frozen=True)
class QueryScale:
    """A layer's queries scaled by their position ``p``, after the rotation and the norms, by
    ``1 + beta * log1p(floor((p + offset) / length))``. Ministral 3's (its rope's
    ``llama_4_scaling_beta``): ``p`` the caller's positions, the scale rounded to the queries'
    dtype before the product. Llama 4's NoPE layers' temperature: ``p`` counted in the cache
    (its length before the call plus the token's index: `from_cache`), from 1 (`offset`), the
    product in float32 and rounded once (`in_float`)."""

    beta: float
    length: int
    offset: int = 0
    from_cache: bool = False
    in_float: bool = False

    def apply(self, q: Tensor, positions: Tensor) -> Tensor:
        """`q` ``[..., tokens, width]`` scaled at `positions` (``[..., tokens]``)."""
        steps = torch.floor((positions.float() + self.offset) / self.length)
        scale = (1 + self.beta * torch.log1p(steps)).unsqueeze(-1)
        return (q * scale).to(q.dtype) if self.in_float else q * scale.to(q.dtype)


@dataclass(frozen=True)
class AttentionPlan:
    """How a converted attention layer runs, decided once by `convert_hf_model` from what its
    family's forward does (each family's was read before it joined `SUPPORTED_MODEL_TYPES`)
    and checked by running both on a probe: the converted forward must give the attention
    function the queries, keys and values the original gives it. A converted layer holds its
    plan as ``ir_attention_plan``."""

    #: rotates the halves of each head (Llama, Qwen, Gemma) rather than pairs (GLM, ERNIE)
    neox: bool
    #: False for a layer without rotary embeddings (NoPE: SmolLM3's every fourth layer,
    #: Cohere 2's and EXAONE 4's global layers), found by running its forward with and
    #: without a rotation
    rotates: bool = True
    #: the query and key norms' attribute names, where the layer has them
    head_norms: tuple[str, str] | None = None
    #: each norm over one head (Qwen3, Gemma 3) rather than over its whole projection (OLMo 2)
    norms_per_head: bool = True
    #: the norms applied to the rotated queries and keys (Hunyuan) rather than before
    norms_after_rotation: bool = False
    #: the queries scaled by their position last (Ministral 3, Llama 4's NoPE layers), or None
    query_scale: QueryScale | None = None
    #: the keyword arguments the layer's own forward gives its attention function beside
    #: dropout, scaling and its caller's (a sliding window, Gemma 2's logit cap), found by
    #: running it
    attention_kwargs: dict[str, Any] = field(default_factory=dict)
    #: the keyword arguments it gives from the layer's own parameters or buffers (GPT-OSS's
    #: attention sinks, ``s_aux``): keyword -> attribute name, read at every call
    attention_tensors: dict[str, str] = field(default_factory=dict)
    #: whether the forward hands its caller's ``position_ids`` on to the attention function
    #: (most take them in ``**kwargs`` and do; Ministral 3 under transformers 5.17 names and
    #: keeps them)
    passes_position_ids: bool = True


def _rotary_attention_forward(
    self: Any,  # a transformers attention module (q_proj, k_proj, v_proj or qkv_proj; o_proj)
    hidden_states: Tensor,
    position_embeddings: tuple[Tensor, Tensor],
    attention_mask: Tensor | None = None,
    *args: Any,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """The forward of a converted attention layer (bound to the instance)."""
    plan = self.ir_attention_plan
    return _planned_forward(
        self, hidden_states, position_embeddings, attention_mask, plan=plan, **kwargs
    )


def _planned_forward(
    self: Any,
    hidden_states: Tensor,
    position_embeddings: tuple[Tensor, Tensor],
    attention_mask: Tensor | None,
    *,
    plan: AttentionPlan,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """A converted attention layer's forward, as `plan` says."""
    cos_sin_cache, positions = position_embeddings  # positions: one per token, dense
    input_shape = hidden_states.shape[:-1]
    cache = kwargs.pop("cache", None) or kwargs.pop("past_key_values", None)
    scale_positions = positions
    if plan.query_scale is not None and plan.query_scale.from_cache:
        seen = cache.get_seq_length(self.layer_idx) if cache is not None else 0
        scale_positions = torch.arange(input_shape[-1], device=positions.device) + seen
    q, k, v = _queries_keys_values(
        self, plan, hidden_states, cos_sin_cache, positions, scale_positions
    )
    if cache is not None:
        k, v = _update_cache(cache, k, v, self.layer_idx, kwargs)
    kwargs.update(plan.attention_kwargs)
    kwargs.update((key, getattr(self, name)) for key, name in plan.attention_tensors.items())
    if not plan.passes_position_ids:
        kwargs.pop("position_ids", None)
    attend = _attention_function(self)
    out, weights = attend(
        self,
        q,
        k,
        v,
        attention_mask,
        dropout=self.attention_dropout if self.training else 0.0,
        scaling=self.scaling,
        **kwargs,
    )
    out = out.reshape(*input_shape, -1).contiguous()
    return self.o_proj(out), weights


def _queries_keys_values(
    attention: Any,
    plan: AttentionPlan,
    hidden_states: Tensor,
    cos_sin_cache: Tensor,
    positions: Tensor,
    scale_positions: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """What a converted layer gives its attention function: queries, keys and values,
    ``[batch, heads, tokens, head_dim]``, projected, normed, rotated (at `positions`) and
    scaled (at `scale_positions`) as `plan` says."""
    head_dim: int = attention.head_dim
    q, k, v = _project_qkv(attention, hidden_states)
    if plan.head_norms is not None and not plan.norms_after_rotation:
        q, k = _norm_heads(attention, plan, q, k)
    if plan.rotates:
        q, k = ops.rotary_embedding(positions, q, k, head_dim, cos_sin_cache, plan.neox)
    if plan.head_norms is not None and plan.norms_after_rotation:
        q, k = _norm_heads(attention, plan, q, k)
    if plan.query_scale is not None:
        q = plan.query_scale.apply(q, scale_positions)
    hidden_shape = (*hidden_states.shape[:-1], -1, head_dim)
    q, k, v = (t.view(hidden_shape).transpose(1, 2) for t in (q, k, v))
    return q, k, v


def _norm_heads(attention: Any, plan: AttentionPlan, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """The query and key norms of `plan`, on ``[tokens, heads * head_dim]`` projections."""
    assert plan.head_norms is not None
    q_norm, k_norm = (getattr(attention, name) for name in plan.head_norms)
    if not plan.norms_per_head:
        return q_norm(q), k_norm(k)
    head_dim: int = attention.head_dim
    return (
        q_norm(q.unflatten(-1, (-1, head_dim))).flatten(-2),
        k_norm(k.unflatten(-1, (-1, head_dim))).flatten(-2),
    )


def _project_qkv(attention: Any, hidden_states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Queries, keys and values: from three layers, or from Phi-3's one ``qkv_proj`` (views of
    its output, rows a stride apart, which the rotary kernels take)."""
    if not hasattr(attention, "qkv_proj"):
        return (
            attention.q_proj(hidden_states),
            attention.k_proj(hidden_states),
            attention.v_proj(hidden_states),
        )
    head_dim: int = attention.head_dim
    query = attention.config.num_attention_heads * head_dim
    key_value = attention.config.num_key_value_heads * head_dim
    q, k, v = attention.qkv_proj(hidden_states).split([query, key_value, key_value], dim=-1)
    return q, k, v


#: transformers 5 passes the call's keyword arguments to ``Cache.update``, 4 a dict; set once
#: by `convert_hf_model` (a plain global, read on every attention call and under Dynamo)
_cache_update_takes_kwargs = True


def _update_cache(cache: Any, k: Tensor, v: Tensor, layer: int, kwargs: dict[str, Any]) -> Any:
    if _cache_update_takes_kwargs:
        return cache.update(k, v, layer, kwargs=kwargs)
    return cache.update(k, v, layer, {"cache_position": kwargs.get("cache_position")})


def _attention_function(attention: nn.Module) -> Any:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    implementation = getattr(attention.config, "_attn_implementation", None) or "eager"
    if implementation == "eager":
        return sys.modules[type(attention).__module__].eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS[implementation]


#: seed of every probe input (norms, activations, the rotation form, attention plans); fixed,
#: so conversions repeat
_PROBE_SEED = 20261130


def _probe(shape: tuple[int, ...], device: torch.device) -> Tensor:
    generator = torch.Generator().manual_seed(_PROBE_SEED)
    return torch.randn(shape, generator=generator).mul_(3).to(device)


def _norm_offset(module: nn.Module, eps: float) -> float | None:
    """0 where `module` computes ``x / rms * weight``, 1 where it computes
    ``x / rms * (1 + weight)`` (Gemma), None otherwise: run on a float32 probe beside both."""
    weight: Tensor = module.weight  # type: ignore[assignment]
    if weight.device.type == "meta":
        return None
    x = _probe((4, weight.shape[-1]), weight.device)
    with torch.no_grad():
        got = module(x).float()
        for offset in (0.0, 1.0):
            want = ops.rms_norm.native(x, weight.float() + offset, eps)
            if torch.allclose(got, want, rtol=1e-5, atol=1e-6):
                return offset
    return None


def _gated_activation(mlp: nn.Module) -> str | None:
    """The `GATED_ACTIVATIONS` name of the MLP's ``act_fn`` (Phi-3: ``activation_fn``, Granite
    MoE's shared expert: ``activation``), or None where it has none or computes none of them:
    run on a float32 probe beside each."""
    act_fn = next(
        (
            f
            for n in ("act_fn", "activation_fn", "activation")
            if callable(f := getattr(mlp, n, None))
        ),
        None,
    )
    weight = next(mlp.parameters(), None)
    if act_fn is None or weight is None or weight.device.type == "meta":
        return None
    x = _probe((97,), weight.device)
    with torch.no_grad():
        got = act_fn(x).float()
        for name, approximate in GATED_ACTIVATIONS.items():
            if torch.allclose(got, _gate(x, approximate), rtol=1e-6, atol=1e-7):
                return name
    return None


def _weightless_norm_eps(module: nn.Module, device: torch.device) -> float | None:
    """The epsilon of a norm without a weight that computes ``x / rms`` (Llama 4's query and
    key norm), found by running it on a float32 probe beside the op's; else None."""
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if (
        not type(module).__name__.endswith("Norm")
        or not isinstance(eps, float)
        or next(module.parameters(), None) is not None
        or next(module.buffers(), None) is not None
        or device.type == "meta"
    ):
        return None
    x = _probe((4, 48), device)
    try:
        with torch.no_grad():
            got = module(x)
    except Exception:  # a norm of another shape (groups, channels): not this form
        return None
    want = ops.rms_norm.native(x, None, eps)
    same = isinstance(got, Tensor) and got.shape == want.shape
    return eps if same and torch.allclose(got.float(), want, rtol=1e-5, atol=1e-6) else None


def _is_rms_norm(module: nn.Module) -> bool:
    return type(module).__name__.endswith("RMSNorm") and isinstance(
        getattr(module, "weight", None), nn.Parameter
    )


def _has_linears(module: nn.Module, names: tuple[str, ...]) -> bool:
    return all(isinstance(getattr(module, n, None), nn.Linear) for n in names)


def _gated_mlp_parts(module: nn.Module) -> tuple[str, ...] | None:
    """The names of a gated MLP's layers, where `module` is one: gate, up and down
    (`_MLP_PARTS`), or gate-up and down (one of `_JOINED_MLP_PARTS`)."""
    forms = (_MLP_PARTS, *_JOINED_MLP_PARTS)
    return next((parts for parts in forms if _has_linears(module, parts)), None)


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


def _convert_experts(experts: Any) -> str:
    """Make the routed `experts` gate with the IR op, through their ``_apply_gate`` hook
    (`_experts_gating`) or, for Llama 4's, their forward (`_batched_experts_gating`); an
    instance attribute either way, so the class and every other model's experts keep theirs.
    Return why not, or ``""``."""
    if getattr(type(experts), "_apply_gate", None) is not None:
        activation, why = _experts_gating(experts)
        if activation is not None:
            experts._apply_gate = functools.partial(_act_and_mul, activation=activation)
        return why
    activation, why = _batched_experts_gating(experts)
    if activation is not None:
        experts.forward = functools.partial(_batched_experts_forward, experts, activation)
    return why


def _batched_experts_forward(experts: Any, activation: str, hidden_states: Tensor) -> Tensor:
    """Llama 4's routed experts' forward, gating with the IR op: the rows of each expert in
    turn (``[experts x rows, hidden]``) through its slice of ``gate_up_proj`` ``[experts,
    hidden, 2 x width]`` (gate columns first), `_act_and_mul`, and its ``down_proj``."""
    experts_count, hidden, _ = experts.gate_up_proj.shape
    rows = hidden_states.view(experts_count, -1, hidden)
    gated = _act_and_mul(torch.bmm(rows, experts.gate_up_proj), activation)
    out: Tensor = torch.bmm(gated, experts.down_proj).view(-1, hidden)
    return out


def _batched_experts_gating(experts: nn.Module) -> tuple[str | None, str]:
    """The `GATED_ACTIVATIONS` name of routed experts without an ``_apply_gate`` hook that
    gate inline in their own forward on batched products with one gate-up tensor per layer
    (Llama 4's), where that forward computes `_batched_experts_forward`'s (run both on a
    probe); else ``(None, why)``."""
    gate_up, down = (getattr(experts, name, None) for name in ("gate_up_proj", "down_proj"))
    if not all(isinstance(w, nn.Parameter) and w.dim() == 3 for w in (gate_up, down)):
        return None, "mixture of experts: its routed experts have no _apply_gate hook"
    assert isinstance(gate_up, nn.Parameter)
    if gate_up.device.type == "meta":
        return None, "mixture of experts: its routed experts are on the meta device"
    activation = _gated_activation(experts)
    if activation is None:
        return None, "mixture of experts: its experts' activation is not silu or gelu"
    rows = _probe((2 * gate_up.shape[0], gate_up.shape[1]), gate_up.device).to(gate_up.dtype)
    try:
        with torch.no_grad():
            want = experts(rows)
            got = _batched_experts_forward(experts, activation, rows)
    except Exception as error:
        return None, f"mixture of experts: its experts failed on a probe ({error})"
    if not _close(got, want):
        return None, "mixture of experts: its routed experts gate in their own way"
    return activation, ""


def _experts_gating(experts: nn.Module) -> tuple[str | None, str]:
    """The `GATED_ACTIVATIONS` name the routed `experts` gate with, where the IR op can do it
    through their ``_apply_gate`` hook; else ``(None, why)``. The hook must be transformers'
    default (gate rows first, then up rows: ``silu_and_mul``'s layout; a model with its own,
    as GPT-OSS's clamped one, keeps it) and called: the ``"eager"`` implementation gates
    inline."""
    hook = getattr(type(experts), "_apply_gate", None)
    from transformers.integrations import moe

    default = getattr(moe, "_default_apply_gate", None)  # private: absent, nothing converts
    if hook is not default or not getattr(experts, "is_concatenated", False):
        return None, "mixture of experts: its routed experts gate in their own way"
    config = getattr(experts, "config", None)
    implementation = getattr(config, "_experts_implementation", None)
    if implementation in (None, "eager"):
        return None, (
            f"mixture of experts: experts implementation {implementation!r} gates inline; "
            "'grouped_mm' or 'batched_mm' gate through the IR op"
        )
    activation = _gated_activation(experts)
    if activation is None:
        return None, "mixture of experts: its experts' activation is not silu or gelu"
    return activation, ""


def _is_attention(module: nn.Module) -> bool:
    return type(module).__name__.endswith("Attention") and (
        _has_linears(module, _ATTENTION_PARTS) or _has_linears(module, _JOINED_ATTENTION_PARTS)
    )


#: the query and key norms' attribute names: most families', Hunyuan's, Llama 4's (one norm
#: without a weight for both)
_HEAD_NORM_NAMES = (
    ("q_norm", "k_norm"),
    ("query_layernorm", "key_layernorm"),
    ("qk_norm", "qk_norm"),
)
#: families whose query and key norms take the rotated projections
_NORMS_AFTER_ROTATION = ("hunyuan_v1_dense", "hunyuan_v1_moe", "llama4_text")


def _query_scale(attention: Any) -> QueryScale | None:
    """The layer's query scale by position, as its family's forward computes it."""
    config = attention.config
    if config.model_type == "ministral3":
        rope = config.rope_parameters
        beta, length = rope["llama_4_scaling_beta"], rope["original_max_position_embeddings"]
        return QueryScale(float(beta), int(length))
    if (
        config.model_type == "llama4_text"
        and config.attn_temperature_tuning
        and not attention.use_rope
    ):
        length = int(config.floor_scale)
        return QueryScale(float(config.attn_scale), length, 1, from_cache=True, in_float=True)
    return None


def _attention_plan(
    attention: Any, neox: bool, rotary: nn.Module, cache: IRRotaryCache
) -> AttentionPlan | str:
    """What `attention`'s own forward does, as an `AttentionPlan`, checked on a probe; or why
    the converted forward cannot do it."""
    names = next(
        (p for p in _HEAD_NORM_NAMES if any(getattr(attention, n, None) is not None for n in p)),
        None,
    )
    per_head = True
    if names is not None:
        form = _head_norm_form(attention, names)
        if form is None:
            return "query / key norms neither over one head nor over the projection"
        per_head = form
    projection = attention.q_proj if hasattr(attention, "q_proj") else attention.qkv_proj
    weight: Tensor = projection.weight
    if weight.device.type == "meta":
        return "its weights are on the meta device"
    layer_type = cache.layer_types[0]
    table = cache.cache_for(layer_type)
    hidden = _probe((1, 2, projection.in_features), weight.device).to(weight.dtype)
    # the last positions show what changes far out (the query scales): the last row of the
    # table, and a cache as long as the table less the probe's two tokens (Llama 4's scale)
    last = table.shape[0] - 1
    positions = torch.tensor([[1, last]], device=weight.device)
    scale = _query_scale(attention)
    from_cache = scale is not None and scale.from_cache
    seen = last - 1 if from_cache else None
    own = type(attention).forward
    try:
        with torch.no_grad():
            embeddings = rotary(hidden, positions, *(() if layer_type is None else (layer_type,)))
            original = _run_probe_forward(attention, own, hidden, embeddings, positions, seen)
            unrotated = _run_probe_forward(
                attention, own, hidden, _identity_rotation(embeddings), positions, seen
            )
    except Exception as error:  # the layer stays as it is; the report says why
        return f"its forward failed on a probe ({type(error).__name__}: {error})"
    if isinstance(original, str) or isinstance(unrotated, str):
        return original if isinstance(original, str) else str(unrotated)
    call = original.call
    kwargs = {k: v for k, v in call.kwargs.items() if k not in _OWN_ATTENTION_KWARGS}
    held = (*attention.named_parameters(recurse=False), *attention.named_buffers(recurse=False))
    owned = {id(t): name for name, t in held}
    tensors = {k: owned.get(id(v)) for k, v in kwargs.items() if isinstance(v, Tensor)}
    if None in tensors.values():
        other = next(k for k, name in tensors.items() if name is None)
        return f"its forward gives its attention function a tensor, {other!r}, not one it holds"
    kwargs = {k: v for k, v in kwargs.items() if k not in tensors}
    plan = AttentionPlan(
        neox=neox,
        rotates=not torch.equal(call.query, unrotated.call.query),
        head_norms=names,
        norms_per_head=per_head,
        norms_after_rotation=attention.config.model_type in _NORMS_AFTER_ROTATION,
        query_scale=scale,
        attention_kwargs=kwargs,
        attention_tensors={k: name for k, name in tensors.items() if name is not None},
        passes_position_ids="position_ids" in call.kwargs,
    )
    planned = functools.partial(_planned_forward, plan=plan)
    try:
        with torch.no_grad():
            converted = _run_probe_forward(
                attention, planned, hidden, (table, positions), positions, seen
            )
    except Exception as error:
        return f"the converted forward failed on a probe ({type(error).__name__}: {error})"
    if isinstance(converted, str):
        return f"the converted forward: {converted}"
    got, want = converted.call, original.call
    if not _same_arguments(got.kwargs, want.kwargs):
        return "the converted forward gives its attention function other keyword arguments"
    if not all(
        _close(g, w)
        for g, w in ((got.query, want.query), (got.key, want.key), (got.value, want.value))
    ):
        return "the converted forward does not give its attention function the original's inputs"
    if not _close(converted.output, original.output):
        return (
            "the converted forward does not make of its attention function's output what the "
            "original does (it does more after attention)"
        )
    return plan


def _same_arguments(got: dict[str, Any], want: dict[str, Any]) -> bool:
    """The same keyword arguments: the same names, equal values (tensors of equal values)."""

    def same(a: Any, b: Any) -> bool:
        if isinstance(b, Tensor):
            return isinstance(a, Tensor) and torch.equal(a, b)
        return bool(a == b)

    return got.keys() == want.keys() and all(same(got[k], v) for k, v in want.items())


def _close(got: Tensor, want: Tensor) -> bool:
    """Equal up to the rounding of the model's dtype (bf16: a few units in the last place)."""
    want = want.float()
    scale = float(want.abs().max())
    return got.shape == want.shape and torch.allclose(
        got.float(), want, rtol=2e-2, atol=2e-2 * scale
    )


def _head_norm_form(attention: Any, names: tuple[str, str]) -> bool | None:
    """True where the query and key norms are each over one head (Qwen3's, Gemma 3's; Cohere's
    with a weight per head), False where each is over its whole projection (OLMo 2's), None
    where neither."""
    norms = [getattr(attention, n, None) for n in names]
    head_dim = getattr(attention, "head_dim", None)
    config = getattr(attention, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None)
    if head_dim is None or heads is None or kv_heads is None:
        return None
    widths = [
        getattr(getattr(n, "weight", None), "shape", None) if isinstance(n, nn.Module) else None
        for n in norms
    ]
    if widths in ([(head_dim,), (head_dim,)], [(heads, head_dim), (kv_heads, head_dim)]):
        return True
    if widths == [None, None] and all(isinstance(n, IRRMSNorm) for n in norms):
        return True  # without weights (Llama 4's): over one head, which the plan check confirms
    if widths == [(heads * head_dim,), (kv_heads * head_dim,)]:
        return False
    return None


@dataclass
class _AttentionCall:
    """What a layer's forward gave its attention function."""

    query: Tensor
    key: Tensor
    value: Tensor
    kwargs: dict[str, Any]


@dataclass
class _ProbeRun:
    """A probe forward of an attention layer: what it gave its attention function, and the
    output it made of that function's answer."""

    call: _AttentionCall
    output: Tensor


#: the calls `_record_attention_call` saw during the probe forward that is running
_probe_calls: list[_AttentionCall] = []


def _record_attention_call(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Any = None,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """Records what it is given and answers, as attention functions do, ``[batch, tokens,
    heads, value width]``: a probe, the same for every call of those shapes."""
    _probe_calls.append(_AttentionCall(query, key, value, kwargs))
    batch, heads, tokens, _ = query.shape
    shape = (batch, tokens, heads, value.shape[-1])
    return _probe(shape, query.device).to(query.dtype), None


#: the name `_record_attention_call` is registered under in transformers' attention functions
_RECORDING_IMPLEMENTATION = "ir_stack_record"
#: the keyword arguments the converted forward passes itself, or takes from its caller
_OWN_ATTENTION_KWARGS = ("dropout", "scaling", "position_ids")


class _ProbeCache:
    """A KV cache that says it has seen `length` tokens and hands back what it is given: where
    a forward counts positions in its cache (Llama 4's query scale), a probe far out."""

    def __init__(self, length: int) -> None:
        self.length = length

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def update(self, key: Tensor, value: Tensor, *args: Any, **_: Any) -> tuple[Tensor, Tensor]:
        return key, value


def _run_probe_forward(
    attention: Any,
    forward: Callable[..., Any],
    hidden: Tensor,
    embeddings: Any,
    positions: Tensor,
    seen: int | None = None,
) -> _ProbeRun | str:
    """Run `forward` (`attention`'s own, or a planned one) on `hidden`, under a config copy
    that names `_record_attention_call` as the attention function: what it gave that function
    and what it returned; or why not, where it called the function other than once. The
    decoder layers pass ``position_ids``; so does this. `seen`: the forward is given a
    `_ProbeCache` of that length."""
    from transformers import AttentionInterface

    AttentionInterface.register(_RECORDING_IMPLEMENTATION, _record_attention_call)
    config = attention.config
    recording = copy.copy(config)
    recording._attn_implementation_internal = _RECORDING_IMPLEMENTATION
    attention.config = recording
    kwargs: dict[str, Any] = {"position_ids": positions}
    if seen is not None:
        # transformers 5.24 names the cache `cache` (`past_key_values` deprecated), 5.17 not
        parameters = inspect.signature(type(attention).forward).parameters
        kwargs["cache" if "cache" in parameters else "past_key_values"] = _ProbeCache(seen)
    _probe_calls.clear()
    try:
        output = forward(attention, hidden, embeddings, None, **kwargs)
    finally:
        attention.config = config
        calls = list(_probe_calls)
        _probe_calls.clear()
    if len(calls) != 1:
        return f"its forward called its attention function {len(calls)} times; expected once"
    return _ProbeRun(calls[0], output[0] if isinstance(output, tuple) else output)


_MLP_PARTS = ("gate_proj", "up_proj", "down_proj")
#: Phi-3's; Granite MoE's shared expert's
_JOINED_MLP_PARTS = (("gate_up_proj", "down_proj"), ("input_linear", "output_linear"))
_ATTENTION_PARTS = ("q_proj", "k_proj", "v_proj", "o_proj")
_JOINED_ATTENTION_PARTS = ("qkv_proj", "o_proj")  # Phi-3


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
    norm of another form, a rope type whose frequencies change with the sequence length) are
    left as they are and listed in the report's ``skipped``.
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
        raise ValueError(
            f"convert_hf_model: got a model of type {model_type!r}; expected a transformers "
            f"model of type {' or '.join(SUPPORTED_MODEL_TYPES)}{_language_model_hint(model)}"
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

    global _cache_update_takes_kwargs
    _cache_update_takes_kwargs = Version(transformers.__version__).major >= 5
    report = ConversionReport()
    device = next(model.parameters()).device
    for path, module in list(model.named_modules()):
        if (eps := _weightless_norm_eps(module, device)) is not None:
            _set_submodule(model, path, IRRMSNorm(None, eps))
            report.norms.append(path)
        elif _is_rms_norm(module):
            eps = float(getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6)))
            offset = _norm_offset(module, eps)
            if offset is None:
                report.skipped[path] = "computes neither x / rms * w nor x / rms * (1 + w)"
                continue
            _set_submodule(model, path, IRRMSNorm(module.weight, eps, offset))
            report.norms.append(path)
        elif _is_mixture_of_experts(module):
            experts_path = f"{path}.experts" if path else "experts"
            why = _convert_experts(module.experts)
            if why:
                report.skipped[experts_path] = why
                continue
            report.experts.append(experts_path)
        elif (parts := _gated_mlp_parts(module)) is not None:
            activation = _gated_activation(module)
            if activation is None:
                name = getattr(config, "hidden_activation", None) or getattr(
                    config, "hidden_act", None
                )
                report.skipped[path] = f"activation {name!r}: not silu, gelu or gelu_pytorch_tanh"
                continue
            if len(parts) == 3:
                gate, up, down = (getattr(module, n) for n in parts)
                converted: nn.Module = IRGatedMLP(gate, up, down, activation)
            else:
                gate_up, down = (getattr(module, n) for n in parts)
                converted = IRJoinedGatedMLP(gate_up, down, activation, (parts[0], parts[1]))
            _set_submodule(model, path, converted)
            report.mlps.append(path)
    positions = int(config.max_position_embeddings) if max_positions is None else max_positions
    _convert_rotary(model, report, positions)
    logger.info(
        "convert_hf_model: %d norms, %d MLPs, %d routed experts' gating, %d attention layers on "
        "IR ops; skipped %s",
        len(report.norms),
        len(report.mlps),
        len(report.experts),
        len(report.attentions),
        report.skipped or "nothing",
    )
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


def _rope_tables(rotary: nn.Module) -> tuple[dict[str | None, tuple[Tensor, float]], str]:
    """The rotary module's ``{layer type: (inv_freq, attention_scaling)}`` (the single type None
    where one rope serves every layer), or ``({}, why)`` where a rope's frequencies are not
    fixed at construction."""
    rope_types = getattr(rotary, "rope_type", "default")
    if isinstance(rope_types, dict):  # Gemma 3: per layer type, as `<type>_inv_freq`
        prefixes: dict[str | None, str] = {t: f"{t}_" for t in rope_types}
    else:
        prefixes, rope_types = {None: ""}, {None: rope_types}
    tables: dict[str | None, tuple[Tensor, float]] = {}
    for layer_type, prefix in prefixes.items():
        rope_type = rope_types[layer_type]
        if rope_type not in STATIC_ROPE_TYPES:
            return {}, f"rope type {rope_type!r} changes its frequencies with the length"
        inv_freq = getattr(rotary, f"{prefix}inv_freq", None)
        if not isinstance(inv_freq, Tensor):
            return {}, f"no {prefix}inv_freq buffer"
        tables[layer_type] = (inv_freq, float(getattr(rotary, f"{prefix}attention_scaling", 1.0)))
    return tables, ""


def _convert_rotary(model: nn.Module, report: ConversionReport, max_positions: int) -> None:
    rotary_paths = [p for p, m in model.named_modules() if p.endswith("rotary_emb")]
    if len(rotary_paths) != 1:
        report.skipped["rotary_emb"] = f"expected one rotary module, found {rotary_paths}"
        return
    path = rotary_paths[0]
    tables, why = _rope_tables(model.get_submodule(path))
    if not tables:
        report.skipped[path] = why
        return
    layers = [(p, m) for p, m in model.named_modules() if type(m).__name__.endswith("Attention")]
    others = [p for p, m in layers if not _is_attention(m)]
    if others or not layers:
        # DeepSeek's latent attention, say: it rotates with the model's (cos, sin) itself
        report.skipped[path] = (
            f"attention of another form in {others[0]}" if others else "no attention layers"
        )
        return
    head_dim = layers[0][1].head_dim
    for inv_freq, _ in tables.values():
        # a rope narrower than the head rotates its leading part (transformers' partial rotary,
        # Phi-3's `partial_rotary_factor`), as the op does
        if 2 * inv_freq.numel() > head_dim:
            report.skipped[path] = f"rotary dimension {2 * inv_freq.numel()} > head_dim {head_dim}"
            return
    # float32 cosines and sines, a row a position
    table_bytes = sum(max_positions * 2 * inv_freq.numel() * 4 for inv_freq, _ in tables.values())
    if table_bytes > _LARGE_TABLE_BYTES:
        logger.warning(
            "convert_hf_model: the rotary table of %d positions takes %.1f GiB; pass "
            "max_positions=<the longest sequence you run> for a smaller one",
            max_positions,
            table_bytes / 2**30,
        )
    cache = IRRotaryCache(tables, max_positions)
    rotary = model.get_submodule(path)
    neox = _rotation_form(rotary, cache, layers[0][1])
    if neox is None:
        report.skipped[path] = (
            "its attention rotates in neither the op's neox nor its interleaved form"
        )
        return
    plans = [(p, m, _attention_plan(m, neox, rotary, cache)) for p, m in layers]
    misfit = next(((p, plan) for p, _, plan in plans if isinstance(plan, str)), None)
    if misfit is not None:
        report.skipped[path] = f"{misfit[1]} in {misfit[0]}"
        return
    _set_submodule(model, path, cache)
    for attention_path, attention, plan in plans:
        attention.ir_attention_plan = plan
        attention.forward = types.MethodType(_rotary_attention_forward, attention)
        report.attentions.append(attention_path)


#: a rotary table larger than this is reported: `convert_hf_model`'s ``max_positions`` shrinks it
_LARGE_TABLE_BYTES = 1 << 30

#: positions of the rotary probe: the first few and some far apart
_PROBE_POSITIONS = (0, 1, 2, 3, 7, 100, 1000)


def _model_rotation(attention: nn.Module) -> Callable[[Tensor, Tensor, Any], Any] | None:
    """The model's own rotation, as ``rotate(q, k, position_embeddings)`` on ``[batch, heads,
    tokens, head_dim]`` heads: ``apply_rotary_pos_emb(q, k, cos, sin)`` (most families), or
    Llama 4's ``apply_rotary_emb(q, k, freqs_cis)``, which takes ``[batch, tokens, heads,
    head_dim]`` heads and complex frequencies; None where the module has neither."""
    module = sys.modules[type(attention).__module__]
    apply = getattr(module, "apply_rotary_pos_emb", None)
    if callable(apply):
        return lambda q, k, embeddings: apply(q, k, *embeddings)
    apply_complex = getattr(module, "apply_rotary_emb", None)
    if not callable(apply_complex):
        return None

    def rotate(q: Tensor, k: Tensor, freqs_cis: Tensor) -> tuple[Tensor, Tensor]:
        q, k = apply_complex(q.transpose(1, 2), k.transpose(1, 2), freqs_cis)
        return q.transpose(1, 2), k.transpose(1, 2)

    return rotate


def _identity_rotation(embeddings: Any) -> Any:
    """Position embeddings of the rotary module's kind that rotate nothing: ``(1, 0)`` for
    ``(cos, sin)``, 1 for complex frequencies (Llama 4's)."""
    if isinstance(embeddings, Tensor):
        return torch.ones_like(embeddings)
    cos, sin = embeddings
    return torch.ones_like(cos), torch.zeros_like(sin)


def _rotation_form(rotary: nn.Module, cache: IRRotaryCache, attention: nn.Module) -> bool | None:
    """True where the model's own rotation (`_model_rotation`), given its rotary module's
    output, rotates as ``rotary_embedding`` with `cache` does in the neox form (the halves of
    each head: Llama, Qwen, Gemma), False where in the interleaved form (pairs: GLM, ERNIE,
    Llama 4's complex numbers), None where in neither. Run on float32 probe heads at every
    layer type's table, so the tables are checked too."""
    rotate = _model_rotation(attention)
    first = cache.cache_for(cache.layer_types[0])
    if rotate is None or first.device.type == "meta":
        return None
    head_dim: int = attention.head_dim  # type: ignore[assignment]
    positions = torch.tensor([p for p in _PROBE_POSITIONS if p < first.shape[0]])
    positions = positions.to(first.device)
    q = _probe((1, 2, len(positions), head_dim), first.device)
    k = q.flip(-1)  # not the query's values
    flat = [t.transpose(1, 2).reshape(len(positions), -1) for t in (q, k)]
    forms = {True, False}
    with torch.no_grad():
        for layer_type in cache.layer_types:
            extra = () if layer_type is None else (layer_type,)
            embeddings = rotary(q, positions[None], *extra)
            want = [t.transpose(1, 2).reshape(len(positions), -1) for t in rotate(q, k, embeddings)]
            table = cache.cache_for(layer_type)
            for neox in list(forms):
                got = ops.rotary_embedding.native(positions, *flat, head_dim, table, neox)
                if not all(
                    torch.allclose(g, w, rtol=1e-4, atol=1e-4)
                    for g, w in zip(got, want, strict=True)
                ):
                    forms.discard(neox)
    return forms.pop() if len(forms) == 1 else None
