"""Probe inputs and the comparison the conversion's checks use: `convert_hf_model` runs each
part it would replace on a probe beside its replacement."""

import torch
from torch import Tensor

#: seed of every probe input (norms, activations, the rotation form, attention plans); fixed,
#: so conversions repeat
PROBE_SEED = 20261130


def probe(shape: tuple[int, ...], device: torch.device) -> Tensor:
    """A fixed random float32 input of `shape` on `device`, of standard deviation 3 (past the
    nearly linear middle of the gates)."""
    generator = torch.Generator().manual_seed(PROBE_SEED)
    return torch.randn(shape, generator=generator).mul_(3).to(device)


def close(got: Tensor, want: Tensor) -> bool:
    """Equal up to the rounding of the model's dtype (bf16: a few units in the last place)."""
    want = want.float()
    scale = float(want.abs().max())
    return got.shape == want.shape and torch.allclose(
        got.float(), want, rtol=2e-2, atol=2e-2 * scale
    )
