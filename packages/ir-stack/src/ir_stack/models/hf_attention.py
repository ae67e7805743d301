"""How a transformers attention layer runs on IR ops: its `AttentionPlan`, found by running the
layer's own forward on a probe and checked by running the converted forward the same way; the
converted forward itself; and the probe that finds the model's rotation form."""

import copy
import dataclasses
import functools
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import torch
from torch import Tensor, nn

from ir_spec import ops

from .hf_modules import IRRMSNorm, IRRotaryCache
from .hf_probes import close, input_dtype, probe

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


def rotary_attention_forward(
    self: Any,  # a transformers attention module (`_is_attention` in hf.py says which)
    *args: Any,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """The forward of a converted attention layer (bound to the instance), taking its
    arguments by position or by name as the layer's own forward does."""
    plan = self.ir_attention_plan
    if len(args) > len(plan.forward_parameters):
        raise TypeError(
            f"{type(self).__name__}.forward (converted): got {len(args)} positional arguments; "
            f"its own forward takes {len(plan.forward_parameters)}"
        )
    kwargs.update(zip(plan.forward_parameters, args, strict=False))
    hidden_states = kwargs.pop("hidden_states")
    position_embeddings = kwargs.pop("position_embeddings")
    attention_mask = kwargs.pop("attention_mask", None)
    return _planned_forward(
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


def _planned_forward(
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
    cos_sin_cache: Tensor | None = None
    positions: Tensor | None = None
    if position_embeddings is not None:
        cos_sin_cache, positions = IRRotaryCache.plain_pair(*position_embeddings)
    elif plan.query_scale is not None and not plan.query_scale.from_cache:
        raise TypeError(
            f"{type(self).__name__}.forward (converted): position_embeddings is None, but the "
            "layer scales its queries by their positions"
        )
    input_shape = hidden_states.shape[:-1]
    cache = kwargs.pop("cache", None) or kwargs.pop("past_key_values", None)
    shared_kv_states = kwargs.pop("shared_kv_states", None)
    scale_positions = positions
    if plan.query_scale is not None and plan.query_scale.from_cache:
        seen = cache.get_seq_length(self.layer_idx) if cache is not None else 0
        scale_positions = torch.arange(input_shape[-1], device=hidden_states.device) + seen
    gate = None
    if plan.reuses_shared_kv:
        q = _shared_kv_queries(self, plan, hidden_states, cos_sin_cache, positions)
        k, v = shared_kv_states[self.layer_type]
    else:
        q, k, v, gate = _queries_keys_values(
            self, plan, hidden_states, cos_sin_cache, positions, scale_positions
        )
        if cache is not None:
            k, v = _update_cache(cache, k, v, self.layer_idx, kwargs)
        if plan.stores_shared_kv and shared_kv_states is not None:
            shared_kv_states[self.layer_type] = k, v
    kwargs.update(plan.attention_kwargs)
    kwargs.update((key, getattr(self, name)) for key, name in plan.attention_tensors.items())
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


def is_attention(module: nn.Module) -> bool:
    """An attention layer of the form `AttentionPlan` describes: query, key, value and output
    projections (the output's ``o_proj``, LFM2's ``out_proj`` or Phi-2's ``dense``; Gemma
    4's: a ``v_proj`` of None where the keys serve as values, none but the query's and
    output's where the layer reuses an earlier one's keys and values, which its plan then
    refuses), or Phi-3's joined ones."""
    if not type(module).__name__.endswith("Attention"):
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
    return next(
        projection
        for name in OUTPUT_PROJECTIONS
        if isinstance(projection := getattr(attention, name, None), nn.Linear)
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
    head_dim: int = attention.head_dim
    q, k, v = _project_qkv(attention, hidden_states)
    gate = None
    if plan.gates_output:  # each head's query, then its gate
        q, gate = (t.flatten(-2) for t in q.unflatten(-1, (-1, 2 * head_dim)).chunk(2, -1))
    elif plan.output_gate is not None:
        gate = getattr(attention, plan.output_gate)(hidden_states)
    if plan.head_norms is not None and not plan.norms_after_rotation:
        q, k = _norm_heads(attention, plan, q, k)
    if plan.key_scale != 1.0:
        k = k * plan.key_scale
    if plan.rotates and cos_sin_cache is not None and positions is not None:
        q, k = ops.rotary_embedding(positions, q, k, head_dim, cos_sin_cache, plan.neox)
    if plan.head_norms is not None and plan.norms_after_rotation:
        q, k = _norm_heads(attention, plan, q, k)
    if plan.query_scale is not None:
        assert scale_positions is not None  # `_planned_forward` refuses a call without
        q = plan.query_scale.apply(q, scale_positions)
    if plan.value_norm is not None:
        v = _norm_each_head(getattr(attention, plan.value_norm), v, head_dim)
    if plan.value_scale != 1.0:
        v = v * plan.value_scale
    tokens = hidden_states.shape[:-1]
    q, k = (t.view(*tokens, -1, head_dim).transpose(1, 2) for t in (q, k))
    v = v.view(*tokens, -1, plan.value_head_dim or head_dim).transpose(1, 2)
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
    if plan.head_norms is not None:
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


def _project_qkv(attention: Any, hidden_states: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Queries, keys and values: from three layers (a layer whose ``v_proj`` is None attends
    its key projection's output as values: Gemma 4's full-attention layers), or from Phi-3's
    one ``qkv_proj`` (views of its output, rows a stride apart, which the rotary kernels
    take)."""
    if not hasattr(attention, "qkv_proj"):
        k = attention.k_proj(hidden_states)
        v = k if attention.v_proj is None else attention.v_proj(hidden_states)
        return attention.q_proj(hidden_states), k, v
    head_dim: int = attention.head_dim
    query = attention.config.num_attention_heads * head_dim
    key_value = attention.config.num_key_value_heads * head_dim
    q, k, v = attention.qkv_proj(hidden_states).split([query, key_value, key_value], dim=-1)
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


#: the query and key norms' attribute names: most families', Hunyuan's, Llama 4's (one norm
#: without a weight for both), LFM2's
_HEAD_NORM_NAMES = (
    ("q_norm", "k_norm"),
    ("query_layernorm", "key_layernorm"),
    ("qk_norm", "qk_norm"),
    ("q_layernorm", "k_layernorm"),
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


def layer_type_of(attention: nn.Module, layer_types: list[str | None]) -> str | None:
    """The one of the rotary module's `layer_types` whose rope `attention` takes: its
    ``layer_type`` where that is one (Gemma 3's and 4's layers), else the first (for most
    families, the single type None)."""
    layer_type = getattr(attention, "layer_type", None)
    return layer_type if layer_type in layer_types else layer_types[0]


def attention_plan(
    attention: Any, neox: bool, rotary: nn.Module, cache: IRRotaryCache
) -> AttentionPlan | str:
    """What `attention`'s own forward does, as an `AttentionPlan`, checked on a probe; or why
    the converted forward cannot do it."""
    if getattr(attention, "indexer", None) is not None:
        # MiniMax M3's sparse layers: the keys it picks depend on the prompt's length, which a
        # probe of two tokens does not show
        return "it picks the keys each query attends with an indexer of its own (sparse attention)"
    reuses = bool(getattr(attention, "is_kv_shared_layer", False))
    norms = _head_norms(attention)
    if isinstance(norms, str):
        return norms
    projection = attention.q_proj if hasattr(attention, "q_proj") else attention.qkv_proj
    weight: Tensor = projection.weight
    if weight.device.type == "meta":
        return "its weights are on the meta device"
    layer_type = layer_type_of(attention, cache.layer_types)
    extra = () if layer_type is None else (layer_type,)
    hidden = probe((1, 2, projection.in_features), weight.device).to(input_dtype(attention))
    # the last positions show what changes far out (the query scales): the last row of the
    # table, and a cache as long as the table less the probe's two tokens (Llama 4's scale)
    last = cache.max_positions - 1
    positions = torch.tensor([[1, last]], device=weight.device)
    position_ids = rotary_positions(rotary, positions)
    scale = _query_scale(attention)
    seen = last - 1 if scale is not None and scale.from_cache else None
    own = type(attention).forward
    unknown = unknown_forward_parameters(own)
    if unknown:
        named = ", ".join(map(repr, unknown))
        return f"its forward takes {named}, which a converted forward would drop"
    try:
        with torch.no_grad():
            embeddings = rotary(hidden, position_ids, *extra)
            original = _run_probe_forward(attention, own, hidden, embeddings, positions, seen)
            unrotated = _run_probe_forward(
                attention, own, hidden, _identity_rotation(embeddings), positions, seen
            )
    except Exception as error:  # the layer stays as it is; the report says why
        return f"its forward failed on a probe ({type(error).__name__}: {error})"
    if isinstance(original, str) or isinstance(unrotated, str):
        return original if isinstance(original, str) else str(unrotated)
    arguments = _attention_arguments(attention, original.call.kwargs)
    if isinstance(arguments, str):
        return arguments
    plan = AttentionPlan(
        neox=neox,
        rotates=not torch.equal(original.call.query, unrotated.call.query),
        head_norms=norms[0],
        norms_per_head=norms[1],
        norms_after_rotation=attention.config.model_type in _NORMS_AFTER_ROTATION,
        query_scale=scale,
        key_scale=float(getattr(attention, "key_multiplier", 1.0)),
        value_norm="v_norm" if getattr(attention, "v_norm", None) is not None else None,
        value_head_dim=_value_head_dim(attention),
        value_scale=float(getattr(attention, "v_scale", 1.0)),
        gates_output=projection is not getattr(attention, "qkv_proj", None)
        and projection.out_features == 2 * output_projection(attention).in_features,
        output_gate=_output_gate(attention),
        stores_shared_kv=bool(getattr(attention, "store_full_length_kv", False)),
        reuses_shared_kv=reuses,
        attention_kwargs=arguments[0],
        attention_tensors=arguments[1],
        kept_arguments=tuple(
            name
            for name in ("position_ids", *_probe_flags(own))
            if name not in original.call.kwargs
        ),
        forward_parameters=forward_parameters(own),
    )
    # the converted layers' (cos_sin_cache, positions) pair, made inside the probe's guard
    pair = functools.partial(cache, hidden, position_ids, *extra)
    why = _converted_differs(attention, plan, hidden, pair, positions, original, seen)
    if why and plan.output_gate is not None:  # the gate's function, by trying the others
        for function in OUTPUT_GATE_FUNCTIONS[1:]:
            gated = dataclasses.replace(plan, output_gate_function=function)
            if not _converted_differs(attention, gated, hidden, pair, positions, original, seen):
                plan, why = gated, ""
                break
    return why or _without_embeddings(attention, plan, hidden) or plan


def _converted_differs(
    attention: Any,
    plan: AttentionPlan,
    hidden: Tensor,
    embeddings: Callable[[], Any],
    positions: Tensor,
    original: "_ProbeRun",
    seen: int | None = None,
    context: str = "",
) -> str:
    """How the converted forward's probe run (on the position embeddings `embeddings()`
    makes) differs from the layer's own `original` one (``""``: it does not), or why it
    failed; `context` says how the probe was run, where it is not the plain one."""
    planned = functools.partial(_planned_forward, plan=plan)
    try:
        with torch.no_grad():
            converted = _run_probe_forward(
                attention, planned, hidden, embeddings(), positions, seen
            )
    except Exception as error:
        on = f" {context}" if context else ""
        return f"the converted forward failed on a probe{on} ({type(error).__name__}: {error})"
    if isinstance(converted, str):
        return f"the converted forward: {converted}"
    differences = _differences(converted, original)
    return f"{differences}, {context}" if differences and context else differences


def _without_embeddings(attention: Any, plan: AttentionPlan, hidden: Tensor) -> str:
    """Where the layer's own forward runs without position embeddings (Lara's: its model
    hands its full-attention layers None), how the converted forward differs from it there
    (``""``: it does not, or the original fails so, as most do)."""
    positions = torch.tensor([[1, 2]], device=hidden.device)
    try:
        with torch.no_grad():
            original = _run_probe_forward(
                attention, type(attention).forward, hidden, None, positions
            )
    except Exception:  # it needs them: so will the converted forward
        return ""
    context = "without position embeddings"
    if isinstance(original, str):
        return f"{original}, {context}"
    return _converted_differs(
        attention, plan, hidden, lambda: None, positions, original, context=context
    )


def _value_head_dim(attention: Any) -> int | None:
    """The width of the layer's value heads where it differs from its ``head_dim`` (its
    ``v_head_dim``), else None."""
    width = getattr(attention, "v_head_dim", None)
    return width if isinstance(width, int) and width != attention.head_dim else None


#: the attribute names of an attention output gate's projection: AFMoE's, LFM3's
_OUTPUT_GATE_NAMES = ("gate_proj", "g_proj")


def _output_gate(attention: Any) -> str | None:
    """The name of the layer's own projection of the attention output's gate, as wide as the
    output projection's input (AFMoE's ``gate_proj``) or one value a head (LFM3's ``g_proj``),
    or None; the plan's check confirms what the forward makes of it."""
    width = output_projection(attention).in_features
    for name in _OUTPUT_GATE_NAMES:
        gate = getattr(attention, name, None)
        if isinstance(gate, nn.Linear) and gate.out_features in (
            width,
            width // attention.head_dim,
        ):
            return name
    return None


def _head_norms(attention: Any) -> tuple[tuple[str, str] | None, bool] | str:
    """The layer's query and key norms, as `AttentionPlan` names them (their attribute names,
    or None; each over one head or not), or why their form is not one the plan knows."""
    names = next(
        (p for p in _HEAD_NORM_NAMES if any(getattr(attention, n, None) is not None for n in p)),
        None,
    )
    if names is None:
        return None, True
    per_head = _head_norm_form(attention, names)
    if per_head is None:
        return "query / key norms neither over one head nor over the projection"
    return names, per_head


def _attention_arguments(
    attention: Any, recorded: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]] | str:
    """The keyword arguments a layer's forward gave its attention function (`recorded`),
    beside those the converted forward passes itself, as `AttentionPlan` keeps them: values,
    and tensors the layer holds by attribute name; or why not (a tensor it does not hold)."""
    kwargs = {k: v for k, v in recorded.items() if k not in _OWN_ATTENTION_KWARGS}
    held = (*attention.named_parameters(recurse=False), *attention.named_buffers(recurse=False))
    owned = {id(t): name for name, t in held}
    tensors: dict[str, str] = {}
    for key, value in kwargs.items():
        if not isinstance(value, Tensor):
            continue
        if id(value) not in owned:
            return f"its forward gives its attention function a tensor, {key!r}, not one it holds"
        tensors[key] = owned[id(value)]
    return {k: v for k, v in kwargs.items() if k not in tensors}, tensors


def _differences(converted: "_ProbeRun", original: "_ProbeRun") -> str:
    """How the converted forward's probe run differs from the original's (``""``: it does not):
    the keyword arguments it gives the attention function, the queries, keys and values, or
    what it makes of the function's answer."""
    got, want = converted.call, original.call
    if not _same_arguments(got.kwargs, want.kwargs):
        return "the converted forward gives its attention function other keyword arguments"
    if not _same_arguments({"mask": got.mask}, {"mask": want.mask}):
        return "the converted forward gives its attention function another mask"
    pairs = ((got.query, want.query), (got.key, want.key), (got.value, want.value))
    if not all(close(g, w) for g, w in pairs):
        return "the converted forward does not give its attention function the original's inputs"
    if converted.shared.keys() != original.shared.keys() or not all(
        close(g, w)
        for key in original.shared
        for g, w in zip(converted.shared[key], original.shared[key], strict=True)
    ):
        return "the converted forward does not store the keys and values the original shares"
    if not close(converted.output, original.output):
        return (
            "the converted forward does not make of its attention function's output what the "
            "original does (it does more after attention)"
        )
    return ""


def _same_arguments(got: dict[str, Any], want: dict[str, Any]) -> bool:
    """The same keyword arguments: the same names, equal values (tensors of equal values)."""

    def same(a: Any, b: Any) -> bool:
        if isinstance(b, Tensor):
            return isinstance(a, Tensor) and torch.equal(a, b)
        return bool(a == b)

    return got.keys() == want.keys() and all(same(got[k], v) for k, v in want.items())


def _head_norm_form(attention: Any, names: tuple[str, str]) -> bool | None:
    """True where the query and key norms are each over one head (Qwen3's, Gemma 3's; Cohere's
    with a weight per head), False where each is over its whole projection (OLMo 2's), None
    where neither."""
    norms = [getattr(attention, n, None) for n in names]
    head_dim = getattr(attention, "head_dim", None)
    if not isinstance(head_dim, int):
        return None
    if getattr(attention, "is_kv_shared_layer", False):
        # reusing an earlier layer's keys, the layer has a query norm alone (Gemma 4's)
        weight = getattr(norms[0], "weight", None)
        alone = norms[1] is None and weight is not None and weight.shape == (head_dim,)
        return True if alone else None
    heads, kv_heads = _head_counts(attention, head_dim)
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


def _head_counts(attention: Any, head_dim: int) -> tuple[int, int]:
    """The layer's query heads and key-value heads, from its projections' widths (Gemma 4's
    differ from layer to layer; its config refuses to give one count for all): the output
    projection's input (heads of the values' width), since a query projection with gates is
    twice as wide; or Phi-3's config, where they are one projection."""
    if hasattr(attention, "qkv_proj"):
        config = attention.config
        return config.num_attention_heads, config.num_key_value_heads
    queries = output_projection(attention).in_features // (_value_head_dim(attention) or head_dim)
    return queries, attention.k_proj.out_features // head_dim


@dataclass
class _AttentionCall:
    """What a layer's forward gave its attention function."""

    query: Tensor
    key: Tensor
    value: Tensor
    kwargs: dict[str, Any]
    #: the mask it gave (the probe hands the layer None; Doge's makes a mask of its own)
    mask: Any = None


@dataclass
class _ProbeRun:
    """A probe forward of an attention layer: what it gave its attention function, and the
    output it made of that function's answer."""

    call: _AttentionCall
    output: Tensor
    #: what it stored in the ``shared_kv_states`` it was given (Gemma 4's layers take one)
    shared: dict[str, tuple[Tensor, ...]]


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
    _probe_calls.append(_AttentionCall(query, key, value, kwargs, attention_mask))
    batch, heads, tokens, _ = query.shape
    shape = (batch, tokens, heads, value.shape[-1])
    return probe(shape, query.device).to(query.dtype), None


#: the name `_record_attention_call` is registered under in transformers' attention functions
_RECORDING_IMPLEMENTATION = "ir_stack_record"


#: the keyword arguments the converted forward passes itself, or takes from its caller
_OWN_ATTENTION_KWARGS = ("dropout", "scaling", "position_ids")


def _shared_probe(attention: Any, hidden: Tensor) -> tuple[Tensor, Tensor]:
    """Keys and values, ``[batch, kv heads, 3, head_dim]``, as an earlier layer stores them
    for `attention` to reuse: probes, the same at every call."""
    head_dim: int = attention.head_dim
    # query heads counted as `_head_counts` does (the layer has no key projection)
    queries = output_projection(attention).in_features
    kv_heads = queries // head_dim // attention.num_key_value_groups
    keys = probe((hidden.shape[0], kv_heads, 3, head_dim), hidden.device).to(hidden.dtype)
    return keys, keys.flip(-1)


class _ProbeCache:
    """A KV cache that says it has seen `length` tokens and hands back what it is given: where
    a forward counts positions in its cache (Llama 4's query scale), a probe far out."""

    def __init__(self, length: int) -> None:
        self.length = length

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def update(self, key: Tensor, value: Tensor, *args: Any, **_: Any) -> tuple[Tensor, Tensor]:
        return key, value


#: flags a decoder layer passes its attention, which the probe passes too where the layer's
#: forward names them (StableLM's names and keeps them)
_FLAGS = ("use_cache", "output_attentions")


def _probe_flags(forward: Callable[..., Any]) -> tuple[str, ...]:
    """The `_FLAGS` `forward` names."""
    parameters = inspect.signature(forward).parameters
    return tuple(name for name in _FLAGS if name in parameters)


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
    kwargs.update(dict.fromkeys(_probe_flags(type(attention).forward), False))
    parameters = inspect.signature(type(attention).forward).parameters
    if seen is not None:
        # transformers 5.24 names the cache `cache` (`past_key_values` deprecated), 5.17 not
        kwargs["cache" if "cache" in parameters else "past_key_values"] = _ProbeCache(seen)
    shared: dict[str, tuple[Tensor, ...]] = {}
    if "shared_kv_states" in parameters:
        kwargs["shared_kv_states"] = shared
        if getattr(attention, "is_kv_shared_layer", False):
            shared[attention.layer_type] = _shared_probe(attention, hidden)
    _probe_calls.clear()
    try:
        # by name: a forward may take its mask before the position embeddings (Granite 4's)
        output = forward(
            attention,
            hidden_states=hidden,
            position_embeddings=embeddings,
            attention_mask=None,
            **kwargs,
        )
    finally:
        attention.config = config
        calls = list(_probe_calls)
        _probe_calls.clear()
    if len(calls) != 1:
        return f"its forward called its attention function {len(calls)} times; expected once"
    return _ProbeRun(calls[0], output[0] if isinstance(output, tuple) else output, shared)


#: positions of the rotary probe: the first few and some far apart
_PROBE_POSITIONS = (0, 1, 2, 3, 7, 100, 1000)


def _model_rotation(attention: nn.Module) -> Callable[[Tensor, Tensor, Any], Any] | None:
    """The model's own rotation, as ``rotate(q, k, position_embeddings)`` on ``[batch, heads,
    tokens, head_dim]`` heads: ``apply_rotary_pos_emb(q, k, cos, sin)`` (most families; Gemma
    4's rotates one tensor a call), or Llama 4's ``apply_rotary_emb(q, k, freqs_cis)``, which
    takes ``[batch, tokens, heads, head_dim]`` heads and complex frequencies; None where the
    module has neither."""
    module = sys.modules[type(attention).__module__]
    apply = getattr(module, "apply_rotary_pos_emb", None)
    if callable(apply):
        if list(inspect.signature(apply).parameters)[1:3] == ["cos", "sin"]:
            # one tensor at a time (Gemma 4's ``apply_rotary_pos_emb(x, cos, sin)``)
            return lambda q, k, embeddings: (apply(q, *embeddings), apply(k, *embeddings))
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


def ignores_position_embeddings(
    layer: Any, rotary: nn.Module, cache: IRRotaryCache, hidden_size: int
) -> bool:
    """Whether an attention layer of another form (one the plan does not describe: MiniMax's
    lightning attention) gives the same output on a probe of `hidden_size` wide rows whether
    it is handed the rotary module's ``(cos, sin)`` or `cache`'s pair, so that it may keep its
    own forward while the model's rotary module becomes `cache`. False where it differs or
    fails (DeepSeek's latent attention rotates with the pair)."""
    weight = next(layer.parameters(), None)
    if weight is None or weight.device.type == "meta":
        return False
    hidden = probe((1, 3, hidden_size), weight.device).to(input_dtype(layer))
    position_ids = rotary_positions(rotary, torch.arange(3, device=weight.device).unsqueeze(0))
    layer_type = layer_type_of(layer, cache.layer_types)
    extra = () if layer_type is None else (layer_type,)
    try:
        with torch.no_grad():
            outputs = [
                layer(hidden_states=hidden, position_embeddings=embeddings, attention_mask=None)
                for embeddings in (
                    rotary(hidden, position_ids, *extra),
                    cache(hidden, position_ids, *extra),
                )
            ]
    except Exception:  # a layer that uses the pair, or takes other arguments: it decides nothing
        return False
    want, got = (o[0] if isinstance(o, tuple) else o for o in outputs)
    return isinstance(got, Tensor) and isinstance(want, Tensor) and torch.equal(got, want)


def rotary_positions(rotary: nn.Module, positions: Tensor) -> Tensor:
    """Position ids ``[batch, tokens]`` as `rotary` takes them: for a rope of several positions
    a token (Qwen 3.5's ``mrope_section``: time, height, width), one row per grid, here all
    equal, as for text (transformers 5.17's module takes only those)."""
    sections = getattr(rotary, "mrope_section", None)
    return positions if sections is None else positions.expand(len(sections), *positions.shape)


def rotation_form(rotary: nn.Module, cache: IRRotaryCache, layers: list[nn.Module]) -> bool | None:
    """True where the model's own rotation (`_model_rotation`), given its rotary module's
    output, rotates as ``rotary_embedding`` with `cache` does in the neox form (the halves of
    each head: Llama, Qwen, Gemma), False where in the interleaved form (pairs: GLM, ERNIE,
    Llama 4's complex numbers), None where in neither. Run on float32 probe heads at every
    layer type's table, as wide as the heads of the attention `layers` of that type (Gemma 4's
    differ), so the tables are checked too; where the model's rotation takes only the rotated
    part of a head (StableLM's attention slices it off first), as wide as that part."""
    rotate = _model_rotation(layers[0])
    device = next(layers[0].parameters()).device
    if rotate is None or device.type == "meta":
        return None
    positions = torch.tensor([p for p in _PROBE_POSITIONS if p < cache.max_positions])
    positions = positions.to(device)
    position_ids = rotary_positions(rotary, positions[None])
    forms = {True, False}
    with torch.no_grad():
        for layer_type in cache.layer_types:
            of_type = [a for a in layers if layer_type_of(a, cache.layer_types) == layer_type]
            if not of_type:  # a rope no layer takes
                continue
            extra = () if layer_type is None else (layer_type,)
            head_dim: int = of_type[0].head_dim  # type: ignore[assignment]
            try:
                rotated = _probe_rotation(rotate, rotary, cache, position_ids, extra, head_dim)
            except RuntimeError:  # heads wider than the rope: probe its part alone
                width = _rope_width(cache, position_ids, extra, head_dim)
                if width >= head_dim:
                    raise
                rotated = _probe_rotation(rotate, rotary, cache, position_ids, extra, width)
            for neox in list(forms):
                if not rotated(neox):
                    forms.discard(neox)
    return forms.pop() if len(forms) == 1 else None


def _rope_width(
    cache: IRRotaryCache, position_ids: Tensor, extra: tuple[str, ...], head_dim: int
) -> int:
    """The width `cache`'s table rotates (``cos`` and ``sin`` halves together)."""
    tokens = probe((1, position_ids.shape[-1], head_dim), position_ids.device)
    table, _ = IRRotaryCache.plain_pair(*cache(tokens, position_ids, *extra))
    return int(table.shape[-1])


def _probe_rotation(
    rotate: Callable[[Tensor, Tensor, Any], Any],
    rotary: nn.Module,
    cache: IRRotaryCache,
    position_ids: Tensor,
    extra: tuple[str, ...],
    head_dim: int,
) -> Callable[[bool], bool]:
    """Rotate probe heads `head_dim` wide with the model's `rotate` and its `rotary` module's
    output; a check whether ``rotary_embedding`` with `cache`'s table, in the neox form or
    not, rotates them alike."""
    count = position_ids.shape[-1]
    q = probe((1, 2, count, head_dim), position_ids.device)
    k = q.flip(-1)  # not the query's values
    flat = [t.transpose(1, 2).reshape(count, -1) for t in (q, k)]
    embeddings = rotary(q, position_ids, *extra)
    want = [t.transpose(1, 2).reshape(count, -1) for t in rotate(q, k, embeddings)]
    # the table and positions the layers get (the cache's own, in the plain form)
    tokens = q.transpose(1, 2).flatten(-2)  # [1, positions, heads x head_dim]
    table, dense = IRRotaryCache.plain_pair(*cache(tokens, position_ids, *extra))

    def rotates_alike(neox: bool) -> bool:
        got = ops.rotary_embedding.native(dense[0], *flat, head_dim, table, neox)
        return all(
            torch.allclose(g, w, rtol=1e-4, atol=1e-4) for g, w in zip(got, want, strict=True)
        )

    return rotates_alike
