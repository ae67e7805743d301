"""Finding a transformers attention layer's `AttentionPlan` by running it: its own forward runs
on a probe under an attention function that records what it is given, the plan is read from
that, and the converted forward runs the same way to check that it gives that function the
same and makes the same of its answer."""

import copy
import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .attention import (
    OUTPUT_GATE_FUNCTIONS,
    AttentionPlan,
    QueryScale,
    forward_parameters,
    layer_type_of,
    output_projection,
    planned_forward,
    unknown_forward_parameters,
)
from .families import family_of
from .modules import IRRMSNorm, IRRotaryCache
from .probes import close, input_dtype, probe
from .rotation_probe import identity_rotation, rotary_positions

#: the query and key norms' attribute names: most families', Hunyuan's, Llama 4's (one norm
#: without a weight for both), LFM2's
_HEAD_NORM_NAMES = (
    ("q_norm", "k_norm"),
    ("query_layernorm", "key_layernorm"),
    ("qk_norm", "qk_norm"),
    ("q_layernorm", "k_layernorm"),
)


def _query_scale(attention: Any) -> QueryScale | None:
    """The layer's query scale by position, in the form its family's forward computes it
    (`families.Family.query_scale`)."""
    config = attention.config
    family = family_of(config.model_type)
    form = None if family is None else family.query_scale
    if form == "scaling beta":
        rope = config.rope_parameters
        beta, length = rope["llama_4_scaling_beta"], rope["original_max_position_embeddings"]
        return QueryScale(float(beta), int(length))
    if form == "nope temperature" and config.attn_temperature_tuning and not attention.use_rope:
        length = int(config.floor_scale)
        return QueryScale(float(config.attn_scale), length, 1, from_cache=True, in_float=True)
    return None


def _norms_after_rotation(attention: Any) -> bool:
    """Whether the layer's query and key norms take the rotated projections, as its family's
    forward does (`families.Family.norms_after_rotation`)."""
    family = family_of(attention.config.model_type)
    return family is not None and family.norms_after_rotation


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
                attention, own, hidden, identity_rotation(embeddings), positions, seen
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
        norms_after_rotation=_norms_after_rotation(attention),
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
    planned = functools.partial(planned_forward, plan=plan)
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
