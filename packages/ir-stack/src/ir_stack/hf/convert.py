"""`convert_hf_model`: run a Hugging Face ``transformers`` model on IR ops, in place.

The conversion walks the model once and replaces, where a probe shows the replacement computes
what the original does:

- each RMS norm by `IRRMSNorm` on ``ir_spec.ops.rms_norm`` (`norms`): ``x / rms * w``, Gemma's
  ``x / rms * (1 + w)`` (that sum kept as a float32 weight, rounded to the model's dtype it
  would round the scale) and a norm without a weight;
- each gated MLP by `IRGatedMLP` or `IRJoinedGatedMLP` (`mlp`): gate and up projections joined
  into one linear layer, then ``silu_and_mul`` or ``gelu_and_mul``;
- the gating of each mixture of experts' routed experts by the same ops (`experts`), their
  weights and matrix products staying transformers';
- each rotary module by `IRRotaryCache`, one cosine / sine table, and each attention layer's
  forward by one that rotates its queries and keys on ``rotary_embedding`` and then calls the
  model's own attention function (`rotary`, `attention`, `attention_probe`); its query, key
  and value projections joined into one matrix where they are plain linear layers
  (`projections`).

What each part computes is found by running it on a probe beside the candidate forms
(`probes`), never from its class name, so a part that computes none of them is left as it is
and listed, with the reason, in the returned `ConversionReport`. The residual adds stay plain
``+``: under ``ir_stack.compile`` the fusion pass joins each add and the norm after it into
``fused_add_rms_norm``.

A converted model keeps the original's state dict (keys, order and values: a joined MLP shows
its matrix as the original gate and up layers and joins them again in ``load_state_dict``), so
``save_pretrained`` writes a checkpoint the original class loads. It pickles whole, fine-tunes
with the original's gradients, and keeps its attention function, KV cache and ``generate``.

The model types it takes, and what it converts and leaves in each family, are in the registry
`ir_stack.hf.families` and the docs' model table generated from it (``docs/models.md``).
"""

import logging
from dataclasses import dataclass, field

from torch import nn

from . import attention as _attention
from .experts import convert_experts, is_mixture_of_experts
from .families import SUPPORTED_MODEL_TYPES, language_model_paths
from .mlp import convert_gated_mlp, gated_mlp_parts
from .modules import IRGatedMLP, IRJoinedGatedMLP, IRRMSNorm, IRRotaryCache
from .norms import replacement_norm
from .rotary import convert_rotary

__all__ = ["ConversionReport", "convert_hf_model"]

logger = logging.getLogger("ir_stack")


@dataclass
class ConversionReport:
    """What `convert_hf_model` replaced, by module path, and what it left alone and why."""

    norms: list[str] = field(default_factory=list)
    mlps: list[str] = field(default_factory=list)
    attentions: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    #: routed experts whose gating runs on the IR op (their module keeps its class)
    experts: list[str] = field(default_factory=list)
    #: converted attention layers whose query, key and value projections are one matrix
    joined_qkv: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        """The counts converted, then what was left alone, the paths grouped by reason."""
        lines = [
            f"{len(self.norms)} norms, {len(self.mlps)} MLPs, {len(self.experts)} routed "
            f"experts' gating, {len(self.attentions)} attention layers on IR ops"
            + (f" ({len(self.joined_qkv)} with q, k and v joined)" if self.joined_qkv else "")
        ]
        by_reason: dict[str, list[str]] = {}
        for path, why in self.skipped.items():
            by_reason.setdefault(why, []).append(path)
        lines.append("left alone: nothing" if not by_reason else "left alone:")
        for why, paths in by_reason.items():
            shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
            lines.append(f"  {shown}: {why}")
        return "\n".join(lines)


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

    Raises ValueError for other model types (naming, for a multimodal model, the call that
    converts its language model), for a model converted already and for a `max_positions`
    below 1. Parts that cannot be converted exactly (another activation, a norm of another
    form, an attention of another form) are left as they are and listed in the report's
    ``skipped``. A rope whose frequencies change with the sequence length
    (`rotary.DYNAMIC_ROPE_TYPES`) is computed at each call, so `max_positions` bounds only its
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
            f"ir_stack.hf.SUPPORTED_MODEL_TYPES ({some}, ...)"
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

    _attention.cache_update_takes_kwargs = Version(transformers.__version__).major >= 5
    report = ConversionReport()
    device = next(model.parameters()).device
    for path, module in list(model.named_modules()):
        norm = replacement_norm(module, device)
        if isinstance(norm, str):
            report.skipped[path] = norm
        elif norm is not None:
            _set_submodule(model, path, norm)
            report.norms.append(path)
        elif is_mixture_of_experts(module):
            experts_path = f"{path}.experts" if path else "experts"
            why = convert_experts(module.experts)
            if why:
                report.skipped[experts_path] = why
                continue
            report.experts.append(experts_path)
        elif (parts := gated_mlp_parts(module)) is not None:
            converted, why = convert_gated_mlp(module, parts, config)
            if converted is None:
                report.skipped[path] = why
                continue
            _set_submodule(model, path, converted)
            report.mlps.append(path)
    positions = int(config.max_position_embeddings) if max_positions is None else max_positions
    rotary = convert_rotary(model, positions)
    report.attentions.extend(rotary.attentions)
    report.joined_qkv.extend(rotary.joined_qkv)
    report.skipped.update(rotary.skipped)
    logger.info("convert_hf_model: %s", report)
    return report


def _language_model_hint(model: nn.Module) -> str:
    """Where a multimodal model holds a language model of a type `convert_hf_model` takes, at
    one of the paths where the registry's multimodal models hold theirs
    (`families.language_model_paths`; LLaVA's and Mistral 3's wrappers use one of them too),
    how to convert it; else ``""``."""
    for path in language_model_paths():
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
