"""Which gated MLPs `convert_hf_model` replaces: a module holding gate, up and down linear layers
(or a joined gate-up layer and down) whose whole forward computes ``down(act(gate(x)) * up(x))``
on a probe becomes `IRGatedMLP` or `IRJoinedGatedMLP`, after the replacement has been run on a
probe beside it. Which activation it uses is found the same way."""

from typing import Any

import torch
from torch import Tensor, nn

from .attention import has_linears
from .modules import GATED_ACTIVATIONS, IRGatedMLP, IRJoinedGatedMLP, reference_gate
from .probes import activation_of, close, gated_activation, input_dtype, probe


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


def convert_gated_mlp(
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


def gated_mlp_parts(module: nn.Module) -> tuple[str, ...] | None:
    """The names of a gated MLP's layers, where `module` is one: gate, up and down (one of
    `_MLP_PARTS`), or gate-up and down (one of `_JOINED_MLP_PARTS`)."""
    forms = (*_MLP_PARTS, *_JOINED_MLP_PARTS)
    return next((parts for parts in forms if has_linears(module, parts)), None)


def is_gated_mlp(module: nn.Module) -> bool:
    return gated_mlp_parts(module) is not None


#: gate, up and down: most families'; LFM2's
_MLP_PARTS = (("gate_proj", "up_proj", "down_proj"), ("w1", "w3", "w2"))
#: Phi-3's; Granite MoE's shared expert's
_JOINED_MLP_PARTS = (("gate_up_proj", "down_proj"), ("input_linear", "output_linear"))
