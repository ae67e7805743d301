"""A small decoder-only language model written on ``ir_spec.ops``, depending on ir-spec alone.

It is what a model library looks like when it adopts ir-stack: its layers call
``ops.rms_norm``, ``ops.fused_add_rms_norm``, ``ops.silu_and_mul`` and ``ops.rotary_embedding``
where they would call their own PyTorch code, and nothing else changes. With ir-spec alone the
ops run their native functions (plain PyTorch: gradients, ``torch.compile`` with stock Inductor).
Where an application installs the rest of the stack, the same code runs the selected kernels
in eager mode, and compiled with ``torch.compile(model, backend="ir_stack")`` it gets the IR
passes' fusions (the residual add and the norm after it become ``fused_add_rms_norm``).
"""

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ir_spec import ops

__version__ = "0.1.0"


@dataclass(frozen=True)
class TinyConfig:
    """Sizes of `TinyLM`."""

    vocab_size: int = 96
    hidden: int = 64
    intermediate: int = 128
    heads: int = 4
    layers: int = 2
    max_positions: int = 64
    epsilon: float = 1e-6

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads


def rotary_cache(config: TinyConfig) -> Tensor:
    """The ``[max_positions, head_size]`` table ``cat(cos, sin)`` `ops.rotary_embedding` reads."""
    half = config.head_size // 2
    inv_freq = 1.0 / (10000 ** (torch.arange(half, dtype=torch.float32) / half))
    angles = torch.arange(config.max_positions, dtype=torch.float32)[:, None] * inv_freq[None]
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


class Block(nn.Module):
    """Pre-norm attention (causal, over the call's tokens) and a gated MLP whose output is
    scaled down by the depth before it joins the residual stream (as MiniCPM's layers do)."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.config = config
        self.attn_norm = nn.Parameter(1 + 0.1 * torch.randn(config.hidden))
        self.mlp_norm = nn.Parameter(1 + 0.1 * torch.randn(config.hidden))
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden, bias=False)
        self.o_proj = nn.Linear(config.hidden, config.hidden, bias=False)
        self.gate_up = nn.Linear(config.hidden, 2 * config.intermediate, bias=False)
        self.down = nn.Linear(config.intermediate, config.hidden, bias=False)
        self.residual_scale = (2 * config.layers) ** -0.5

    def forward(
        self, hidden: Tensor, residual: Tensor, positions: Tensor, cos_sin: Tensor
    ) -> tuple[Tensor, Tensor]:
        c = self.config
        # the residual add and the norm: what ir-passes fuses into fused_add_rms_norm
        residual = hidden + residual
        h = ops.rms_norm(residual, self.attn_norm, c.epsilon)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        q, k = ops.rotary_embedding(positions, q, k, c.head_size, cos_sin, True)
        tokens = h.shape[0]
        qh, kh, vh = (t.reshape(tokens, c.heads, c.head_size).transpose(0, 1) for t in (q, k, v))
        attn = nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
        attn = self.o_proj(attn.transpose(0, 1).reshape(tokens, c.hidden))
        h, residual = ops.fused_add_rms_norm(attn, residual, self.mlp_norm, c.epsilon)
        out = self.down(ops.silu_and_mul(self.gate_up(h))) * self.residual_scale
        return out, residual


class TinyLM(nn.Module):
    """``input_ids [tokens] -> logits [tokens, vocab]`` for one sequence, weights from `seed`."""

    def __init__(self, config: TinyConfig | None = None, *, seed: int = 0) -> None:
        super().__init__()
        self.config = config = config or TinyConfig()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(config.vocab_size, config.hidden)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.final_norm = nn.Parameter(1 + 0.1 * torch.randn(config.hidden))
        self.lm_head = nn.Linear(config.hidden, config.vocab_size, bias=False)
        self.register_buffer("cos_sin", rotary_cache(config), persistent=False)

    def forward(self, input_ids: Tensor) -> Tensor:
        positions = torch.arange(input_ids.shape[0], device=input_ids.device)
        hidden = self.embed(input_ids)
        residual = torch.zeros_like(hidden)
        for layer in self.layers:
            hidden, residual = layer(hidden, residual, positions, self.cos_sin)
        residual = hidden + residual
        return self.lm_head(ops.rms_norm(residual, self.final_norm, self.config.epsilon))


__all__ = ["Block", "TinyConfig", "TinyLM", "rotary_cache"]
