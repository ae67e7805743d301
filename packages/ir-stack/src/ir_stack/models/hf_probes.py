"""Probe inputs and the comparison the conversion's checks use: `convert_hf_model` runs each
part it would replace on a probe beside its replacement."""

import torch
from torch import Tensor, nn

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
