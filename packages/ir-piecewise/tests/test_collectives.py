"""The collective ops compiled: a toy tensor-parallel block (column- and row-parallel linears,
an all-reduce, a reduce-scatter, a norm of each rank's rows and an all-gather, split at the toy
attention) in worlds of two and four gloo processes, compiled with the IR passes and piecewise,
against the same block computed whole in one process; and the compile cache, shared by the
ranks, keyed by rank."""

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn import functional as F

import ir_dispatch  # noqa: F401  (installs the dispatcher)
import ir_passes
import ir_piecewise
from ir_piecewise import counters
from ir_piecewise.backend import global_key
from ir_spec import ops, process_groups
from ir_spec.testing import run_in_world

sys.path.insert(0, str(Path(__file__).parent))
from toy_model import toy_config

HIDDEN, FFN = 32, 64
TOL: dict[str, Any] = {"atol": 2e-5, "rtol": 2e-5}
#: token counts, multiples of every world size here (the reduce-scatter splits the rows)
SIZES = (4, 8, 12)


class ToyParallelBlock(nn.Module):
    """``world`` = 1: the whole block. Otherwise rank `rank`'s share: the MLP's gate/up rows
    and down columns, then an all-reduce; the second projection's input columns, then a
    reduce-scatter of the rows, the norm of this rank's rows and an all-gather."""

    def __init__(self, rank: int = 0, world: int = 1, group_name: str = "") -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        gate, up = (torch.randn(FFN, HIDDEN, generator=gen) / HIDDEN**0.5 for _ in range(2))
        down = torch.randn(HIDDEN, FFN, generator=gen) / FFN**0.5
        proj = torch.randn(HIDDEN, HIDDEN, generator=gen) / HIDDEN**0.5
        self.norm = nn.Parameter(1 + 0.1 * torch.randn(HIDDEN, generator=gen))
        self.world, self.group_name = world, group_name
        ffn, width = FFN // world, HIDDEN // world
        rows = slice(rank * ffn, (rank + 1) * ffn)
        self.gate_up = nn.Parameter(torch.cat([gate[rows], up[rows]]))
        self.down = nn.Parameter(down[:, rows].contiguous())
        self.proj = nn.Parameter(proj[:, rank * width : (rank + 1) * width].contiguous())
        self.width, self.rank = width, rank

    def forward(self, x: Tensor) -> Tensor:
        mlp = F.linear(ops.silu_and_mul(F.linear(x, self.gate_up)), self.down)
        if self.world > 1:
            mlp = ops.all_reduce(mlp, self.group_name)
        out = torch.empty_like(mlp)
        torch.ops.ir_piecewise_toy.attention(mlp, mlp, mlp, out)  # the splitting op
        y = F.linear(out[:, self.rank * self.width : (self.rank + 1) * self.width], self.proj)
        if self.world == 1:
            normed: Tensor = ops.rms_norm(y, self.norm, 1e-6)
            return normed
        rows = ops.reduce_scatter(y, self.group_name)
        gathered: Tensor = ops.all_gather(ops.rms_norm(rows, self.norm, 1e-6), self.group_name)
        return gathered


def inputs() -> list[Tensor]:
    gen = torch.Generator().manual_seed(1)
    return [torch.randn(n, HIDDEN, generator=gen) for n in SIZES]


def check_compiled(rank: int, world: int, cache_root: Path) -> None:
    """Eager, ``ir_passes.compile`` and ``ir_piecewise.compile`` of the rank's block equal the
    whole block; a second piecewise compilation in the same directory loads this rank's
    trace and pieces; each rank's entries have their own keys."""
    whole = ToyParallelBlock()
    block = ToyParallelBlock(rank, world, process_groups.default_group_name())
    xs = inputs()
    with torch.no_grad():
        expected = [whole(x) for x in xs]
        for x, want in zip(xs, expected, strict=True):
            torch.testing.assert_close(block(x), want, **TOL)
        compiled = ir_passes.compile(block)
        # the passes must run here, not be served from an earlier run's Inductor cache
        with (
            torch._inductor.config.patch(fx_graph_cache=False),
            torch._functorch.config.patch(enable_autograd_cache=False),
        ):
            for x, want in zip(xs, expected, strict=True):
                torch.testing.assert_close(compiled(x), want, **TOL)
        report = ir_passes.last_report()
        assert report is not None
        lowered = set(report.selected_impls)
        assert {"all_reduce", "reduce_scatter", "all_gather"} <= lowered, lowered

        config = toy_config(cache_root)
        # gathered as tensors: all_gather_object needs numpy, which these tests do not install
        mine = torch.tensor(list(global_key(config).encode()), dtype=torch.int32)
        gathered = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
        keys = [bytes(t.tolist()).decode() for t in gathered]
        assert len(set(keys)) == world, "ranks share a cache key"
        for attempt in ("compile", "load"):
            torch._dynamo.reset()
            counters.reset()
            piecewise = ir_piecewise.compile(block, config)
            for x, want in zip(xs, expected, strict=True):
                torch.testing.assert_close(piecewise(x), want, **TOL)
            if attempt == "compile":
                compiled_pieces = counters.num_backend_compilations
                assert compiled_pieces > 0
                dist.barrier()  # every rank has stored its entries
            else:
                assert counters.num_traces_loaded == 1
                assert counters.num_backend_compilations == 0
    # each rank stored its trace and its pieces under keys of its own
    entries = list((cache_root / "cache").glob("*/*.irpw"))
    assert len(entries) == world * (compiled_pieces + 1), (len(entries), compiled_pieces)


@pytest.mark.parametrize("world", [2, 4])
def test_collectives_compiled_and_piecewise_with_a_shared_cache(world: int, tmp_path: Path) -> None:
    run_in_world(check_compiled, world, tmp_path)


def test_sp_min_token_num_starts_a_compile_range(tmp_path: Path) -> None:
    """Sequence parallelism runs from ``sp_min_token_num`` tokens up: a range starts there."""
    passes = ir_passes.PassConfig(enable_sp=True, sp_min_token_num=64)
    config = ir_piecewise.CompilationConfig(cache_dir=tmp_path, passes=passes)
    # 256: the rotary fusions' threshold
    assert config.ranges == ((1, 63), (64, 256), (257, None))
    applies = [passes.for_range(*r).fusion_applies("enable_sp") for r in config.ranges]
    assert applies == [False, True, True]
    every = ir_passes.PassConfig(fuse_gemm_comms=True, sp_min_token_num=1)
    ranges = ir_piecewise.CompilationConfig(cache_dir=tmp_path, passes=every).ranges
    assert ranges == ((1, 256), (257, None))


class ToyNormBlock(nn.Module):
    """The rank's share of a row-parallel projection, its all-reduce read by a norm alone,
    then the toy attention (the splitting op)."""

    def __init__(self, rank: int, world: int, group_name: str) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        down = torch.randn(HIDDEN, FFN, generator=gen) / FFN**0.5
        width = FFN // world
        self.down = nn.Parameter(down[:, rank * width : (rank + 1) * width].contiguous())
        self.norm = nn.Parameter(1 + 0.1 * torch.randn(HIDDEN, generator=gen))
        self.rank, self.width, self.group_name = rank, width, group_name

    def forward(self, x: Tensor) -> Tensor:
        local = x[:, self.rank * self.width : (self.rank + 1) * self.width]
        summed = ops.all_reduce(F.linear(local, self.down), self.group_name)
        normed = ops.rms_norm(summed, self.norm, 1e-6)
        out = torch.empty_like(normed)
        torch.ops.ir_piecewise_toy.attention(normed, normed, normed, out)
        return out


def check_sequence_parallel_pieces(rank: int, world: int, cache_root: Path) -> None:
    """Sequence parallelism in the compile sizes from ``sp_min_token_num`` up only; a compile
    size there that does not divide among the ranks is refused."""
    block = ToyNormBlock(rank, world, process_groups.default_group_name())
    gen = torch.Generator().manual_seed(1)
    x_full = {n: torch.randn(n, FFN, generator=gen) for n in (4, 8, 12)}
    passes = ir_passes.PassConfig(force_fusion=True, enable_sp=True, sp_min_token_num=8)
    config = toy_config(cache_root, compile_sizes=(4, 8), passes=passes, cache=False)
    counters.reset()
    piecewise = ir_piecewise.compile(block, config)
    # the passes must run in this rank: the other rank compiles the same pieces, and an entry
    # it writes to Inductor's FX graph cache first would serve this one without them
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False):
        for x in x_full.values():
            torch.testing.assert_close(piecewise(x), block(x), **TOL)
    assert not counters.fusions_unreported, counters.fusions_unreported
    applied = counters.fusions_applied
    assert applied["size-8"]["sp:all_reduce+rms_norm"] == 1, applied
    assert "sp:all_reduce+rms_norm" not in applied.get("size-4", {})
    # the range from 8 up is symbolic: skipped there, with the reason
    assert "sp:all_reduce+rms_norm" not in applied.get("range-8-inf", {})
    torch._dynamo.reset()
    odd = toy_config(cache_root, compile_sizes=(9,), passes=passes, cache=False)
    refused = f"compile size 9 does not divide among the {world} ranks"
    with pytest.raises(Exception, match=refused), torch.no_grad():
        ir_piecewise.compile(block, odd)(torch.randn(9, FFN))


def test_sequence_parallel_pieces_of_compile_sizes(tmp_path: Path) -> None:
    run_in_world(check_sequence_parallel_pieces, 2, tmp_path)
