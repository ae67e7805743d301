"""A toy decoder over flattened tokens ``[num_tokens, hidden]`` written with IR ops; attention
is ``torch.ops.ir_piecewise_toy.attention``, a custom op writing into an output argument (the
splitting op), and `toy_config` to compile it. Used by the tests and by ``benchmarks/piecewise``."""

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import ir_piecewise
from ir_spec import ops


@torch.library.custom_op("ir_piecewise_toy::attention", mutates_args=("out",))
def attention(q: Tensor, k: Tensor, v: Tensor, out: Tensor) -> None:
    """Causal attention across the call's tokens (padding rows come last, so real rows never
    see them); ``[tokens, heads * head_dim]`` in and out."""
    tokens, width = q.shape
    heads = width // 32
    split = (tokens, heads, 32)
    qh, kh, vh = (t.reshape(split).transpose(0, 1) for t in (q, k, v))
    result = nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
    out.copy_(result.transpose(0, 1).reshape(tokens, width))


class ToyLayer(nn.Module):
    """Norm, QKV, attention, output projection, fused residual norm and a gated MLP; with
    `fp8_mlp` the MLP's activation is quantized to fp8 at a static scale (and dequantized for
    the down projection), so the activation + quant fusion has a pattern to fuse."""

    def __init__(self, hidden: int, fp8_mlp: bool = False) -> None:
        super().__init__()
        self.fp8_mlp = fp8_mlp
        if fp8_mlp:
            self.register_buffer("act_scale", torch.tensor([0.01]))
        self.norm = nn.Parameter(1 + 0.1 * torch.randn(hidden))
        self.post_norm = nn.Parameter(1 + 0.1 * torch.randn(hidden))
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.gate_up = nn.Linear(hidden, 4 * hidden, bias=False)
        self.down = nn.Linear(2 * hidden, hidden, bias=False)

    def forward(self, hidden: Tensor, residual: Tensor) -> tuple[Tensor, Tensor]:
        hidden, residual = ops.fused_add_rms_norm.maybe_inplace(hidden, residual, self.norm, 1e-6)
        q, k, v = self.qkv(hidden).chunk(3, dim=-1)
        out = torch.empty_like(q)
        torch.ops.ir_piecewise_toy.attention(q, k, v, out)
        hidden, residual = ops.fused_add_rms_norm.maybe_inplace(
            self.o_proj(out), residual, self.post_norm, 1e-6
        )
        act = ops.silu_and_mul(self.gate_up(hidden))
        if self.fp8_mlp:
            act = ops.static_quant_fp8(act, self.act_scale).to(act.dtype) * self.act_scale
        return self.down(act), residual


class ToyModel(nn.Module):
    """`layers` layers of `ToyLayer`: ``x [tokens, hidden] -> [tokens, hidden]``."""

    def __init__(
        self, hidden: int = 64, layers: int = 3, *, seed: int = 0, fp8_mlp: bool = False
    ) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.layers = nn.ModuleList(ToyLayer(hidden, fp8_mlp) for _ in range(layers))
        self.final_norm = nn.Parameter(1 + 0.1 * torch.randn(hidden))

    def forward(self, x: Tensor) -> Tensor:
        hidden, residual = x, torch.zeros_like(x)
        for layer in self.layers:
            hidden, residual = layer(hidden, residual)
        out, _ = ops.fused_add_rms_norm.maybe_inplace(hidden, residual, self.final_norm, 1e-6)
        return out


SPLITTING_OPS = ("ir_piecewise_toy::attention",)


def toy_config(cache_root: Path, **kwargs: Any) -> ir_piecewise.CompilationConfig:
    """A configuration splitting at the toy attention, caching under ``cache_root/cache``."""
    return ir_piecewise.CompilationConfig(
        splitting_ops=SPLITTING_OPS, cache_dir=cache_root / "cache", **kwargs
    )
