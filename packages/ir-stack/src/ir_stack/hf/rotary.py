"""The rotary half of `convert_hf_model`: each of a model's rotary modules becomes an
`IRRotaryCache`, and each attention layer of the planned form rotates on
``ir_spec.ops.rotary_embedding`` with whatever pair its model hands it.

Most models hold one rotary module. A model may hold several of one class (Granite SWA builds
one a rope base, and hands each layer the one of its base): each becomes a cache of its own,
so every layer still gets the table of its own rope. They must agree on their layer types, their
widths and their rotation form, so that one plan, probed with the first, fits every layer."""

import copy
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from .attention import is_attention, layer_type_of, rotary_attention_forward
from .attention_probe import attention_plan
from .forward import with_forward
from .modules import IRRotaryCache
from .projections import join_qkv
from .rotation_probe import ignores_position_embeddings, per_token_pairs, rotation_form

logger = logging.getLogger("ir_stack")

#: rope types whose frequencies change with the sequence's length (dynamic NTK scaling; Phi-3's
#: long rope, which switches factors past its original length): the rotary module computes
#: each call's angles, which the converted layers take as a table of a row a token
DYNAMIC_ROPE_TYPES = ("dynamic", "longrope")
#: rope types whose frequencies are fixed at construction (a table holds them exactly);
#: ``ntk_alpha`` is Hunyuan's NTK scaling with a fixed alpha, which only stretches the base;
#: ``proportional`` (Gemma 4's full-attention layers) rotates the whole head with frequencies
#: of zero past its rotated share
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "ntk_alpha", "proportional")

#: a rotary table larger than this is reported: `convert_hf_model`'s ``max_positions`` shrinks it
LARGE_TABLE_BYTES = 1 << 30


@dataclass
class RotaryConversion:
    """What `convert_rotary` did: the attention layers it converted, and what it left alone
    and why (by module path; ``"rotary_emb"`` where the reason is about the model's ropes as a
    whole)."""

    attentions: list[str]
    skipped: dict[str, str]
    #: the converted layers whose query, key and value projections were joined into one
    joined_qkv: list[str] = field(default_factory=list)


@dataclass
class _Rope:
    """One of the model's rotary modules, with the tables that stand in for it."""

    path: str
    module: nn.Module
    per_token: bool
    tables: dict[str | None, tuple[Tensor, float]]

    def widths(self) -> dict[str | None, int]:
        return {t: 2 * inv_freq.numel() for t, (inv_freq, _) in self.tables.items()}


def _per_token_rope(rotary: nn.Module) -> bool:
    """Whether the rotary module's angles are not a table built ahead, so that its own forward
    must compute each call's (`IRRotaryCache`'s ``per_token``): a rope of several positions a
    token (Qwen 3.5's ``mrope_section``), or one rope for every layer whose frequencies change
    with the length (`DYNAMIC_ROPE_TYPES`)."""
    if getattr(rotary, "mrope_section", None) is not None:
        return True
    return getattr(rotary, "rope_type", None) in DYNAMIC_ROPE_TYPES


def _rope_tables(
    rotary: nn.Module, dynamic: bool = False
) -> tuple[dict[str | None, tuple[Tensor, float]], str]:
    """The rotary module's ``{layer type: (inv_freq, attention_scaling)}`` (the single type None
    where one rope serves every layer), or ``({}, why)`` where a rope's frequencies are not
    fixed at construction (unless `dynamic`: then its frequencies at construction, which give
    the rope's width)."""
    rope_types = getattr(rotary, "rope_type", "default")
    if isinstance(rope_types, dict):  # Gemma 3: per layer type, as `<type>_inv_freq`
        prefixes: dict[str | None, str] = {t: f"{t}_" for t in rope_types}
    else:
        prefixes, rope_types = {None: ""}, {None: rope_types}
    tables: dict[str | None, tuple[Tensor, float]] = {}
    for layer_type, prefix in prefixes.items():
        rope_type = rope_types[layer_type]
        if rope_type not in STATIC_ROPE_TYPES and not dynamic:
            return {}, f"rope type {rope_type!r} changes its frequencies with the length"
        inv_freq = getattr(rotary, f"{prefix}inv_freq", None)
        if not isinstance(inv_freq, Tensor):
            return {}, f"no {prefix}inv_freq buffer"
        tables[layer_type] = (inv_freq, float(getattr(rotary, f"{prefix}attention_scaling", 1.0)))
    return tables, ""


def _find_ropes(model: nn.Module) -> list[_Rope] | tuple[str, str]:
    """The model's rotary modules, or ``(report key, why)`` where they cannot be converted."""
    # most families name it ``rotary_emb``; LFM2-MoE ``pos_emb``; Granite SWA holds one a base
    # in ``rotary_embs``
    found = [
        (p, m)
        for p, m in model.named_modules()
        if p.endswith("rotary_emb") or type(m).__name__.endswith("RotaryEmbedding")
    ]
    if not found:  # OLMo Hybrid's released checkpoints rotate nothing
        return "rotary_emb", (
            "no rotary module (none named rotary_emb or of a class ending in RotaryEmbedding)"
        )
    ropes = []
    for path, module in found:
        per_token = _per_token_rope(module)
        tables, why = _rope_tables(module, dynamic=per_token)
        if not tables:
            return path, why
        ropes.append(_Rope(path, module, per_token, tables))
    if len(ropes) == 1:
        return ropes
    paths = [r.path for r in ropes]
    first = ropes[0]
    # several ropes convert where one plan fits them all: of one class, tables ahead, the same
    # layer types and widths (DeepSeek V4's compressor holds a rope of its own width)
    if any(type(r.module) is not type(first.module) for r in ropes):
        return "rotary_emb", f"rotary modules of several classes: {paths}"
    if any(r.per_token for r in ropes):
        return "rotary_emb", f"several rotary modules, one computing each call's angles: {paths}"
    if any(r.widths() != first.widths() for r in ropes):
        return "rotary_emb", f"rotary modules of several widths: {paths}"
    return ropes


def model_devices(model: nn.Module) -> list[torch.device]:
    """The devices `model`'s parameters and buffers are on (the meta device aside), in the
    order first met: more than one for a model dispatched with a ``device_map``."""
    tensors = itertools.chain(model.parameters(), model.buffers())
    devices = dict.fromkeys(t.device for t in tensors if t.device.type != "meta")
    return list(devices)


def convert_rotary(model: nn.Module, max_positions: int) -> RotaryConversion:
    """Swap each of `model`'s rotary modules for an `IRRotaryCache` of `max_positions` rows and
    give its attention layers of the planned form the converted forward, where every probe
    agrees; otherwise leave them all as they are, saying why."""
    done = RotaryConversion([], {})
    ropes = _find_ropes(model)
    if isinstance(ropes, tuple):
        key, why = ropes
        done.skipped[key] = why
        return done
    key = ropes[0].path if len(ropes) == 1 else "rotary_emb"
    why = _convert(model, ropes, max_positions, done)
    if why:
        done.skipped[key] = why
    return done


def _reached_modules(model: nn.Module, rope_paths: list[str]) -> list[tuple[str, Any]]:
    """`model`'s modules save those inside a model of its own that holds none of the ropes
    (Phi-4-multimodal's vision tower and audio encoder, inside its embeddings): the ropes
    cannot reach their attention, which keeps its forward whatever its form."""
    from transformers import PreTrainedModel

    towers = [
        f"{path}."
        for path, module in model.named_modules()
        if path
        and isinstance(module, PreTrainedModel)
        and not any(r == path or r.startswith(f"{path}.") for r in rope_paths)
    ]
    return [
        (path, module)
        for path, module in model.named_modules()
        if not any(f"{path}.".startswith(tower) for tower in towers)
    ]


def _convert(
    model: nn.Module, ropes: list[_Rope], max_positions: int, done: RotaryConversion
) -> str:
    """Convert `ropes` and the attention layers (appending their paths to `done`'s lists), or
    say why not."""
    first = ropes[0]
    # layers of another form (`others`) keep their forward: DeepSeek's latent attention rotates
    # with the model's (cos, sin) itself, and leaves the rotary module alone; MiniMax's
    # lightning attention and Mllama's cross attention ignore it, which a probe below shows
    layers: list[tuple[str, Any]] = []
    others: list[tuple[str, Any]] = []
    for path, module in _reached_modules(model, [r.path for r in ropes]):
        if type(module).__name__.endswith("Attention"):
            (layers if is_attention(module) else others).append((path, module))
    if not layers:
        return f"attention of another form in {others[0][0]}" if others else "no attention layers"
    widths = first.widths()
    for layer_path, layer in layers:
        # a rope narrower than the head rotates its leading part (transformers' partial rotary,
        # Phi-3's `partial_rotary_factor`), as the op does
        width = widths[layer_type_of(layer, list(widths))]
        head_dim = layer.head_dim
        if width > head_dim:
            return f"rotary dimension {width} > head_dim {head_dim} in {layer_path}"
    # float32 cosines and sines, a row a position
    table_bytes = sum(max_positions * width * 4 for r in ropes for width in r.widths().values())
    if not first.per_token and table_bytes > LARGE_TABLE_BYTES:
        logger.warning(
            "convert_hf_model: the rotary table of %d positions takes %.1f GiB; pass "
            "max_positions=<the longest sequence you run> for a smaller one",
            max_positions,
            table_bytes / 2**30,
        )
    # Gemma 4 slices the position embeddings by token before its KV-shared layers
    sliced = any(getattr(m, "is_kv_shared_layer", False) for _, m in layers)
    if first.per_token and sliced:
        return "a rope computed at each call in a model that slices it by token"
    # the probes run a copy of a per-token module (swapped for the module itself after them):
    # a dynamic rope keeps what it last computed (its cached length), and the probes reach the
    # last position
    probed = [copy.deepcopy(r.module) if r.per_token else r.module for r in ropes]
    devices = model_devices(model)
    # (a model wholly on the meta device is not probed: its rotation form is none below)
    pairs = per_token_pairs(probed[0], devices[0]) if first.per_token and devices else False
    if pairs is None:
        return "its rope computed at each call gives its angles in neither halves nor pairs"
    gather = len(devices) > 1 and not sliced and not first.per_token
    if gather:
        logger.info(
            "convert_hf_model: the model spans %s: the rotary modules hand the layers the rows "
            "of their tokens, not the whole table",
            ", ".join(map(str, devices)),
        )
    caches = [
        IRRotaryCache(
            r.tables,
            max_positions,
            sliced_by_token=sliced,
            per_token=m if r.per_token else None,
            per_token_pairs=pairs,
            gather_rows=gather,
        )
        for r, m in zip(ropes, probed, strict=True)
    ]
    hidden_size = int(getattr(model.config, "hidden_size", 0))
    for rotary, cache in zip(probed, caches, strict=True):
        for other_path, other in others:
            if not ignores_position_embeddings(other, rotary, cache, hidden_size):
                return f"attention of another form in {other_path}"
    forms: set[bool | None] = set()
    for rotary, cache in zip(probed, caches, strict=True):
        try:
            forms.add(rotation_form(rotary, cache, [m for _, m in layers]))
        except Exception as error:  # the model's rotary module or rotation, on the probe
            return f"its rotation failed on a probe ({type(error).__name__}: {error})"
    if None in forms:
        why = "its attention rotates in neither the op's neox nor its interleaved form"
        rounded = {str(f.dtype) for r in ropes for f, _ in r.tables.values()} - {"torch.float32"}
        if rounded:  # the table then holds rounded frequencies, which not every module uses
            why += (
                f" (its rope's frequencies are {', '.join(sorted(rounded))}, as after "
                "model.to(dtype); load the model in that dtype instead, which keeps them "
                "float32)"
            )
        return why
    if len(forms) > 1:
        return "its rotary modules rotate in different forms"
    neox = forms.pop()
    assert neox is not None
    plans = [(p, m, attention_plan(m, neox, probed[0], caches[0])) for p, m in layers]
    misfit = next(((p, plan) for p, _, plan in plans if isinstance(plan, str)), None)
    if misfit is not None:
        return f"{misfit[1]} in {misfit[0]}"
    for rope, cache in zip(ropes, caches, strict=True):
        if rope.per_token:
            cache.per_token = rope.module
        if hasattr(rope.module, "config"):  # Granite SWA's forward keys its ropes by their base
            cache.config = rope.module.config
        model.set_submodule(rope.path, cache)
    for attention_path, attention, plan in plans:
        assert not isinstance(plan, str)  # (`misfit` above)
        joined = join_qkv(attention, plan)
        if isinstance(joined, str):
            logger.debug("convert_hf_model: %s keeps its projections: %s", attention_path, joined)
        else:
            plan = joined
            done.joined_qkv.append(attention_path)
        attention.ir_attention_plan = plan
        with_forward(attention, rotary_attention_forward)
        done.attentions.append(attention_path)
    return ""
