"""Tensor parallelism for the reference Llama (`ParallelLlamaModel`).

Each rank of a process group holds a share of every layer, Megatron-style:

- column-parallel ``qkv`` and ``gate_up``: the rank's rows of the projection (its query heads
  with their key and value heads; its block of the gate and of the up projection), so its
  outputs stay local: attention and ``silu_and_mul`` run on the rank's heads and columns;
- row-parallel ``o_proj`` and ``down`` (`RowParallelLinear`): the matching input columns, each
  rank's partial product summed by ``ir_spec.ops.all_reduce``: one all-reduce after the
  attention output and one after the MLP, which the residual add and norm then read;
- a vocabulary-parallel embedding (`VocabParallelEmbedding`): the rank's rows of the table,
  zeros for the other ranks' tokens, then an all-reduce;
- the norms and the LM head replicated.

The weights are those of `LlamaModel` built with the same seed (the whole model is built, then
cut into the rank's share), so every world size computes the single-device logits up to the
order of the sums. Query heads must divide among the ranks; key/value heads too, or, where
there are fewer of them than ranks, each is replicated on ``world / kv_heads`` consecutive
ranks (the ranks whose query heads read it). A world of one rank (no process group, or a
group of one) is `LlamaModel` itself: no collectives.

Start one process per rank with ``torchrun --nproc-per-node N`` (``python -m
ir_stack.models.tp_demo``) or through ``ir-stack demo --tp N``.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ir_spec import process_groups

from .llama import TINY, DecoderLayer, LlamaConfig, LlamaModel
from .quant import Fp8Linear

logger = logging.getLogger("ir_stack")


def shard_sizes(config: LlamaConfig, world: int) -> tuple[int, int]:
    """The query heads and key/value heads each of `world` ranks holds; `ValueError` where
    they do not divide (or, for fewer key/value heads than ranks, replicate) evenly."""
    heads, kv = config.num_heads, config.num_kv_heads
    if heads % world:
        raise ValueError(
            f"tensor parallelism over {world} ranks: num_heads={heads} does not divide among "
            "them; expected a world size that divides the number of attention heads"
        )
    if kv >= world and kv % world:
        raise ValueError(
            f"tensor parallelism over {world} ranks: num_kv_heads={kv} does not divide among "
            "them; expected a world size that divides the key/value heads (or a multiple of it)"
        )
    if kv < world and world % kv:
        raise ValueError(
            f"tensor parallelism over {world} ranks: num_kv_heads={kv} cannot be replicated "
            "evenly; expected a world size that is a multiple of the key/value heads"
        )
    if config.intermediate_size % world:
        raise ValueError(
            f"tensor parallelism over {world} ranks: intermediate_size="
            f"{config.intermediate_size} does not divide among them"
        )
    if config.vocab_size % world:
        raise ValueError(
            f"tensor parallelism over {world} ranks: vocab_size={config.vocab_size} does not "
            "divide among them (the embedding is split by vocabulary rows)"
        )
    return heads // world, max(1, kv // world)


def kv_heads_of(config: LlamaConfig, world: int, rank: int) -> tuple[int, int]:
    """(first, count): the key/value heads rank `rank` of `world` holds, those its query heads
    read (several ranks hold the same head where there are fewer heads than ranks)."""
    _, count = shard_sizes(config, world)
    kv = config.num_kv_heads
    return (rank * count if kv >= world else rank * kv // world), count


def _take(linear: nn.Module, dim: int, pieces: list[slice], what: str) -> nn.Module:
    """A copy of `linear` (`nn.Linear` without bias, or `Fp8Linear`) keeping the `pieces` of its
    weight along `dim` (0: output rows, 1: input columns), concatenated. An `Fp8Linear` keeps
    its scales: the single-device model's quantization, cut."""
    if isinstance(linear, Fp8Linear):
        bits = torch.cat(
            [linear.weight_bits.narrow(dim, p.start, p.stop - p.start) for p in pieces], dim
        )
        if bits.shape[0] % 16 or bits.shape[1] % 16:
            raise ValueError(
                f"tensor parallelism: the fp8 {what} projection's share is "
                f"{tuple(bits.shape)}; fp8 matrix products need both sizes multiples of 16 "
                "(choose sizes divisible by 16 times the world size)"
            )
        shard = copy.deepcopy(linear, {id(linear.ops): linear.ops})  # the same op namespace
        shard.weight_bits = bits.contiguous()
        return shard
    if not isinstance(linear, nn.Linear) or linear.bias is not None:
        raise TypeError(f"tensor parallelism: cannot split {what} projection {linear!r}")
    weight = torch.cat([linear.weight.narrow(dim, p.start, p.stop - p.start) for p in pieces], dim)
    shard = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    shard.weight = nn.Parameter(
        weight.detach().contiguous(), requires_grad=linear.weight.requires_grad
    )
    return shard


class RowParallelLinear(nn.Module):
    """A row-parallel projection: this rank's input columns of the weight (`linear`), its
    partial product summed over the group by ``ops.all_reduce``."""

    def __init__(self, linear: nn.Module, group_name: str, op_namespace: Any) -> None:
        super().__init__()
        self.linear = linear
        self.group_name = group_name
        self.ops = op_namespace

    def forward(self, x: Tensor) -> Tensor:
        reduced: Tensor = self.ops.all_reduce(self.linear(x), self.group_name)
        return reduced


class VocabParallelEmbedding(nn.Module):
    """This rank's rows ``[first, first + rows)`` of the embedding table: its tokens' rows, zeros
    for the others, summed over the group by ``ops.all_reduce`` (one rank holds each token, so
    the sum is exact)."""

    def __init__(
        self, embed: nn.Embedding, rank: int, world: int, group_name: str, op_namespace: Any
    ) -> None:
        super().__init__()
        rows = embed.num_embeddings // world
        self.first, self.rows = rank * rows, rows
        self.weight = nn.Parameter(
            embed.weight.detach()[self.first : self.first + rows].contiguous(),
            requires_grad=embed.weight.requires_grad,
        )
        self.group_name = group_name
        self.ops = op_namespace

    def forward(self, input_ids: Tensor) -> Tensor:
        local = input_ids - self.first
        mine = (local >= 0) & (local < self.rows)
        rows = F.embedding(torch.where(mine, local, 0), self.weight)
        partial = rows.masked_fill(~mine.unsqueeze(-1), 0.0)
        reduced: Tensor = self.ops.all_reduce(partial, self.group_name)
        return reduced


class ParallelLlamaModel(LlamaModel):
    """`LlamaModel` split over the ranks of process group `group_name` (default: the default
    group where torch.distributed is initialised; none otherwise, a world of one); this
    process holds its rank's share. Same arguments and calls as `LlamaModel`; its KV caches
    (`new_kv_cache`) hold the rank's key/value heads.

    Build it on every rank in the same order of process-group creation (the group name is
    resolved here once; the forward carries only the name)."""

    def __init__(
        self,
        config: LlamaConfig = TINY,
        *,
        group_name: str | None = None,
        seed: int = 0,
        plain_torch: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(config, seed=seed, plain_torch=plain_torch, device=device)
        if group_name is None and process_groups.known_group_names():
            group_name = process_groups.default_group_name()
        self.group_name = group_name
        self.world_size = 1 if group_name is None else process_groups.group_size(group_name)
        self.rank = 0 if group_name is None else process_groups.group_rank(group_name)
        if group_name is not None and self.world_size > 1:
            self._shard(group_name)

    def _shard(self, group_name: str) -> None:
        c, world, rank = self.config, self.world_size, self.rank
        heads, _ = shard_sizes(c, world)
        first_kv, kv_heads = kv_heads_of(c, world, rank)
        hd = c.head_dim
        q_rows = slice(rank * heads * hd, (rank + 1) * heads * hd)
        q_size, kv_size = c.num_heads * hd, c.num_kv_heads * hd
        k_rows = slice(q_size + first_kv * hd, q_size + (first_kv + kv_heads) * hd)
        v_rows = slice(k_rows.start + kv_size, k_rows.stop + kv_size)
        ffn = c.intermediate_size // world
        gate = slice(rank * ffn, (rank + 1) * ffn)
        up = slice(c.intermediate_size + gate.start, c.intermediate_size + gate.stop)
        columns = {"qkv": [q_rows, k_rows, v_rows], "gate_up": [gate, up]}
        rows = {"o_proj": [q_rows], "down": [gate]}
        for layer in self.layers:
            assert isinstance(layer, DecoderLayer)
            for name, pieces in columns.items():
                setattr(layer, name, _take(getattr(layer, name), 0, pieces, name))
            for name, pieces in rows.items():
                shard = _take(getattr(layer, name), 1, pieces, name)
                setattr(layer, name, RowParallelLinear(shard, group_name, self.ops))
            layer.num_heads, layer.num_kv_heads = heads, kv_heads
        embed = VocabParallelEmbedding(self.embed, rank, world, group_name, self.ops)
        setattr(self, "embed", embed)  # noqa: B010  (the attribute is typed nn.Embedding)
        logger.info(
            "ir_stack: rank %d of %d holds %d query and %d key/value heads, %d of %d MLP columns",
            rank,
            world,
            heads,
            kv_heads,
            ffn,
            c.intermediate_size,
        )
