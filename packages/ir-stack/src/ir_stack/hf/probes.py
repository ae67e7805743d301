"""Probe inputs and the comparison the conversion's checks use: `convert_hf_model` runs each
part it would replace on a probe beside its replacement. A module's gate activation is found
the same way (`gated_activation`)."""

from typing import Any

import torch
from torch import Tensor, nn

from .modules import GATED_ACTIVATIONS, reference_gate

#: seed of every probe input (norms, activations, the rotation form, attention plans); fixed,
#: so conversions repeat
PROBE_SEED = 20261130


def probe(shape: tuple[int, ...], device: torch.device) -> Tensor:
    """A fixed random float32 input of `shape` on `device`, of standard deviation 3 (past the
    nearly linear middle of the gates)."""
    generator = torch.Generator().manual_seed(PROBE_SEED)
    return torch.randn(shape, generator=generator).mul_(3).to(device)


def input_dtype(module: nn.Module) -> torch.dtype:
    """The dtype a module's inputs come in: that of its first parameter of 16 bits or more (a
    quantized layer holds 8-bit or integer weights), else float32."""
    wide = (p.dtype for p in module.parameters() if p.dtype.is_floating_point and p.itemsize >= 2)
    return next(wide, torch.float32)


def close(got: Tensor, want: Tensor) -> bool:
    """Equal up to the rounding of the model's dtype (bf16: a few units in the last place)."""
    want = want.float()
    scale = float(want.abs().max())
    return got.shape == want.shape and torch.allclose(
        got.float(), want, rtol=2e-2, atol=2e-2 * scale
    )


def gated_activation(mlp: nn.Module) -> str | None:
    """The `GATED_ACTIVATIONS` name of the MLP's ``act_fn`` (Phi-3: ``activation_fn``, Granite
    MoE's shared expert: ``activation``), or None where it has none or computes none of them:
    run on a float32 probe beside each."""
    act_fn = activation_of(mlp)
    weight = next(mlp.parameters(), None)
    if act_fn is None or weight is None or weight.device.type == "meta":
        return None
    x = probe((97,), weight.device)
    with torch.no_grad():
        got = act_fn(x).float()
        for name, approximate in GATED_ACTIVATIONS.items():
            if torch.allclose(got, reference_gate(x, approximate), rtol=1e-6, atol=1e-7):
                return name
    return None


def activation_of(mlp: nn.Module) -> Any:
    """The MLP's activation module or function (``act_fn``; Phi-3's ``activation_fn``, Granite
    MoE's shared expert's ``activation``), or None where it holds none."""
    names = ("act_fn", "activation_fn", "activation")
    return next((f for n in names if callable(f := getattr(mlp, n, None))), None)
