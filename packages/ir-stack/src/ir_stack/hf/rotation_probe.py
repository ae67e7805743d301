"""Probes of a model's rotation: which form its own rotation takes (the halves of each head, or
pairs) against ``rotary_embedding`` with an `IRRotaryCache`, whether an attention layer of
another form ignores the position embeddings, and the position embeddings that rotate
nothing."""

import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ir_spec import ops

from .attention import CROSS_ATTENTION_STATES, is_cross_attention, layer_type_of
from .modules import IRRotaryCache
from .probes import input_dtype, probe

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


def identity_rotation(embeddings: Any) -> Any:
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
    lightning attention, Mllama's cross attention, handed the probe as the states it attends)
    gives the same output on a probe of `hidden_size` wide rows whether it is handed the rotary
    module's ``(cos, sin)`` or `cache`'s pair, so that it may keep its own forward while the
    model's rotary module becomes `cache`. False where it differs or fails (DeepSeek's latent
    attention rotates with the pair)."""
    weight = next(layer.parameters(), None)
    if weight is None or weight.device.type == "meta":
        return False
    hidden = probe((1, 3, hidden_size), weight.device).to(input_dtype(layer))
    position_ids = rotary_positions(rotary, torch.arange(3, device=weight.device).unsqueeze(0))
    layer_type = layer_type_of(layer, cache.layer_types)
    extra = () if layer_type is None else (layer_type,)
    attended = {CROSS_ATTENTION_STATES: hidden} if is_cross_attention(layer) else {}
    try:
        with torch.no_grad():
            outputs = [
                layer(
                    hidden_states=hidden,
                    position_embeddings=embeddings,
                    attention_mask=None,
                    **attended,
                )
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


def per_token_pairs(rotary: nn.Module, device: torch.device) -> bool | None:
    """Whether the cosines `rotary`, a module computing each call's angles, returns come each
    frequency twice in a row (pairs: GLM-4.1V's, which its rotation of pairs takes as they
    are) rather than in two equal halves (Qwen's, Phi-3's); None where in neither layout.

    A rope of several positions a token is probed with a different position on each axis, as
    an image's tokens have: HunYuan-VL's gives the halves of a head the angles of different
    axes then, a rotation the op does not compute, though text (every axis alike) hides it."""
    positions = torch.arange(1, 5, device=device)[None]
    sections = getattr(rotary, "mrope_section", None)
    if sections is None:
        position_ids = positions
    else:
        position_ids = torch.stack([positions * (axis + 1) + axis for axis in range(len(sections))])
    with torch.no_grad():
        cos, _ = rotary(torch.empty(0, device=device), position_ids)
    half = cos.shape[-1] // 2
    halves = torch.equal(cos[..., :half], cos[..., half:])
    pairs = torch.equal(cos[..., 0::2], cos[..., 1::2])
    return None if halves == pairs else pairs


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
