"""The tensor-parallel reference model (`ParallelLlamaModel`) in worlds of two and four gloo
processes: eager (native and selected kernels), ``ir_stack.compile`` and piecewise give the
single-device model's logits, prefill and decode; the sharding and its errors."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import ir_dispatch
import ir_passes
import ir_stack
from ir_piecewise import CompilationConfig
from ir_spec import ops
from ir_spec.testing import run_in_world
from ir_stack.models import TINY, DecoderLayer, LlamaModel, ParallelLlamaModel
from ir_stack.models.parallel import RowParallelLinear, VocabParallelEmbedding, shard_sizes

#: TINY with an MLP whose share on four ranks stays a multiple of 16 (fp8 matrix products)
CONFIG = dataclasses.replace(TINY, intermediate_size=192)
TOL: dict[str, Any] = {"atol": 2e-5, "rtol": 2e-5}


def generate(forward: Any, model: LlamaModel, *, decode: bool = True) -> torch.Tensor:
    """Logits of a 6-token prefill of 2 sequences, then (with `decode`) of one decode step."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (2, 6), generator=gen)
    cache = model.new_kv_cache(2)
    out = [forward(ids, torch.arange(6).repeat(2, 1), cache)]
    if decode:
        step = out[0].view(2, 6, -1)[:, -1].argmax(-1, keepdim=True)
        out.append(forward(step, torch.full((2, 1), 6), cache))
    return torch.cat(out)


def native_only() -> Any:
    return ir_dispatch.priority({op.name: ["native"] for op in ops})


def test_a_world_of_one_is_the_single_device_model() -> None:
    single, parallel = LlamaModel(CONFIG).eval(), ParallelLlamaModel(CONFIG).eval()
    assert parallel.world_size == 1
    assert parallel.group_name is None
    assert not any(isinstance(m, RowParallelLinear) for m in parallel.modules())
    with torch.no_grad():
        assert torch.equal(generate(parallel, parallel), generate(single, single))


def test_shares_that_do_not_divide_are_refused() -> None:
    assert shard_sizes(TINY, 2) == (2, 1)
    assert shard_sizes(TINY, 4) == (1, 1)  # two key/value heads, each on two ranks
    with pytest.raises(ValueError, match="num_heads=4 does not divide among them"):
        shard_sizes(TINY, 3)
    with pytest.raises(ValueError, match="num_kv_heads=4 cannot be replicated evenly"):
        shard_sizes(dataclasses.replace(TINY, num_heads=12, num_kv_heads=4), 6)
    with pytest.raises(ValueError, match="num_kv_heads=6 does not divide among them"):
        shard_sizes(dataclasses.replace(TINY, num_heads=12, num_kv_heads=6), 4)
    with pytest.raises(ValueError, match="intermediate_size=175 does not divide"):
        shard_sizes(dataclasses.replace(TINY, intermediate_size=175), 2)
    with pytest.raises(ValueError, match="vocab_size=250 does not divide"):
        shard_sizes(dataclasses.replace(TINY, vocab_size=250), 4)


def check_model(rank: int, world: int, cache_root: Path, compiled: bool) -> None:
    """The rank's share holds its heads and columns; its logits in each mode equal the
    single-device model's (eager native). Without `compiled`, ``ir_stack.compile`` is left
    out and piecewise compiles the prefill only (each compilation costs every rank the same
    CPU time, which a CI runner's two cores share)."""
    single = LlamaModel(CONFIG).eval()
    model = ParallelLlamaModel(CONFIG).eval()
    heads, kv_heads = shard_sizes(CONFIG, world)
    layer = model.layers[0]
    assert isinstance(layer, DecoderLayer)
    assert (layer.num_heads, layer.num_kv_heads) == (heads, kv_heads)
    assert isinstance(layer.down, RowParallelLinear)
    assert isinstance(model.embed, VocabParallelEmbedding)
    assert model.new_kv_cache(1)[0][0].shape[2] == kv_heads
    with torch.no_grad():
        with native_only():
            expected = generate(single, single)
            torch.testing.assert_close(generate(model, model), expected, **TOL)
        torch.testing.assert_close(generate(model, model), expected, **TOL)
        if compiled:
            # the passes must run here, not be served from an earlier run's Inductor cache
            with (
                torch._inductor.config.patch(fx_graph_cache=False),
                torch._functorch.config.patch(enable_autograd_cache=False),
            ):
                forward = ir_stack.compile(model)
                torch.testing.assert_close(generate(forward, model), expected, **TOL)
            report = ir_passes.last_report()
            assert report is not None
            # one all-reduce after the embedding, two a layer
            assert len(report.selected_impls["all_reduce"]) == 1 + 2 * CONFIG.num_layers
        config = ir_stack.Config(piecewise=CompilationConfig(cache_dir=cache_root / "cache"))
        forward = ir_stack.compile(model, config)
        got = generate(forward, model, decode=compiled)
        torch.testing.assert_close(got, expected[: got.shape[0]], **TOL)


def check_fp8_model(rank: int, world: int) -> None:
    """The fp8 model keeps the single-device model's scales: each rank's share of a
    quantized projection, summed, gives the single-device logits."""
    single = LlamaModel(CONFIG.with_fp8()).eval()
    model = ParallelLlamaModel(CONFIG.with_fp8()).eval()
    with torch.no_grad():
        torch.testing.assert_close(generate(model, model), generate(single, single), **TOL)


def world_two(rank: int, world: int, cache_root: Path) -> None:
    check_model(rank, world, cache_root, compiled=True)
    check_fp8_model(rank, world)


def world_four(rank: int, world: int, cache_root: Path) -> None:
    check_model(rank, world, cache_root, compiled=False)


def test_two_ranks_eager_compiled_piecewise_and_fp8(tmp_path: Path) -> None:
    run_in_world(world_two, 2, tmp_path)


def test_four_ranks_with_replicated_kv_heads(tmp_path: Path) -> None:
    run_in_world(world_four, 4, tmp_path)


TORCHRUN_SCRIPT = """
import torch, torch.distributed as dist
import ir_stack
from ir_stack.models import LlamaModel, ParallelLlamaModel

dist.init_process_group("gloo")
single, model = LlamaModel().eval(), ParallelLlamaModel().eval()
ids = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(0))
positions = torch.arange(5).repeat(2, 1)
with torch.no_grad():
    expected = single(ids, positions, single.new_kv_cache(2))
    got = ir_stack.compile(model)(ids, positions, model.new_kv_cache(2))
torch.testing.assert_close(got, expected, atol=2e-5, rtol=2e-5)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: ok")
dist.destroy_process_group()
"""


def test_started_by_torchrun_and_compiled(tmp_path: Path) -> None:
    """Under ``torchrun --nproc-per-node 2`` the model takes the default group, and
    ``ir_stack.compile`` of it gives the single-device logits."""
    script = tmp_path / "tp.py"
    script.write_text(TORCHRUN_SCRIPT)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    env.pop("TRITON_INTERPRET", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    done = subprocess.run(
        [*command, "--standalone", str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rank 0 of 2: ok" in done.stdout
    assert "rank 1 of 2: ok" in done.stdout
