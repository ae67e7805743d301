"""How a converted transformers attention layer runs on IR ops: its `AttentionPlan` (what
`attention_probe` finds its own forward does), the converted forward that follows the plan,
and which layers have the plan's form."""

import inspect
import sys
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, get_args

import torch
from torch import Tensor, nn

from ir_spec import ops

from .modules import IRRotaryCache

#: the functions an attention output gate's projection may pass through (`_gate_factor`)
GateFunction = Literal["sigmoid", "softplus"]


OUTPUT_GATE_FUNCTIONS: tuple[GateFunction, ...] = get_args(GateFunction)


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
    function the queries, keys, values and keyword arguments the original gives it, and return
    what the original returns. A converted layer holds its plan as ``ir_attention_plan``."""

    #: rotates the halves of each head (Llama, Qwen, Gemma) rather than pairs (GLM, ERNIE)
    neox: bool
    #: False for a layer without rotary embeddings (NoPE: SmolLM3's every fourth layer,
    #: Cohere 2's and EXAONE 4's global layers, Llama 4's), found by running its forward with and
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
    #: the keys' projection multiplied by this before the rotation (Falcon-H1's
    #: ``key_multiplier``)
    key_scale: float = 1.0
    #: the values' norm's attribute name, over each head (Gemma 4's ``v_norm``), or None
    value_norm: str | None = None
    #: the width of each value head where it differs from the query and key heads' (MiMo-V2
    #: Flash's ``v_head_dim``), or None
    value_head_dim: int | None = None
    #: the values multiplied by this (MiMo-V2 Flash's ``v_scale``)
    value_scale: float = 1.0
    #: the query projection gives each head's query and then its gate; the attention's output
    #: is multiplied by the gate's sigmoid before ``o_proj`` (Qwen3-Next's, Qwen 3.5's)
    gates_output: bool = False
    #: the attribute name of a projection of its own giving that gate, a value a channel
    #: (AFMoE's ``gate_proj``) or a head (LFM3's ``g_proj``), or None
    output_gate: str | None = None
    #: what makes that projection a factor, one of `OUTPUT_GATE_FUNCTIONS`, found by running
    #: the layer: ``"sigmoid"`` (AFMoE's, LFM3's) or ``"softplus"`` (Laguna's, in float32)
    output_gate_function: GateFunction = "sigmoid"
    #: the keys and values (after the cache update) are stored in the caller's
    #: ``shared_kv_states`` under the layer's type (Gemma 4's last layer of each type)
    stores_shared_kv: bool = False
    #: the layer attends the keys and values stored there by an earlier layer of its type,
    #: projecting only its queries, normed over each head (Gemma 4's KV-shared layers)
    reuses_shared_kv: bool = False
    #: the keyword arguments the layer's own forward gives its attention function beside
    #: dropout, scaling and its caller's (a sliding window, Gemma 2's logit cap), found by
    #: running it
    attention_kwargs: dict[str, Any] = field(default_factory=dict)
    #: the keyword arguments it gives from the layer's own parameters or buffers (GPT-OSS's
    #: attention sinks, ``s_aux``): keyword -> attribute name, read at every call
    attention_tensors: dict[str, str] = field(default_factory=dict)
    #: the caller's arguments the forward names and does not hand on to the attention
    #: function, found by running it (most take them in ``**kwargs`` and do; Ministral 3 under
    #: transformers 5.17 keeps ``position_ids``, StableLM ``use_cache`` and
    #: ``output_attentions``)
    kept_arguments: tuple[str, ...] = ()
    #: the names of the layer's own forward's positional parameters, in order, which name the
    #: arguments a caller passes by position (Granite 4's forward takes the mask second)
    forward_parameters: tuple[str, ...] = ("hidden_states", "position_embeddings")
    #: the rows of the query's, key's and value's projections in the one ``qkv_proj`` that the
    #: conversion joined them into (`projections.join_qkv`), or None where the layer keeps its
    #: own layers (or holds a joined one of its own, Phi-3's, split by its config)
    qkv_rows: tuple[int, int, int] | None = None
    #: the names of the fields above (of `OPTIONAL_FEATURES`) that differ from their defaults,
    #: computed at construction. The converted forward reads only these: under Dynamo every field
    #: read is a guard, checked at each call of each layer (a Llama layer's plan took 38 guard
    #: entries read field by field, 10 through this)
    features: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_fields = tuple(
            f.name
            for f in fields(self)
            if f.name in OPTIONAL_FEATURES and getattr(self, f.name) != _default(f)
        )
        object.__setattr__(self, "features", set_fields)


#: the `AttentionPlan` fields a converted forward consults only where they are set (its
#: `features`); `neox`, `rotates` and `forward_parameters` it reads always
OPTIONAL_FEATURES = frozenset(
    (
        "head_norms",
        "norms_after_rotation",
        "query_scale",
        "key_scale",
        "value_norm",
        "value_head_dim",
        "value_scale",
        "gates_output",
        "output_gate",
        "stores_shared_kv",
        "reuses_shared_kv",
        "attention_kwargs",
        "attention_tensors",
        "kept_arguments",
        "qkv_rows",
    )
)


def _default(plan_field: Any) -> Any:
    if plan_field.default_factory is not MISSING:
        return plan_field.default_factory()
    return plan_field.default


def rotary_attention_forward(
    self: Any,  # a transformers attention module (`is_attention` says which)
    *args: Any,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """The forward of a converted attention layer (bound to the instance), taking its
    arguments by position or by name as the layer's own forward does."""
    plan = self.ir_attention_plan
    if args:  # (transformers' layers pass their attention's arguments by name)
        if len(args) > len(plan.forward_parameters):
            raise TypeError(
                f"{type(self).__name__}.forward (converted): got {len(args)} positional "
                f"arguments; its own forward takes {len(plan.forward_parameters)}"
            )
        kwargs.update(zip(plan.forward_parameters, args, strict=False))
    hidden_states = kwargs.pop("hidden_states")
    position_embeddings = kwargs.pop("position_embeddings")
    attention_mask = kwargs.pop("attention_mask", None)
    return planned_forward(
        self, hidden_states, position_embeddings, attention_mask, plan=plan, **kwargs
    )


#: the parameters of an attention forward that the converted forward handles as the original
#: does; a forward naming others (HRM-Text's ``cycle_offset``, which moves its cache slot)
#: stays as it is
_KNOWN_FORWARD_PARAMETERS = frozenset(
    (
        "hidden_states",
        "position_embeddings",
        "attention_mask",
        "cache",  # transformers 5.24's name for the KV cache
        "past_key_values",
        "past_key_value",
        "cache_position",
        "position_ids",
        "shared_kv_states",
        "output_attentions",
        "use_cache",
    )
)


def unknown_forward_parameters(forward: Callable[..., Any]) -> list[str]:
    """The named parameters of `forward` (after ``self``) that the converted forward does not
    handle as the original would: it could only drop them."""
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    parameters = list(inspect.signature(forward).parameters.values())[1:]
    return [
        p.name
        for p in parameters
        if p.kind not in variadic and p.name not in _KNOWN_FORWARD_PARAMETERS
    ]


def forward_parameters(forward: Callable[..., Any]) -> tuple[str, ...]:
    """The names of `forward`'s positional parameters after ``self``, in order."""
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = inspect.signature(forward).parameters.values()
    return tuple(p.name for p in parameters if p.kind in positional)[1:]


def planned_forward(
    self: Any,
    hidden_states: Tensor,
    position_embeddings: tuple[Tensor, Tensor],
    attention_mask: Tensor | None,
    *,
    plan: AttentionPlan,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """A converted attention layer's forward, as `plan` says. A layer handed no position
    embeddings (Lara's full-attention layers are handed None) rotates nothing, as its own
    forward does where the plan's probe found that it runs so."""
    features = plan.features  # the plan's fields that are set: only these are read
    query_scale = plan.query_scale if "query_scale" in features else None
    cos_sin_cache: Tensor | None = None
    positions: Tensor | None = None
    scale_positions: Tensor | None = None
    if position_embeddings is not None:
        cos_sin_cache, positions = IRRotaryCache.plain_pair(*position_embeddings)
        if query_scale is not None:  # only its scale reads the tokens' own positions
            scale_positions = IRRotaryCache.token_positions(*position_embeddings)
    elif query_scale is not None and not query_scale.from_cache:
        raise TypeError(
            f"{type(self).__name__}.forward (converted): position_embeddings is None, but the "
            "layer scales its queries by their positions"
        )
    input_shape = hidden_states.shape[:-1]
    cache = kwargs.pop("cache", None) or kwargs.pop("past_key_values", None)
    shared_kv_states = kwargs.pop("shared_kv_states", None)
    if query_scale is not None and query_scale.from_cache:
        seen = cache.get_seq_length(self.layer_idx) if cache is not None else 0
        scale_positions = torch.arange(input_shape[-1], device=hidden_states.device) + seen
    gate = None
    if "reuses_shared_kv" in features:
        q = _shared_kv_queries(self, plan, hidden_states, cos_sin_cache, positions)
        k, v = shared_kv_states[self.layer_type]
    else:
        q, k, v, gate = _queries_keys_values(
            self, plan, hidden_states, cos_sin_cache, positions, scale_positions
        )
        if cache is not None:
            k, v = _update_cache(cache, k, v, self.layer_idx, kwargs)
        if "stores_shared_kv" in features and shared_kv_states is not None:
            shared_kv_states[self.layer_type] = k, v
    if "attention_kwargs" in features:
        kwargs.update(plan.attention_kwargs)
    if "attention_tensors" in features:
        kwargs.update((key, getattr(self, name)) for key, name in plan.attention_tensors.items())
    if "kept_arguments" in features:
        for name in plan.kept_arguments:
            kwargs.pop(name, None)
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
    if gate is not None:
        out = _gate_output(out, _gate_factor(gate, plan.output_gate_function), self.head_dim)
    return output_projection(self)(out), weights


def _gate_factor(gate: Tensor, function: GateFunction) -> Tensor:
    """The factor the attention output is multiplied by: the gate projection's sigmoid, or
    its softplus computed in float32 and rounded back (Laguna's)."""
    if function == "softplus":
        return nn.functional.softplus(gate.float()).to(gate.dtype)
    return torch.sigmoid(gate)


def _gate_output(out: Tensor, gate: Tensor, head_dim: int) -> Tensor:
    """``[..., heads * head_dim]`` attention output times `gate`, a value a channel or a head."""
    if gate.shape[-1] == out.shape[-1]:
        return out * gate
    per_head: Tensor = out.unflatten(-1, (-1, head_dim)) * gate.unsqueeze(-1)
    return per_head.flatten(-2)


#: the output projection's attribute names: most families', LFM2's, Phi-2's
OUTPUT_PROJECTIONS = ("o_proj", "out_proj", "dense")


_JOINED_ATTENTION_PARTS = ("qkv_proj", "o_proj")  # Phi-3


def has_linears(module: nn.Module, names: tuple[str, ...]) -> bool:
    """Whether `module` holds an ``nn.Linear`` under each of `names`."""
    return all(isinstance(getattr(module, n, None), nn.Linear) for n in names)


#: the forward parameter naming the other sequence a cross-attention layer attends (Mllama's
#: cross-attention layers: their keys and values come from an image's states, unrotated)
CROSS_ATTENTION_STATES = "cross_attention_states"


def is_cross_attention(module: nn.Module) -> bool:
    """Whether `module`'s forward names `CROSS_ATTENTION_STATES`: a layer of another form than
    the plan describes (`is_attention`), which `convert_hf_model` keeps as it is where a probe
    shows it ignores the position embeddings (`rotation_probe.ignores_position_embeddings`)."""
    return CROSS_ATTENTION_STATES in inspect.signature(type(module).forward).parameters


def is_attention(module: nn.Module) -> bool:
    """An attention layer of the form `AttentionPlan` describes: query, key, value and output
    projections (the output's ``o_proj``, LFM2's ``out_proj`` or Phi-2's ``dense``; Gemma
    4's: a ``v_proj`` of None where the keys serve as values, none but the query's and
    output's where the layer reuses an earlier one's keys and values, which its plan then
    refuses), or Phi-3's joined ones; not a cross attention (`is_cross_attention`), whose keys
    and values come from another sequence."""
    if not type(module).__name__.endswith("Attention") or is_cross_attention(module):
        return False
    if has_linears(module, _JOINED_ATTENTION_PARTS):
        return True
    if not has_linears(module, ("q_proj",)) or not any(
        has_linears(module, (name,)) for name in OUTPUT_PROJECTIONS
    ):
        return False
    if getattr(module, "is_kv_shared_layer", False):
        return True
    value = getattr(module, "v_proj", False)
    return has_linears(module, ("k_proj",)) and (value is None or isinstance(value, nn.Linear))


def output_projection(attention: Any) -> nn.Linear:
    """The layer's output projection, the first of `OUTPUT_PROJECTIONS` it holds."""
    # looked up in ``_modules``: read at every call, a missing name through ``getattr`` raises
    # inside ``nn.Module.__getattr__``, and Dynamo's guard on that runs the raise at every call
    return next(
        projection
        for name in OUTPUT_PROJECTIONS
        if isinstance(projection := attention._modules.get(name), nn.Linear)
    )


def _queries_keys_values(
    attention: Any,
    plan: AttentionPlan,
    hidden_states: Tensor,
    cos_sin_cache: Tensor | None,
    positions: Tensor | None,
    scale_positions: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """What a converted layer gives its attention function: queries, keys and values,
    ``[batch, heads, tokens, head_dim]``, projected, normed, rotated (at `positions`) and
    scaled (at `scale_positions`) as `plan` says (rotated only where given a table and
    positions); and the output gate, ``[..., heads * head_dim]``, where the plan has one."""
    features = plan.features  # the plan's fields that are set: only these are read
    head_dim: int = attention.head_dim
    q, k, v = _project_qkv(
        attention, hidden_states, plan.qkv_rows if "qkv_rows" in features else None
    )
    gate = None
    if "gates_output" in features:  # each head's query, then its gate
        q, gate = (t.flatten(-2) for t in q.unflatten(-1, (-1, 2 * head_dim)).chunk(2, -1))
    elif "output_gate" in features and plan.output_gate is not None:
        gate = getattr(attention, plan.output_gate)(hidden_states)
    norms = "head_norms" in features
    norms_after = "norms_after_rotation" in features
    if norms and not norms_after:
        q, k = _norm_heads(attention, plan, q, k)
    if "key_scale" in features:
        k = k * plan.key_scale
    if plan.rotates and cos_sin_cache is not None and positions is not None:
        q, k = ops.rotary_embedding(positions, q, k, head_dim, cos_sin_cache, plan.neox)
    if norms and norms_after:
        q, k = _norm_heads(attention, plan, q, k)
    if "query_scale" in features and plan.query_scale is not None:
        assert scale_positions is not None  # `planned_forward` refuses a call without
        q = plan.query_scale.apply(q, scale_positions)
    if "value_norm" in features and plan.value_norm is not None:
        v = _norm_each_head(getattr(attention, plan.value_norm), v, head_dim)
    if "value_scale" in features:
        v = v * plan.value_scale
    tokens = hidden_states.shape[:-1]
    q, k = (t.view(*tokens, -1, head_dim).transpose(1, 2) for t in (q, k))
    value_head_dim = plan.value_head_dim if "value_head_dim" in features else None
    v = v.view(*tokens, -1, value_head_dim or head_dim).transpose(1, 2)
    return q, k, v, gate


def _shared_kv_queries(
    attention: Any,
    plan: AttentionPlan,
    hidden_states: Tensor,
    cos_sin_cache: Tensor | None,
    positions: Tensor | None,
) -> Tensor:
    """The queries of a layer that reuses an earlier layer's keys and values (Gemma 4's),
    ``[batch, heads, tokens, head_dim]``: projected, normed over each head, rotated."""
    head_dim: int = attention.head_dim
    q: Tensor = attention.q_proj(hidden_states)
    if "head_norms" in plan.features and plan.head_norms is not None:
        q = _norm_each_head(getattr(attention, plan.head_norms[0]), q, head_dim)
    if plan.rotates and cos_sin_cache is not None and positions is not None:
        # the op rotates a query and a key together: here a key of one head, its result unused
        key = q.new_zeros(*q.shape[:-1], head_dim)
        q, _ = ops.rotary_embedding(positions, q, key, head_dim, cos_sin_cache, plan.neox)
    return q.view(*hidden_states.shape[:-1], -1, head_dim).transpose(1, 2)


def _norm_heads(attention: Any, plan: AttentionPlan, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """The query and key norms of `plan`, on ``[tokens, heads * head_dim]`` projections."""
    assert plan.head_norms is not None
    q_norm, k_norm = (getattr(attention, name) for name in plan.head_norms)
    if not plan.norms_per_head:
        return q_norm(q), k_norm(k)
    head_dim: int = attention.head_dim
    return _norm_each_head(q_norm, q, head_dim), _norm_each_head(k_norm, k, head_dim)


def _norm_each_head(norm: nn.Module, x: Tensor, head_dim: int) -> Tensor:
    """`norm` over each head of ``[..., heads * head_dim]`` rows."""
    normed: Tensor = norm(x.unflatten(-1, (-1, head_dim))).flatten(-2)
    return normed


def _project_qkv(
    attention: Any, hidden_states: Tensor, rows: tuple[int, int, int] | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Queries, keys and values: from three layers (a layer whose ``v_proj`` is None attends
    its key projection's output as values: Gemma 4's full-attention layers), or from one
    ``qkv_proj``, the conversion's (`rows`: each part's) or Phi-3's own (split by its config):
    views of its output, rows a stride apart, which the rotary kernels take."""
    # ``_modules``, not ``hasattr``, for `output_projection`'s reason: without a ``hasattr``
    # that finds the name lacking, a compiled forward's guards cost what the original's do
    if "qkv_proj" not in attention._modules:
        k = attention.k_proj(hidden_states)
        v = k if attention.v_proj is None else attention.v_proj(hidden_states)
        return attention.q_proj(hidden_states), k, v
    if rows is None:
        head_dim: int = attention.head_dim
        query = attention.config.num_attention_heads * head_dim
        key_value = attention.config.num_key_value_heads * head_dim
        rows = (query, key_value, key_value)
    q, k, v = attention.qkv_proj(hidden_states).split(rows, dim=-1)
    return q, k, v


#: transformers 5 passes the call's keyword arguments to ``Cache.update``, 4 a dict; set once
#: by `convert_hf_model` (a plain global, read on every attention call and under Dynamo)
cache_update_takes_kwargs = True


def _update_cache(cache: Any, k: Tensor, v: Tensor, layer: int, kwargs: dict[str, Any]) -> Any:
    if cache_update_takes_kwargs:
        return cache.update(k, v, layer, kwargs=kwargs)
    return cache.update(k, v, layer, {"cache_position": kwargs.get("cache_position")})


def _attention_function(attention: nn.Module) -> Any:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    implementation = getattr(attention.config, "_attn_implementation", None) or "eager"
    if implementation == "eager":
        return sys.modules[type(attention).__module__].eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS[implementation]


def layer_type_of(attention: nn.Module, layer_types: list[str | None]) -> str | None:
    """The one of the rotary module's `layer_types` whose rope `attention` takes: its
    ``layer_type`` where that is one (Gemma 3's and 4's layers), else the first (for most
    families, the single type None)."""
    layer_type = getattr(attention, "layer_type", None)
    return layer_type if layer_type in layer_types else layer_types[0]
