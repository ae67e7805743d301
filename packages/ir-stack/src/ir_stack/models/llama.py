"""A Llama-style decoder written with IR ops, with random weights from a seed.

Norms are `rms_norm` and, on the residual stream, `fused_add_rms_norm.maybe_inplace`; the MLP
uses `silu_and_mul`; positions go through `rotary_embedding`; the rotated keys and the values
go into the KV cache through `write_kv_cache` (which the compiler fuses with the rotary
embedding: ``fuse_rope_kvcache``); attention is a splitting op over the cache:
``torch.ops.ir_stack.decode_attention`` (capturable) for one token per sequence,
``torch.ops.ir_stack.attention`` otherwise. With ``qk_norm=True`` (`QWEN3_TINY`, `QWEN3_4B`)
each query and key head is normalized by an `rms_norm` of its own weight before the rotation,
as Qwen3 does (which the compiler fuses with the rotation: ``enable_qk_norm_rope_fusion``).
With ``quantization="fp8"`` the linear layers of the decoder take fp8 inputs quantized with a
static scale (`Fp8Linear`), calibrated at construction.
"""

import types
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

import torch
from torch import Tensor, nn

from ir_spec import ops
from ir_spec.catalog.rotary import make_cos_sin_cache

from . import attention as _attention  # noqa: F401  (registers the ops)
from .quant import Fp8Linear


@dataclass(frozen=True)
class LlamaConfig:
    """Sizes of the reference model."""

    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 176
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    max_positions: int = 128
    rms_norm_eps: float = 1e-6
    #: "fp8": the decoder's linear layers use fp8 weights and statically quantized inputs
    quantization: Literal["fp8"] | None = None
    #: per-head RMSNorm of the queries and keys (weights of ``head_dim``) before the rotation,
    #: as Qwen3 has
    qk_norm: bool = False
    #: the width of a head where it is not ``hidden_size // num_heads`` (Qwen3's 128)
    head_size: int | None = None
    #: the base of the rotary embedding's frequencies
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        if self.quantization not in (None, "fp8"):
            raise ValueError(
                f"LlamaConfig.quantization: got {self.quantization!r}; expected None or 'fp8'"
            )
        if not isinstance(self.qk_norm, bool):
            raise ValueError(f"LlamaConfig.qk_norm: got {self.qk_norm!r}; expected a bool")
        head = self.head_size
        if head is not None and (isinstance(head, bool) or not isinstance(head, int) or head < 2):
            raise ValueError(
                f"LlamaConfig.head_size: got {head!r}; expected None (hidden_size // num_heads) "
                "or an int >= 2"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"LlamaConfig.num_kv_heads: got {self.num_kv_heads}; expected a divisor of "
                f"num_heads={self.num_heads}"
            )

    def with_fp8(self) -> "LlamaConfig":
        """This configuration with fp8 linear layers."""
        return replace(self, quantization="fp8")

    def with_qk_norm(self) -> "LlamaConfig":
        """This configuration with per-head query and key norms (Qwen3-style)."""
        return replace(self, qk_norm=True)

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden_size // self.num_heads


TINY = LlamaConfig()
#: About 1.2 B parameters (Llama 3.2 1B-like sizes), for GPU benchmarks.
ONE_B = LlamaConfig(
    vocab_size=128256,
    hidden_size=2048,
    intermediate_size=8192,
    num_layers=16,
    num_heads=32,
    num_kv_heads=8,
    max_positions=4096,
    rms_norm_eps=1e-5,
)
#: `TINY` with Qwen3's per-head query and key norms.
QWEN3_TINY = TINY.with_qk_norm()
#: Qwen3 4B-like sizes (32 query and 8 key-value heads of 128, wider than the hidden size / 32;
#: per-head query and key norms), its vocabulary cut to 32000 to keep the logits small beside
#: the layers, for GPU benchmarks.
QWEN3_4B = LlamaConfig(
    vocab_size=32000,
    hidden_size=2560,
    intermediate_size=9728,
    num_layers=36,
    num_heads=32,
    num_kv_heads=8,
    max_positions=4096,
    rms_norm_eps=1e-6,
    qk_norm=True,
    head_size=128,
    rope_theta=1000000.0,
)


def slot_mapping(positions: Tensor, slots: int, max_positions: int) -> Tensor:
    """Where `write_kv_cache` stores each token of a call (``[batch * tokens]``): sequence
    ``b``'s token at position ``p`` in row ``b * max_positions + p`` of a cache ``[slots,
    max_positions, kv_heads, head_dim]`` (one block per sequence), and -1 (nothing stored) for
    padding rows (negative positions), positions past the cache and sequences past the last
    slot. Computed on the device: no host synchronization."""
    sequence = torch.arange(positions.shape[0], device=positions.device).unsqueeze(1)
    stored = (positions >= 0) & (positions < max_positions) & (sequence < slots)
    rows = torch.where(stored, sequence * max_positions + positions, -1)
    return rows.reshape(-1)


class NativeCall:
    """An op's native function, callable as ``op(...)`` and ``op.maybe_inplace(...)``."""

    def __init__(self, native: Callable[..., Any]) -> None:
        self.native = native
        self.maybe_inplace = native

    def __call__(self, *args: Any) -> Any:
        return self.native(*args)


#: Stands in for ``ir_spec.ops`` in a model built with ``plain_torch=True``: each op's native
#: function called directly, as a model written without ir-spec would be. Stock
#: ``torch.compile`` then sees plain PyTorch code, which Inductor fuses as it sees fit.
PLAIN_TORCH_OPS = types.SimpleNamespace(**{op.name: NativeCall(op.native) for op in ops})


class DecoderLayer(nn.Module):
    """Attention and MLP blocks around the residual stream."""

    def __init__(self, config: LlamaConfig, op_namespace: Any = ops) -> None:
        super().__init__()
        self.config = config
        self.ops = op_namespace
        #: the attention heads and KV heads this layer computes: all of them here, a rank's
        #: share in a tensor-parallel model (`ir_stack.models.parallel`)
        self.num_heads, self.num_kv_heads = config.num_heads, config.num_kv_heads
        h, hd = config.hidden_size, config.head_dim
        self.input_norm = nn.Parameter(torch.ones(h))
        self.post_attention_norm = nn.Parameter(torch.ones(h))
        self.qkv = nn.Linear(h, (config.num_heads + 2 * config.num_kv_heads) * hd, bias=False)
        self.o_proj = nn.Linear(config.num_heads * hd, h, bias=False)
        self.gate_up = nn.Linear(h, 2 * config.intermediate_size, bias=False)
        self.down = nn.Linear(config.intermediate_size, h, bias=False)
        if config.qk_norm:
            self.q_norm = nn.Parameter(torch.ones(hd))
            self.k_norm = nn.Parameter(torch.ones(hd))

    def forward(
        self,
        hidden: Tensor,
        residual: Tensor | None,
        positions: Tensor,
        cos_sin_cache: Tensor,
        k_cache: Tensor,
        v_cache: Tensor,
        slots: Tensor,
        plan: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """One decoder layer; `plan` is the step's `prompt_plan` where tokens attend through
        ``ir_stack::attention`` (more than one a sequence)."""
        c = self.config
        if residual is None:  # the first layer: the embeddings start the residual stream
            residual = hidden
            hidden = self.ops.rms_norm(hidden, self.input_norm, c.rms_norm_eps)
        else:
            hidden, residual = self.ops.fused_add_rms_norm.maybe_inplace(
                hidden, residual, self.input_norm, c.rms_norm_eps
            )
        q_size, kv_size = self.num_heads * c.head_dim, self.num_kv_heads * c.head_dim
        q, k, v = self.qkv(hidden).split([q_size, kv_size, kv_size], dim=-1)
        if c.qk_norm:  # each head normalized: views of [tokens, heads, head_dim], as Qwen3 does
            tokens = q.shape[0]
            q = self.ops.rms_norm(
                q.view(tokens, c.num_heads, c.head_dim), self.q_norm, c.rms_norm_eps
            ).view(tokens, q_size)
            k = self.ops.rms_norm(
                k.view(tokens, c.num_kv_heads, c.head_dim), self.k_norm, c.rms_norm_eps
            ).view(tokens, kv_size)
        q, k = self.ops.rotary_embedding(
            positions.reshape(-1), q, k, c.head_dim, cos_sin_cache, True
        )
        self.ops.write_kv_cache(k, v, k_cache, v_cache, slots)
        out = torch.empty_like(q)
        if positions.shape[1] == 1:
            torch.ops.ir_stack.decode_attention(q, k_cache, v_cache, positions, out)
        else:
            torch.ops.ir_stack.attention(q, k, v, k_cache, v_cache, positions, out, plan)
        hidden, residual = self.ops.fused_add_rms_norm.maybe_inplace(
            self.o_proj(out), residual, self.post_attention_norm, c.rms_norm_eps
        )
        return self.down(self.ops.silu_and_mul(self.gate_up(hidden))), residual


class LlamaModel(nn.Module):
    """Token ids ``[batch, tokens]`` and positions -> logits ``[batch * tokens, vocab]``.

    ``plain_torch=True`` builds the same model (same weights for the same seed) calling the ops'
    native functions directly instead of IR ops: the baseline for stock ``torch.compile``.
    `device` builds the weights there (random numbers from a generator on that device, so a
    model built on a GPU differs from one built on the CPU with the same seed).
    """

    def __init__(
        self,
        config: LlamaConfig = TINY,
        *,
        seed: int = 0,
        plain_torch: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.ops: Any = PLAIN_TORCH_OPS if plain_torch else ops
        device = torch.device(device or "cpu")
        generator = torch.Generator(device=device).manual_seed(seed)
        with device:
            self._build(config, generator)
            if config.quantization == "fp8":
                self._quantize_fp8(seed)

    def _build(self, config: LlamaConfig, generator: torch.Generator) -> None:
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(config, self.ops) for _ in range(config.num_layers)
        )
        self.final_norm = nn.Parameter(torch.ones(config.hidden_size))
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() > 1:
                    p.copy_(torch.randn(p.shape, generator=generator) * p.shape[-1] ** -0.5)
                else:
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=generator))
        self.register_buffer(
            "cos_sin_cache",
            make_cos_sin_cache(config.max_positions, config.head_dim, config.rope_theta),
            persistent=False,
        )

    def _quantize_fp8(self, seed: int) -> None:
        for layer in self.layers:
            for name in ("qkv", "o_proj", "gate_up", "down"):
                setattr(layer, name, Fp8Linear(getattr(layer, name).weight, self.ops))
        linears = [m for m in self.modules() if isinstance(m, Fp8Linear)]
        for m in linears:
            m.calibrating = True
        prompt_length = min(16, self.config.max_positions)
        device = self.final_norm.device
        generator = torch.Generator(device=device).manual_seed(seed + 1)
        ids = torch.randint(
            0, self.config.vocab_size, (2, prompt_length), generator=generator, device=device
        )
        with torch.no_grad():
            positions = torch.arange(prompt_length, device=device).repeat(2, 1)
            self(ids, positions, self.new_kv_cache(2))
        for m in linears:
            m.freeze_input_scale()

    def new_kv_cache(self, batch: int, positions: int | None = None) -> list[tuple[Tensor, Tensor]]:
        """Zeroed key and value caches for `batch` sequence slots of `positions` positions
        (default: ``max_positions``), one pair per layer; a call of ``n <= batch`` sequences
        uses slots ``0..n-1``."""
        c = self.config
        kv_heads = cast(DecoderLayer, self.layers[0]).num_kv_heads  # every layer's, a rank's share
        shape = (batch, positions or c.max_positions, kv_heads, c.head_dim)
        param = self.final_norm
        return [
            (
                torch.zeros(shape, dtype=param.dtype, device=param.device),
                torch.zeros(shape, dtype=param.dtype, device=param.device),
            )
            for _ in self.layers
        ]

    def forward(
        self, input_ids: Tensor, positions: Tensor, kv_cache: list[tuple[Tensor, Tensor]]
    ) -> Tensor:
        """Logits of the tokens `input_ids` ``[batch, tokens]`` at `positions` (same shape;
        negative: a padding row), whose keys and values go into `kv_cache` (`new_kv_cache`: a
        ``[slots, max_positions, kv_heads, head_dim]`` pair a layer, sequence ``b`` in slot
        ``b``) before they attend over it."""
        hidden = self.embed(input_ids.reshape(-1))
        residual: Tensor | None = None
        cache = self.cos_sin_cache.to(hidden.dtype)
        first = kv_cache[0][0]
        slots = slot_mapping(positions, first.shape[0], first.shape[1])
        # read on the host once for every layer's attention (decode steps never read it)
        plan = None
        if positions.shape[1] > 1:
            plan = torch.ops.ir_stack.prompt_plan(positions, first.shape[0])
        for layer, (k_cache, v_cache) in zip(self.layers, kv_cache, strict=True):
            hidden, residual = layer(
                hidden, residual, positions, cache, k_cache, v_cache, slots, plan
            )
        hidden, _ = self.ops.fused_add_rms_norm.maybe_inplace(
            hidden, residual, self.final_norm, self.config.rms_norm_eps
        )
        logits: Tensor = self.lm_head(hidden)
        return logits
