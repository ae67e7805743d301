"""Fusions per compile range: the thresholds of the fusions that are on end compile ranges, a
range gets the fusions whose token threshold covers it whole (a compile size is a range of one
size), and the counters say which range got which."""

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

import ir_dispatch
import ir_piecewise
from ir_passes import FUSION_SWITCHES, QK_NORM_ROPE_PATTERN, ROPE_KVCACHE_PATTERN, PassConfig
from ir_piecewise import CompilationConfig, counters
from ir_piecewise.pieces import passes_for
from ir_spec import ops

sys.path.insert(0, str(Path(__file__).parent))
from toy_model import SPLITTING_OPS, ToyModel, toy_config

ACT_QUANT = "silu_and_mul+static_quant_fp8"
RESIDUAL_ADD = "add+rms_norm"


@pytest.fixture(autouse=True)
def passes_run_every_time() -> Iterator[None]:
    """Inductor's graph cache off: every compilation runs the passes, which fill the counters."""
    with torch._inductor.config.patch(fx_graph_cache=False):
        yield


def test_each_range_gets_the_pass_configuration_of_its_token_counts() -> None:
    config = CompilationConfig(passes=PassConfig(norm_quant_max_tokens=8))
    assert passes_for(config, None) is config.passes  # a piece without a token dimension
    assert passes_for(config, (1, 8)).token_range == (1, 8)
    assert passes_for(config, (4, 4)).fusion_applies("fuse_norm_quant")
    assert not passes_for(config, (9, None)).fusion_applies("fuse_norm_quant")
    assert not passes_for(config, (1, 16)).fusion_applies("fuse_norm_quant")  # not whole


def test_the_thresholds_of_the_fusions_that_are_on_end_compile_ranges() -> None:
    """By default (O2) the rotary fusions are on with a threshold of 256 tokens: the single
    range [1, inf) becomes [1, 256] and [257, inf). Thresholds join the configured endpoints
    (once each); a fusion that is off, or without a threshold, adds none."""
    assert CompilationConfig().ranges == ((1, 256), (257, None))
    both = CompilationConfig(
        compile_ranges_endpoints=(16, 256),
        passes=PassConfig(rope_kvcache_max_tokens=64, norm_quant_max_tokens=16),
    )
    assert both.fusion_endpoints == (16, 64, 256)
    assert both.range_endpoints == (16, 64, 256)
    assert both.compile_ranges_endpoints == (16, 256)  # as configured
    assert CompilationConfig(passes=PassConfig(level=1)).ranges == ((1, None),)
    off = PassConfig(fuse_rope_kvcache=False, qk_norm_rope_max_tokens=None)
    assert CompilationConfig(passes=off).ranges == ((1, None),)
    one = PassConfig(enable_qk_norm_rope_fusion=False, rope_kvcache_max_tokens=32)
    assert CompilationConfig(passes=one).ranges == ((1, 32), (33, None))
    # a changed pass configuration changes the ranges (and the key), nothing stays behind
    replaced = dataclasses.replace(both, passes=PassConfig(level=0))
    assert replaced.ranges == ((1, 16), (17, 256), (257, None))
    assert replaced.key() != both.key()


def test_the_toy_model_fuses_below_the_threshold_only(tmp_path: Path) -> None:
    """``fuse_act_quant`` up to 8 tokens: the range [1, 8] and the size 4 fuse the MLP's
    activation and quantization, the ranges [9, 256] (ended by the rotary fusions' threshold)
    and [257, inf) keep them apart; every call agrees with the eager model."""
    model = ToyModel(fp8_mlp=True).eval()
    passes = PassConfig(force_fusion=True, act_quant_max_tokens=8)
    config = toy_config(
        tmp_path, compile_sizes=(4,), compile_ranges_endpoints=(8,), passes=passes, cache=False
    )
    compiled = ir_piecewise.compile(model, config)
    with torch.no_grad():
        for n in (5, 4, 12):
            x = torch.randn(n, 64)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
    on = tuple(s for s in FUSION_SWITCHES if passes.fusion_on(s))  # not sequence parallelism
    everything_but_act = tuple(s for s in on if s != "fuse_act_quant")
    rotary = {"fuse_rope_kvcache", "enable_qk_norm_rope_fusion"}
    assert counters.fusions_enabled == {
        "range-1-8": on,
        "range-9-256": everything_but_act,
        "range-257-inf": tuple(s for s in everything_but_act if s not in rotary),
        "size-4": on,
    }
    applied = counters.fusions_applied
    assert applied["range-1-8"][ACT_QUANT] >= 1
    assert applied["size-4"][ACT_QUANT] >= 1
    assert ACT_QUANT not in applied["range-9-256"]
    assert ACT_QUANT not in applied["range-257-inf"]
    counters.reset()
    assert counters.fusions_enabled == {}
    assert counters.fusions_applied == {}


# ----------------------------------------------------------- a model with the new ops
HEADS, HEAD = 2, 32
HIDDEN = HEADS * HEAD
BLOCKS, BLOCK_SIZE = 4, 8


class RopeLayer(nn.Module):
    """A residual add and norm, a packed qkv projection, per-head query / key norms, the
    rotary embedding, the KV-cache write and the toy attention (the splitting op)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.Parameter(1 + 0.1 * torch.randn(HIDDEN))
        self.q_norm = nn.Parameter(1 + 0.1 * torch.randn(HEAD))
        self.k_norm = nn.Parameter(1 + 0.1 * torch.randn(HEAD))
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.register_buffer("cos_sin", torch.randn(64, HEAD))

    def forward(
        self,
        hidden: Tensor,
        residual: Tensor,
        positions: Tensor,
        key_cache: Tensor,
        value_cache: Tensor,
        slots: Tensor,
    ) -> tuple[Tensor, Tensor]:
        hidden = hidden + residual
        q, k, v = self.qkv(ops.rms_norm(hidden, self.norm, 1e-6)).split(HIDDEN, dim=-1)
        tokens = q.shape[0]
        q = ops.rms_norm(q.view(tokens, HEADS, HEAD), self.q_norm, 1e-6).view(tokens, HIDDEN)
        k = ops.rms_norm(k.view(tokens, HEADS, HEAD), self.k_norm, 1e-6).view(tokens, HIDDEN)
        q, k = ops.rotary_embedding(positions, q, k, HEAD, self.cos_sin, True)
        ops.write_kv_cache(k, v, key_cache, value_cache, slots)
        out = torch.empty_like(q)
        torch.ops.ir_piecewise_toy.attention(q, k, v, out)
        return out, hidden


class RopeModel(nn.Module):
    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList(RopeLayer() for _ in range(layers))

    def forward(
        self, x: Tensor, positions: Tensor, key_cache: Tensor, value_cache: Tensor, slots: Tensor
    ) -> Tensor:
        hidden, residual = x, torch.zeros_like(x)
        for i, layer in enumerate(self.layers):
            hidden, residual = layer(
                hidden, residual, positions, key_cache[i], value_cache[i], slots
            )
        return hidden + residual


def rope_inputs(tokens: int, gen: torch.Generator) -> list[Tensor]:
    cache_shape = (2, BLOCKS, BLOCK_SIZE, HEADS, HEAD)
    return [
        torch.randn(tokens, HIDDEN, generator=gen),
        torch.randint(0, 64, (tokens,), generator=gen),
        torch.randn(cache_shape, generator=gen),
        torch.randn(cache_shape, generator=gen),
        torch.randperm(BLOCKS * BLOCK_SIZE, generator=gen)[:tokens],
    ]


def test_the_rotary_fusions_follow_their_thresholds(tmp_path: Path) -> None:
    """The rotary + KV-cache fusion up to 8 tokens, the QK-norm + rotary one up to 4, no
    endpoint configured: the thresholds cut the ranges [1, 4], [5, 8] and [9, inf). The range
    [1, 4] and the size 4 get the QK-norm fusion (it runs first, and the cache write stays
    apart), the range [5, 8] the cache one, the range [9, inf) neither; the residual add fuses
    everywhere. Each call gives the eager model's results and stores what it stores into the
    caller's caches."""
    model = RopeModel().eval()
    passes = PassConfig(force_fusion=True, rope_kvcache_max_tokens=8, qk_norm_rope_max_tokens=4)
    config = CompilationConfig(
        splitting_ops=SPLITTING_OPS, compile_sizes=(4,), passes=passes, cache=False
    )
    assert config.ranges == ((1, 4), (5, 8), (9, None))
    compiled = ir_piecewise.compile(
        model, config, dynamic_arg_dims={"x": 0, "positions": 0, "slots": 0}
    )
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad(), ir_dispatch.priority({op.name: ["native"] for op in ops}):
        for n in (5, 3, 4, 12):
            args = rope_inputs(n, gen)
            copies = [a.clone() for a in args]
            out = compiled(*args)
            torch.testing.assert_close(out, model(*copies), atol=2e-5, rtol=2e-5)
            torch.testing.assert_close(args[2], copies[2])  # key caches
            torch.testing.assert_close(args[3], copies[3])  # value caches
    rotary = {"fuse_rope_kvcache", "enable_qk_norm_rope_fusion"}
    enabled = counters.fusions_enabled
    assert set(enabled) == {"range-1-4", "range-5-8", "range-9-inf", "size-4"}
    assert rotary <= set(enabled["range-1-4"])
    assert rotary <= set(enabled["size-4"])
    assert "fuse_rope_kvcache" in enabled["range-5-8"]
    assert "enable_qk_norm_rope_fusion" not in enabled["range-5-8"]
    assert not rotary & set(enabled["range-9-inf"])
    applied = counters.fusions_applied
    for label in ("range-1-4", "size-4"):
        assert applied[label][QK_NORM_ROPE_PATTERN] == 2
        assert ROPE_KVCACHE_PATTERN not in applied[label]
    assert applied["range-5-8"][ROPE_KVCACHE_PATTERN] == 2
    assert QK_NORM_ROPE_PATTERN not in applied["range-5-8"]
    assert not {QK_NORM_ROPE_PATTERN, ROPE_KVCACHE_PATTERN} & set(applied["range-9-inf"])
    assert all(applied[label][RESIDUAL_ADD] >= 1 for label in applied)


def test_the_default_configuration_runs_the_rotary_fusions_below_256_tokens() -> None:
    """No range configured: the rotary fusions' default threshold splits [1, inf) at 256, and
    the lower range fuses (the QK-norm fusion first), the upper does not; both agree with the
    eager model."""
    model = RopeModel().eval()
    config = CompilationConfig(
        splitting_ops=SPLITTING_OPS, passes=PassConfig(force_fusion=True), cache=False
    )
    compiled = ir_piecewise.compile(
        model, config, dynamic_arg_dims={"x": 0, "positions": 0, "slots": 0}
    )
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad(), ir_dispatch.priority({op.name: ["native"] for op in ops}):
        for n in (3, 20):
            args = rope_inputs(n, gen)
            copies = [a.clone() for a in args]
            torch.testing.assert_close(compiled(*args), model(*copies), atol=2e-5, rtol=2e-5)
    assert set(counters.fusions_enabled) == {"range-1-256", "range-257-inf"}
    applied = counters.fusions_applied
    assert applied["range-1-256"][QK_NORM_ROPE_PATTERN] == 2
    assert not {QK_NORM_ROPE_PATTERN, ROPE_KVCACHE_PATTERN} & set(applied["range-257-inf"])


def test_pieces_served_by_inductors_graph_cache_are_counted_as_unreported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A piece Inductor's FX graph cache serves is compiled without the IR passes running:
    ``fusions_unreported`` counts it, so an empty ``fusions_applied`` is not read as "nothing
    fused"."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    model = ToyModel(fp8_mlp=True).eval()
    passes = PassConfig(force_fusion=True, act_quant_max_tokens=8)
    x = torch.randn(6, 64)  # in the range [1, 8], which fuses the activation and quant
    with (
        torch._inductor.config.patch(fx_graph_cache=True, force_disable_caches=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
        torch.no_grad(),
    ):
        for run in range(2):
            torch._dynamo.reset()
            counters.reset()
            config = toy_config(tmp_path / str(run), passes=passes, cache=False)
            compiled = ir_piecewise.compile(model, config)
            torch.testing.assert_close(compiled(x), model(x), atol=1e-4, rtol=1e-4)
            if run == 0:
                assert counters.fusions_unreported == {}
                assert counters.fusions_applied["range-1-8"][ACT_QUANT] >= 1
    assert counters.fusions_unreported.get("range-1-8", 0) >= 1, counters.fusions_unreported
    assert ACT_QUANT not in counters.fusions_applied.get("range-1-8", {})
