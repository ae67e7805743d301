"""`convert_hf_model`: run a Hugging Face ``transformers`` Llama, Mistral, Qwen2 or Qwen3 model
on IR ops.

The conversion is in place and keeps the weights (the same ``Parameter`` objects):

- every RMSNorm becomes `IRRMSNorm` (``ir_spec.ops.rms_norm``);
- every gated MLP with a SiLU activation becomes `IRGatedMLP`: gate and up projections joined
  into one ``gate_up`` linear layer, then ``ir_spec.ops.silu_and_mul``;
- rotary embeddings are applied by ``ir_spec.ops.rotary_embedding``: the model's rotary module
  becomes `IRRotaryCache` (one ``cos_sin_cache`` table computed from its frequencies), and
  each attention layer rotates its projections with it before the model's own attention
  function runs (Qwen3's per-head query and key norms, converted like the others, first).

The residual adds stay plain ``+``: under ``ir_stack.compile`` the fusion pass turns each add
followed by a norm into ``fused_add_rms_norm``.

``transformers`` is imported only by the functions that need it; it is not a dependency of
ir-stack (``pip install ir-stack[hf]`` adds it).
"""

import logging
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ir_spec import ops

logger = logging.getLogger("ir_stack")

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
#: rope types whose frequencies are fixed at construction (a table holds them exactly)
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


@dataclass
class ConversionReport:
    """What `convert_hf_model` replaced, by module path, and what it left alone and why."""

    norms: list[str] = field(default_factory=list)
    mlps: list[str] = field(default_factory=list)
    attentions: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


class IRRMSNorm(nn.Module):
    """RMSNorm over the last dimension with ``ir_spec.ops.rms_norm``."""

    def __init__(self, weight: nn.Parameter, eps: float) -> None:
        super().__init__()
        self.weight = weight
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = ops.rms_norm(x, self.weight, self.eps)
        return out

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


class IRGatedMLP(nn.Module):
    """``down_proj(silu_and_mul(gate_up(x)))``: the gate and up projections as one matrix."""

    def __init__(self, gate_proj: nn.Linear, up_proj: nn.Linear, down_proj: nn.Linear) -> None:
        super().__init__()
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
        out: Tensor = self.down_proj(ops.silu_and_mul(self.gate_up(x)))
        return out


class IRRotaryCache(nn.Module):
    """Stands in for the model's rotary module: returns ``(cos_sin_cache, positions)`` instead
    of ``(cos, sin)``; converted attention layers take that pair."""

    cos_sin_cache: Tensor

    def __init__(self, inv_freq: Tensor, scaling: float, max_positions: int) -> None:
        super().__init__()
        positions = torch.arange(max_positions, dtype=torch.float32, device=inv_freq.device)
        freqs = torch.outer(positions, inv_freq.float())
        cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1) * scaling
        self.register_buffer("cos_sin_cache", cache, persistent=False)

    def forward(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        # transformers passes one row of positions for a whole batch; the rotary kernels read
        # a dense position per token (a broadcast one sent them to the native function), so
        # the rows are copied out once here rather than in every layer
        positions = position_ids.expand(x.shape[:-1]).contiguous()
        return self.cos_sin_cache, positions


def _rotary_attention_forward(
    self: Any,  # a transformers attention module (q_proj, k_proj, v_proj, o_proj, head_dim)
    hidden_states: Tensor,
    position_embeddings: tuple[Tensor, Tensor],
    attention_mask: Tensor | None = None,
    *args: Any,
    **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """The forward of a converted attention layer (bound to the instance)."""
    cos_sin_cache, positions = position_embeddings  # positions: one per token, dense
    input_shape = hidden_states.shape[:-1]
    head_dim: int = self.head_dim
    q = self.q_proj(hidden_states)
    k = self.k_proj(hidden_states)
    v = self.v_proj(hidden_states)
    if hasattr(self, "q_norm"):  # Qwen3: RMSNorm over each head, before the rotation
        q = self.q_norm(q.unflatten(-1, (-1, head_dim))).flatten(-2)
        k = self.k_norm(k.unflatten(-1, (-1, head_dim))).flatten(-2)
    q, k = ops.rotary_embedding(positions, q, k, head_dim, cos_sin_cache, True)
    hidden_shape = (*input_shape, -1, head_dim)
    q, k, v = (t.view(hidden_shape).transpose(1, 2) for t in (q, k, v))
    kwargs.pop("position_ids", None)
    cache = kwargs.pop("cache", None) or kwargs.pop("past_key_values", None)
    if cache is not None:
        k, v = _update_cache(cache, k, v, self.layer_idx, kwargs)
    if hasattr(self, "sliding_window"):  # Qwen2 / Qwen3: per layer
        kwargs["sliding_window"] = self.sliding_window
    elif hasattr(self.config, "sliding_window"):  # Mistral: the model's
        kwargs["sliding_window"] = self.config.sliding_window
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


def _is_rms_norm(module: nn.Module) -> bool:
    return type(module).__name__.endswith("RMSNorm") and isinstance(
        getattr(module, "weight", None), nn.Parameter
    )


def _is_gated_mlp(module: nn.Module) -> bool:
    return all(isinstance(getattr(module, n, None), nn.Linear) for n in _MLP_PARTS)


def _is_attention(module: nn.Module) -> bool:
    return type(module).__name__.endswith("Attention") and all(
        isinstance(getattr(module, n, None), nn.Linear) for n in _ATTENTION_PARTS
    )


def _head_norms_fit(attention: nn.Module) -> bool:
    """No query / key norm, or both over one head (Qwen3's), which the forward applies."""
    norms = [getattr(attention, n, None) for n in ("q_norm", "k_norm")]
    if norms == [None, None]:
        return True
    head_dim = getattr(attention, "head_dim", None)
    return all(
        isinstance(n, nn.Module)
        and isinstance(getattr(n, "weight", None), torch.Tensor)
        and n.weight.shape == (head_dim,)
        for n in norms
    )


_MLP_PARTS = ("gate_proj", "up_proj", "down_proj")
_ATTENTION_PARTS = ("q_proj", "k_proj", "v_proj", "o_proj")


def _set_submodule(root: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    setattr(root.get_submodule(parent_path) if parent_path else root, name, module)


def convert_hf_model(model: nn.Module) -> ConversionReport:
    """Swap the norms, SiLU gated MLPs and rotary embeddings of a ``transformers`` Llama,
    Mistral, Qwen2 or Qwen3 model (``*ForCausalLM`` or the bare model) for IR ops, in place.

    Raises ValueError for other model types. Parts that cannot be converted exactly (another
    activation, a rope type whose frequencies change with the sequence length) are left as they
    are and listed in the report's ``skipped``.
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"convert_hf_model: got a model of type {model_type!r}; expected a transformers "
            f"model of type {' or '.join(SUPPORTED_MODEL_TYPES)}"
        )
    assert config is not None
    import transformers
    from packaging.version import Version

    global _cache_update_takes_kwargs
    _cache_update_takes_kwargs = Version(transformers.__version__).major >= 5
    report = ConversionReport()
    for path, module in list(model.named_modules()):
        if _is_rms_norm(module):
            eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
            _set_submodule(model, path, IRRMSNorm(module.weight, float(eps)))  # type: ignore[arg-type]
            report.norms.append(path)
        elif _is_gated_mlp(module):
            activation = getattr(config, "hidden_act", None)
            if activation != "silu":
                report.skipped[path] = f"activation {activation!r}, not 'silu'"
                continue
            parts = [getattr(module, n) for n in _MLP_PARTS]
            _set_submodule(model, path, IRGatedMLP(*parts))
            report.mlps.append(path)
    _convert_rotary(model, config, report)
    logger.info(
        "convert_hf_model: %d norms, %d MLPs, %d attention layers on IR ops; skipped %s",
        len(report.norms),
        len(report.mlps),
        len(report.attentions),
        report.skipped or "nothing",
    )
    return report


def _convert_rotary(model: nn.Module, config: Any, report: ConversionReport) -> None:
    rotary_paths = [p for p, m in model.named_modules() if p.endswith("rotary_emb")]
    if len(rotary_paths) != 1:
        report.skipped["rotary_emb"] = f"expected one rotary module, found {rotary_paths}"
        return
    path = rotary_paths[0]
    rotary = model.get_submodule(path)
    rope_type = getattr(rotary, "rope_type", "default")
    if rope_type not in STATIC_ROPE_TYPES:
        report.skipped[path] = f"rope type {rope_type!r} changes its frequencies with the length"
        return
    attentions = [(p, m) for p, m in model.named_modules() if _is_attention(m)]
    misfits = [p for p, m in attentions if not _head_norms_fit(m)]
    if misfits:
        report.skipped[path] = f"query / key norms not over one head in {misfits[0]}"
        return
    head_dim = attentions[0][1].head_dim if attentions else None
    inv_freq: Tensor = rotary.inv_freq  # type: ignore[assignment]
    if head_dim is None or 2 * inv_freq.numel() != head_dim:
        report.skipped[path] = f"rotary dimension {2 * inv_freq.numel()} != head_dim {head_dim}"
        return
    scaling = float(getattr(rotary, "attention_scaling", 1.0))
    _set_submodule(
        model, path, IRRotaryCache(inv_freq, scaling, int(config.max_position_embeddings))
    )
    for attention_path, attention in attentions:
        attention.forward = types.MethodType(_rotary_attention_forward, attention)
        report.attentions.append(attention_path)
