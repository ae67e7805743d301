"""Tensor parallelism on CUDA GPUs, NCCL: on one GPU, the collectives of a world of one rank
(their results, opcheck, and an all-reduce captured in piecewise and full CUDA graphs); on two,
the tensor-parallel model eager, compiled and replayed as CUDA graphs against the
single-device model, and ``ir-stack demo --tp 2``. Skipped without the GPUs (run through the
device tool)."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import ir_dispatch
import ir_kernels_triton  # noqa: F401  (the Triton providers, also when run from source)
import ir_piecewise
import ir_stack
from ir_piecewise import CompilationConfig, CUDAGraphMode, counters
from ir_spec import ops, process_groups
from ir_spec.testing import (
    assert_close,
    clone_args,
    needs_process_group,
    run_in_world,
    sample_inputs,
)
from ir_stack.models import TINY, LlamaModel, ParallelLlamaModel

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
one_gpu = pytest.mark.skipif(GPUS < 1, reason="needs a CUDA device")
two_gpus = pytest.mark.skipif(GPUS < 2, reason="needs two CUDA devices")
NATIVE = {op.name: ["native"] for op in ops}


class AllReduceBlock(nn.Module):
    """A projection, an all-reduce and a residual norm: a graph with a collective inside, to
    capture in CUDA graphs."""

    def __init__(self, group_name: str) -> None:
        super().__init__()
        self.group_name = group_name
        self.proj = nn.Linear(64, 64, bias=False)
        self.norm = nn.Parameter(torch.ones(64))

    def forward(self, x: Tensor) -> Tensor:
        reduced = ops.all_reduce(self.proj(x), self.group_name)
        out, _ = ops.fused_add_rms_norm(reduced, x, self.norm, 1e-6)
        normed: Tensor = out
        return normed


def world_of_one_on_a_gpu(rank: int, world: int, cache_root: Path) -> None:
    """Each collective on bf16 rows equals its native composition (all-reduce of one rank: the
    rows themselves), passes opcheck; an all-reduce in a piecewise-compiled block replays in
    CUDA graphs at every padded size."""
    for op in (o for o in ops if needs_process_group(o)):
        spec: dict[str, Any] = {"hidden_size": 4096, "batch_shape": (7,), "device": "cuda"}
        args = sample_inputs(op, dtype=torch.bfloat16, **spec)
        expected = op.native(*clone_args(args))
        assert_close(op, op(*clone_args(args)), expected)
        torch.library.opcheck(op.torch_op.default, args)
    x = torch.randn(5, 64, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(ops.all_reduce(x, "0"), x)
    block = AllReduceBlock(process_groups.default_group_name()).cuda().to(torch.bfloat16)
    for mode in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL):
        torch._dynamo.reset()
        counters.reset()
        config = CompilationConfig(cudagraph_mode=mode, cache_dir=cache_root / mode.name)
        compiled = ir_piecewise.compile(block, config)
        with torch.no_grad():
            for n in (1, 3, 8, 13):
                x = torch.randn(n, 64, device="cuda", dtype=torch.bfloat16)
                torch.testing.assert_close(compiled(x), block(x), atol=0.05, rtol=0.05)
        assert counters.num_cudagraph_captured > 0, mode


@one_gpu
def test_collectives_in_a_world_of_one_gpu(tmp_path: Path) -> None:
    run_in_world(world_of_one_on_a_gpu, 1, tmp_path, backend="nccl")


def generate(forward: Any, model: LlamaModel, batch: int, tokens: int) -> Tensor:
    gen = torch.Generator(device="cuda").manual_seed(batch * 100 + tokens)
    ids = torch.randint(0, model.config.vocab_size, (batch, tokens), device="cuda", generator=gen)
    positions = torch.arange(tokens, device="cuda").repeat(batch, 1)
    out: Tensor = forward(ids, positions, model.new_kv_cache(batch))
    return out.float()


def parallel_model_on_gpus(rank: int, world: int, cache_root: Path) -> None:
    """bf16 on each rank's GPU: eager, ``ir_stack.compile`` and piecewise with CUDA graphs
    (decode whole, prefill piecewise) against the single-device model's eager native."""
    single = LlamaModel(TINY, device="cuda").to(torch.bfloat16).eval()
    model = ParallelLlamaModel(TINY, device="cuda").to(torch.bfloat16).eval()
    modes: list[tuple[str, Any]] = [("eager", model), ("compile", ir_stack.compile(model))]
    for graphs in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL_AND_PIECEWISE):
        piecewise = CompilationConfig(cudagraph_mode=graphs, cache_dir=cache_root / graphs.name)
        modes.append((graphs.name, ir_stack.compile(model, ir_stack.Config(piecewise=piecewise))))
    with torch.no_grad():
        for batch, tokens in [(1, 1), (3, 1), (8, 1), (1, 9), (2, 17)]:
            with ir_dispatch.priority(NATIVE):
                expected = generate(single, single, batch, tokens)
            for name, forward in modes:
                got = generate(forward, model, batch, tokens)
                error = float((got - expected).abs().max())
                assert error < 0.05 * float(expected.abs().max()), (name, batch, tokens, error)


@two_gpus
def test_parallel_model_over_two_gpus(tmp_path: Path) -> None:
    run_in_world(parallel_model_on_gpus, 2, tmp_path, backend="nccl")


@two_gpus
def test_demo_over_two_gpus() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ir_stack.cli", "demo", "--tp", "2"],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "over 2 ranks (nccl" in done.stdout
    assert "all modes agree" in done.stdout
