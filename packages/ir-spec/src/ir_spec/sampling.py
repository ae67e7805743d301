"""`SampleSpec`: what an op's input generator is asked for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class SampleSpec:
    """Shape, dtype and layout of a generated sample.

    Attributes:
        batch_shape: leading dimensions (``(tokens,)``, or e.g. ``(2, 5)`` for 3-D activations).
        hidden_size: the op's natural width (the output width for ``*_and_mul``, the query width
            for ``rotary_embedding``).
        dtype: the activations' dtype.
        device: where the tensors live.
        seed: seeds the random values; the same spec always gives the same tensors.
        row_padding: extra elements after each row, so activations have a larger row stride.
        options: per-op knobs (for example ``{"is_neox_style": False}``).
    """

    batch_shape: tuple[int, ...] = (7,)
    hidden_size: int = 256
    dtype: torch.dtype = torch.float32
    device: str | torch.device = "cpu"
    seed: int = 0
    row_padding: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)

    def generator(self) -> torch.Generator:
        """A generator on the spec's device, seeded from `seed` (values differ between devices,
        never between runs)."""
        return torch.Generator(device=self.device).manual_seed(self.seed)

    def randn(
        self, gen: torch.Generator, width: int, *, std: float = 1.0, padded: bool = True
    ) -> torch.Tensor:
        """Normal values of shape ``batch_shape + (width,)``, with the spec's row padding."""
        pad = self.row_padding if padded else 0
        full = torch.randn(*self.batch_shape, width + pad, generator=gen, device=self.device)
        return (full * std).to(self.dtype)[..., :width]

    def weight(self, gen: torch.Generator, width: int) -> torch.Tensor:
        """A 1-D weight near one, never zero, of the activations' dtype (or of the
        ``weight_dtype`` option)."""
        w = 1.0 + 0.5 * torch.randn(width, generator=gen, device=self.device)
        return w.to(self.options.get("weight_dtype", self.dtype))

    def randint(self, gen: torch.Generator, high: int) -> torch.Tensor:
        """Integers in ``[0, high)`` of shape `batch_shape` (for example positions)."""
        return torch.randint(0, high, self.batch_shape, generator=gen, device=self.device)
