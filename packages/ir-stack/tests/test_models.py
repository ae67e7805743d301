"""The reference model: decode consistent with prefill; eager native == dispatched ==
compiled (ir_stack.compile) on CPU."""

import os
import subprocess
import sys
from typing import Any

import pytest
import torch

import ir_dispatch
import ir_passes
import ir_stack
from ir_piecewise import CompilationConfig, counters
from ir_spec import ops
from ir_stack.compiler import passes_per_length
from ir_stack.models import QWEN3_TINY, TINY, LlamaConfig, LlamaModel, slot_mapping
from ir_stack.models.quant import Fp8Linear


def generate(forward: object, model: LlamaModel) -> torch.Tensor:
    ids = torch.randint(0, TINY.vocab_size, (2, 6), generator=torch.Generator().manual_seed(0))
    cache = model.new_kv_cache(2)
    out = [forward(ids, torch.arange(6).repeat(2, 1), cache)]  # type: ignore[operator]
    nxt = out[0].view(2, 6, -1)[:, -1].argmax(-1, keepdim=True)
    out.append(forward(nxt, torch.full((2, 1), 6), cache))  # type: ignore[operator]
    return torch.cat(out)


def test_decode_matches_longer_prefill() -> None:
    model = LlamaModel().eval()
    with torch.no_grad():
        ids = torch.randint(0, TINY.vocab_size, (1, 7))
        full = model(ids, torch.arange(7)[None], model.new_kv_cache(1))
        cache = model.new_kv_cache(1)
        model(ids[:, :6], torch.arange(6)[None], cache)
        step = model(ids[:, 6:], torch.tensor([[6]]), cache)
    torch.testing.assert_close(step, full[-1:], atol=1e-5, rtol=1e-5)


def test_eager_native_dispatched_and_compiled_agree() -> None:
    model = LlamaModel().eval()
    with torch.no_grad():
        ir_dispatch.set_priority({op.name: ["native"] for op in ops})
        native = generate(model, model)
        ir_dispatch.set_priority()
        dispatched = generate(model, model)
        compiled = generate(ir_stack.compile(model), model)
    torch.testing.assert_close(dispatched, native)
    torch.testing.assert_close(compiled, native, atol=1e-4, rtol=1e-4)


def test_decode_attention_matches_attention_with_spare_slots() -> None:
    """Keys and values stored through `write_kv_cache` at the model's slots; both attention
    ops read them and agree, and neither writes the caches."""
    torch.manual_seed(0)
    batch, slots, heads, kv_heads, head_dim, max_pos = 3, 5, 4, 2, 16, 40
    qkv = torch.randn(batch, (heads + 2 * kv_heads) * head_dim)
    q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    positions = torch.tensor([[0], [17], [39]])
    k_cache, v_cache = (torch.randn(slots, max_pos, kv_heads, head_dim) for _ in range(2))
    ops.write_kv_cache(k, v, k_cache, v_cache, slot_mapping(positions, slots, max_pos))
    for b, p in enumerate(positions[:, 0].tolist()):
        torch.testing.assert_close(k_cache[b, p], k[b].view(kv_heads, head_dim), atol=0, rtol=0)
    stored = (k_cache.clone(), v_cache.clone())
    out_a, out_b = torch.empty_like(q), torch.empty_like(q)
    torch.ops.ir_stack.attention(q, k, v, k_cache, v_cache, positions, out_a)
    torch.ops.ir_stack.decode_attention(q, k_cache, v_cache, positions, out_b)
    torch.testing.assert_close(out_b, out_a, atol=1e-5, rtol=1e-5)
    assert torch.equal(k_cache, stored[0])
    assert torch.equal(v_cache, stored[1])


def test_attention_ops_pass_opcheck() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 64), torch.randn(2, 32), torch.randn(2, 32)
    positions = torch.tensor([[3], [9]])
    caches = (torch.randn(3, 16, 2, 16), torch.randn(3, 16, 2, 16))
    out = torch.empty_like(q)
    torch.library.opcheck(torch.ops.ir_stack.attention, (q, k, v, *caches, positions, out))
    torch.library.opcheck(torch.ops.ir_stack.decode_attention, (q, *caches, positions, out))
    prompts = torch.tensor([[0, 1], [0, 1]])
    plan = torch.ops.ir_stack.prompt_plan(prompts, 3)
    torch.library.opcheck(torch.ops.ir_stack.prompt_plan, (prompts, 3))
    torch.library.opcheck(torch.ops.ir_stack.attention, (q, k, v, *caches, prompts, out, plan))


@pytest.mark.parametrize(
    ("positions", "expected"),
    [
        ([[0, 1, 2], [0, 1, 2]], [2, 0]),  # whole prompts: their own keys, flash kernels
        ([[4, 5, 6], [0, 1, 2]], [6, 3]),  # a chunk after 4 cached positions: over the cache
        ([[0, 1, 2], [-1, -1, -1]], [2, 3]),  # padding within the slots: over the cache
        ([[0, 1, 2], [0, 1, 2], [-1, -1, -1]], [2, 0]),  # padding past the last of 2 slots
    ],
)
def test_a_prompt_plan_holds_the_attended_length_and_the_rows_off_their_prompt(
    positions: list[list[int]], expected: list[int]
) -> None:
    plan = torch.ops.ir_stack.prompt_plan(torch.tensor(positions), 2)
    assert plan.device.type == "cpu"
    assert plan.tolist() == expected


@pytest.mark.parametrize("start", [0, 4])
def test_attention_given_its_plan_is_attention_that_reads_it_itself(start: int) -> None:
    """Whole prompts (from 0) and a chunk over cached positions (from 4), with padding past
    the last slot: the same output with the step's plan as without."""
    torch.manual_seed(0)
    batch, tokens, slots = 3, 3, 2
    q = torch.randn(batch * tokens, 64)
    k, v = torch.randn(batch * tokens, 32), torch.randn(batch * tokens, 32)
    caches = [torch.randn(slots, 16, 2, 16) for _ in range(2)]
    positions = torch.arange(start, start + tokens).repeat(batch, 1)
    positions[-1] = -1
    expected, got = torch.empty_like(q), torch.empty_like(q)
    torch.ops.ir_stack.attention(q, k, v, *caches, positions, expected)
    plan = torch.ops.ir_stack.prompt_plan(positions, slots)
    torch.ops.ir_stack.attention(q, k, v, *caches, positions, got, plan)
    torch.testing.assert_close(got, expected, atol=0, rtol=0)


def test_a_compiled_prompt_reads_the_positions_on_the_host_once_a_step(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Every layer's attention of a prompt takes the one plan of its step: the host waits for
    the GPU once a step, not once a layer (the eager model and its piecewise compilation)."""
    from ir_stack.models import attention

    reads: list[torch.Size] = []
    plan_of = attention._plan_of

    def counted(positions: torch.Tensor) -> torch.Tensor:
        reads.append(positions.shape)
        return plan_of(positions)

    monkeypatch.setattr(attention, "_plan_of", counted)
    model = LlamaModel(TINY, seed=2).eval()
    assert TINY.num_layers > 1
    config = ir_stack.Config(piecewise=CompilationConfig(cache_dir=tmp_path, cache=False))
    ids = torch.randint(0, TINY.vocab_size, (2, 5), generator=torch.Generator().manual_seed(1))
    positions = torch.arange(5).repeat(2, 1)
    with torch.no_grad():
        expected = model(ids, positions, model.new_kv_cache(2))
        assert len(reads) == 1
        compiled = ir_stack.compile(model, config)
        compiled(ids, positions, model.new_kv_cache(2))  # traces and compiles
        reads.clear()
        got = compiled(ids, positions, model.new_kv_cache(2))
    assert len(reads) == 1
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


KERNEL_CHECK = """
import numpy, sys, torch, triton, triton.language as tl
from ir_stack.models import decode_kernel
from ir_stack.models.attention import _attend


@triton.jit
def _loaded_bound(bound_ptr, out_ptr):
    total = 0
    for _ in range(0, tl.load(bound_ptr), 1):
        total += 1
    tl.store(out_ptr, total)


try:  # Triton 3.6's interpreter takes int() of a one-element array, which NumPy 2.4 refuses
    _loaded_bound[(1,)](torch.tensor([3]), torch.zeros(1, dtype=torch.int64))
except Exception as error:
    if "only 0-dimensional arrays" not in str(error):
        raise
    print(f"SKIP: Triton {triton.__version__}'s interpreter cannot take a loop bound loaded "
          f"from memory under NumPy {numpy.__version__}")
    sys.exit(0)
torch.manual_seed(0)
for dtype, (batch, heads, kv_heads, head_dim, max_pos) in [
    (torch.float32, (3, 4, 2, 16, 150)),
    (torch.float16, (2, 8, 8, 32, 70)),
    (torch.float32, (1, 6, 1, 64, 65)),
]:
    qkv = torch.randn(batch, (heads + 2 * kv_heads) * head_dim, dtype=dtype)
    q = qkv[:, : heads * head_dim]  # a strided view, as the model passes it
    k_cache = torch.randn(batch + 1, max_pos, kv_heads, head_dim, dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    positions = torch.randint(0, max_pos, (batch, 1))
    positions[0, 0] = max_pos - 1
    if batch > 1:
        positions[1, 0] = -1  # a padding row
    expected, out = torch.empty_like(q), torch.empty_like(q)
    _attend(q, k_cache, v_cache, positions, max_pos, expected)
    assert decode_kernel.supports(q, k_cache, positions, out)
    decode_kernel.decode_attention(q, k_cache, v_cache, positions, out)
    tol = 1e-5 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(out, expected, atol=tol, rtol=tol)
# batch-invariant mode: a sequence's bits are the same alone and in a batch; short sequences
# leave most splits empty
k_cache = torch.randn(4, 300, 2, 32)
v_cache = torch.randn_like(k_cache)
q = torch.randn(4, 8 * 32)
positions = torch.tensor([[299], [2], [0], [140]])
whole = torch.empty_like(q)
decode_kernel.decode_attention(q, k_cache, v_cache, positions, whole, batch_invariant=True)
for b in range(4):
    alone = torch.empty_like(q[b : b + 1])
    decode_kernel.decode_attention(
        q[b : b + 1], k_cache[b : b + 1], v_cache[b : b + 1], positions[b : b + 1], alone,
        batch_invariant=True,
    )
    assert torch.equal(alone[0], whole[b]), b
expected = torch.empty_like(q)
_attend(q, k_cache, v_cache, positions, 300, expected)
torch.testing.assert_close(whole, expected, atol=1e-5, rtol=1e-5)
print("ok")
"""


def test_decode_kernel_matches_reference_under_triton_interpreter() -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", KERNEL_CHECK], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    if done.stdout.startswith("SKIP: "):
        pytest.skip(done.stdout.removeprefix("SKIP: ").strip())
    assert "ok" in done.stdout


def test_decode_kernel_reads_a_cache_past_32_bit_offsets_in_step_with_the_reference() -> None:
    """A cache of more than 2**31 elements (three sequences of 2**30): the last sequence starts
    past a 32-bit offset and its attention still reads its own rows."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("triton")
    from ir_stack.models import decode_kernel
    from ir_stack.models.attention import _attend

    batch, max_pos, kv_heads, head_dim, heads, used = 3, 2**24, 2, 32, 4, 64
    need = 2 * batch * max_pos * kv_heads * head_dim * 2 + (2 << 30)
    if torch.cuda.mem_get_info()[0] < need:
        pytest.skip(f"needs {need / 2**30:.0f} GiB of free GPU memory")
    torch.manual_seed(0)
    k_cache, v_cache = (
        torch.empty(batch, max_pos, kv_heads, head_dim, dtype=torch.bfloat16, device="cuda")
        for _ in range(2)
    )
    assert k_cache.numel() > 2**31
    for cache in (k_cache, v_cache):
        cache[:, :used].normal_()
    q = torch.randn(batch, heads * head_dim, dtype=torch.bfloat16, device="cuda")
    positions = torch.tensor([[used - 1], [5], [used - 2]], device="cuda")
    out, expected = torch.empty_like(q), torch.empty_like(q)
    assert decode_kernel.supports(q, k_cache, positions, out)
    decode_kernel.decode_attention(q, k_cache, v_cache, positions, out)
    _attend(q, k_cache[:, :used], v_cache[:, :used], positions, used, expected)
    torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)
    del k_cache, v_cache
    torch.cuda.empty_cache()


def test_decode_kernel_leaves_a_sequence_past_32_bit_offsets_to_the_reference() -> None:
    """One sequence's rows must lie within 32-bit offsets of its start; a cache whose rows do
    not is refused by `supports` (the op then attends with the reference code)."""
    from ir_stack.models import decode_kernel

    q = torch.randn(1, 4 * 32)
    small = torch.empty(1, 8, 2, 32)
    huge = torch.empty(1, 2**26, 2, 32, device="meta")  # one sequence of 2**32 elements
    positions = torch.zeros(1, 1, dtype=torch.long)
    out = torch.empty_like(q)
    assert decode_kernel.supports(q, small, positions, out) == (decode_kernel.triton is not None)
    assert not decode_kernel.supports(q, huge, positions, out)


def test_fp8_model_is_close_to_full_precision_and_fuses_when_compiled() -> None:
    full = LlamaModel(TINY).eval()
    quantized = LlamaModel(TINY.with_fp8()).eval()
    ids = torch.randint(0, TINY.vocab_size, (2, 6), generator=torch.Generator().manual_seed(1))
    positions = torch.arange(6).repeat(2, 1)
    with torch.no_grad():
        reference = full(ids, positions, full.new_kv_cache(2))
        eager = quantized(ids, positions, quantized.new_kv_cache(2))
        config = ir_stack.Config(passes=ir_passes.PassConfig(force_fusion=True))
        # the passes must run here, not be served from an earlier run's Inductor cache
        with (
            torch._inductor.config.patch(fx_graph_cache=False),
            torch._functorch.config.patch(enable_autograd_cache=False),
        ):
            compiled = ir_stack.compile(quantized, config)(
                ids, positions, quantized.new_kv_cache(2)
            )
    # fp8 (3 mantissa bits) on every linear input: a few percent of the logits' range
    assert (eager - reference).abs().max() < 0.2 * reference.abs().max()
    torch.testing.assert_close(compiled, eager, atol=1e-4, rtol=1e-4)
    report = ir_passes.last_report()
    assert report is not None
    fusions = report.fusions
    # the first layer's input norm is rms_norm (no residual yet), every other norm fused_add
    assert fusions["rms_norm+static_quant_fp8"] == 1
    assert fusions["fused_add_rms_norm+static_quant_fp8"] == 2 * TINY.num_layers - 1
    assert fusions["silu_and_mul+static_quant_fp8"] == TINY.num_layers


def test_fp8_weights_and_scales_survive_dtype_casts() -> None:
    model = LlamaModel(TINY.with_fp8()).to(torch.bfloat16)
    linear = model.layers[0].qkv
    assert isinstance(linear, Fp8Linear)
    assert linear.weight.dtype == torch.float8_e4m3fn
    assert linear.input_scale.dtype == torch.float32
    assert float(linear.input_scale) > 0


def test_bad_quantization_is_refused() -> None:
    with pytest.raises(ValueError, match="quantization: got 'int4'"):
        LlamaConfig(quantization="int4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="multiples of 16"):
        Fp8Linear(torch.randn(24, 20))


def test_plain_torch_model_is_the_same_model_without_ir_ops() -> None:
    ir_model = LlamaModel(TINY.with_fp8()).eval()
    plain = LlamaModel(TINY.with_fp8(), plain_torch=True).eval()
    ids = torch.randint(0, TINY.vocab_size, (2, 5), generator=torch.Generator().manual_seed(3))
    positions = torch.arange(5).repeat(2, 1)
    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: object) -> object:
        graphs.append(gm)
        return gm

    with torch.no_grad(), ir_dispatch.priority({op.name: ["native"] for op in ops}):
        expected = ir_model(ids, positions, ir_model.new_kv_cache(2))
        got = torch.compile(plain, backend=capture, fullgraph=True)(
            ids, positions, plain.new_kv_cache(2)
        )
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    targets = {str(n.target) for gm in graphs for n in gm.graph.nodes}
    assert not any(t.startswith("ir.") for t in targets)


def random_caches(
    model: LlamaModel, slots: int, generator: torch.Generator
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Caches of `slots` slots for `model`, filled with random numbers (as live sequences')."""
    caches = model.new_kv_cache(slots)
    for k, v in caches:
        k.normal_(generator=generator)
        v.normal_(generator=generator)
    return caches


def test_slot_mapping_skips_padding_and_rows_without_a_slot() -> None:
    """Sequence b's position p is row b * max_positions + p of the flattened cache; padding
    rows (negative positions), positions past the cache and sequences past the last slot store
    nothing (-1)."""
    positions = torch.tensor([[5, 6], [-1, -1], [7, 16], [0, 1]])
    got = slot_mapping(positions, slots=3, max_positions=16)
    assert got.tolist() == [5, 6, -1, -1, 39, -1, -1, -1]
    assert slot_mapping(positions.int(), 3, 16).dtype == torch.int64


def test_rows_with_negative_positions_store_nothing() -> None:
    """The model's cache write: `slot_mapping` then `write_kv_cache`; a padding row (position
    -1, its slot in use by a live sequence) leaves that slot as it was."""
    gen = torch.Generator().manual_seed(4)
    k, v = torch.randn(3, 32, generator=gen), torch.randn(3, 32, generator=gen)
    k_cache, v_cache = torch.randn(4, 16, 2, 16, generator=gen), torch.randn(4, 16, 2, 16)
    before = (k_cache.clone(), v_cache.clone())
    positions = torch.tensor([[5], [-1], [7]])  # row 1 is padding
    ops.write_kv_cache(k, v, k_cache, v_cache, slot_mapping(positions, 4, 16))
    for cache, old, new in ((k_cache, before[0], k), (v_cache, before[1], v)):
        torch.testing.assert_close(cache[0, 5], new[0].view(2, 16), atol=0, rtol=0)
        torch.testing.assert_close(cache[2, 7], new[2].view(2, 16), atol=0, rtol=0)
        changed = (cache != old).any(dim=(2, 3)).nonzero().tolist()
        assert changed == [[0, 5], [2, 7]]


@pytest.mark.parametrize("config", [TINY, QWEN3_TINY], ids=["llama", "qwen3"])
def test_a_sequence_past_the_last_slot_stores_nothing_in_the_model(config: LlamaConfig) -> None:
    """A decode step of 4 sequences over caches of 3 slots (a batch of 3 replaying the graph of
    4): the first three get the logits of the step of three, the caches are those of the step
    of three, changed at the live sequences' positions only."""
    model = LlamaModel(config).eval()
    gen = torch.Generator().manual_seed(5)
    caches = random_caches(model, 3, gen)
    padded_caches = [(k.clone(), v.clone()) for k, v in caches]
    ids = torch.randint(0, config.vocab_size, (4, 1), generator=gen)
    positions = torch.tensor([[9], [0], [30], [4]])
    before = [(k.clone(), v.clone()) for k, v in caches]
    with torch.no_grad():
        padded = model(ids, positions, padded_caches)
        alone = model(ids[:3], positions[:3], caches)
    torch.testing.assert_close(padded[:3], alone, atol=1e-5, rtol=1e-5)
    for old, new, padded_pair in zip(before, caches, padded_caches, strict=True):
        for a, b, c in zip(old, new, padded_pair, strict=True):
            torch.testing.assert_close(c, b, atol=1e-5, rtol=1e-5)  # matmuls of 4 rows, not 3
            assert (a != b).any(dim=(2, 3)).nonzero().tolist() == [[0, 9], [1, 0], [2, 30]]


@pytest.mark.parametrize("op_name", ["attention", "decode_attention"])
def test_padding_rows_past_the_last_slot_are_skipped(op_name: str) -> None:
    """A batch of 3 padded to a CUDA graph of 4 (position -1) over caches of 3 slots: the three
    sequences get what they get unpadded, the padding row zeros; the caches are only read."""
    torch.manual_seed(0)
    q, k, v = torch.randn(4, 64), torch.randn(4, 32), torch.randn(4, 32)
    positions = torch.tensor([[5], [0], [7], [-1]])
    caches = [torch.randn(3, 16, 2, 16) for _ in range(2)]
    before = [c.clone() for c in caches]
    expected, out = torch.empty(3, 64), torch.full((4, 64), float("nan"))
    if op_name == "attention":
        torch.ops.ir_stack.attention(q[:3], k[:3], v[:3], *caches, positions[:3], expected)
        torch.ops.ir_stack.attention(q, k, v, *caches, positions, out)
    else:
        torch.ops.ir_stack.decode_attention(q[:3], *caches, positions[:3], expected)
        torch.ops.ir_stack.decode_attention(q, *caches, positions, out)
    torch.testing.assert_close(out[:3], expected, atol=0, rtol=0)
    assert torch.equal(out[3], torch.zeros(64))
    for cache, old in zip(caches, before, strict=True):
        assert torch.equal(cache, old)


# ------------------------------------------------------------------ the rotary fusions
QK = ir_passes.QK_NORM_ROPE_PATTERN
KV = ir_passes.ROPE_KVCACHE_PATTERN
UNFUSED = ir_passes.PassConfig(
    force_fusion=True, fuse_rope_kvcache=False, enable_qk_norm_rope_fusion=False
)


def compiled_logits(
    model: LlamaModel, passes: ir_passes.PassConfig, ids: torch.Tensor, positions: torch.Tensor
) -> tuple[torch.Tensor, dict[str, int]]:
    """The logits of `model` compiled whole with `passes`, and the fusions that fired."""
    torch._dynamo.reset()
    # the passes must run here, not be served from an earlier run's Inductor cache
    with (
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        logits = ir_stack.compile(model, ir_stack.Config(passes=passes))(
            ids, positions, model.new_kv_cache(ids.shape[0])
        )
    report = ir_passes.last_report()
    assert report is not None
    return logits, dict(report.fusions)


@pytest.mark.parametrize(
    ("config", "passes", "fired"),
    [
        (TINY, ir_passes.PassConfig(force_fusion=True), {KV: TINY.num_layers}),
        (QWEN3_TINY, ir_passes.PassConfig(force_fusion=True), {QK: TINY.num_layers}),
        (
            QWEN3_TINY,
            ir_passes.PassConfig(force_fusion=True, enable_qk_norm_rope_fusion=False),
            {KV: TINY.num_layers},
        ),
    ],
    ids=["llama", "qwen3", "qwen3-no-qk-norm-fusion"],
)
def test_the_rotary_fusions_fire_on_the_reference_models_and_keep_the_logits(
    config: LlamaConfig, passes: ir_passes.PassConfig, fired: dict[str, int]
) -> None:
    """Forced on this CPU (every op runs natively): each layer's rotary embedding fuses with
    its cache write (Llama), or with the per-head norms before it (Qwen3-style: that fusion
    runs first, the cache write stays apart); the logits are the unfused graph's, and the
    eager model's."""
    model = LlamaModel(config, seed=2).eval()
    gen = torch.Generator().manual_seed(6)
    ids = torch.randint(0, config.vocab_size, (2, 5), generator=gen)
    positions = torch.arange(5).repeat(2, 1)
    with torch.no_grad():
        eager = model(ids, positions, model.new_kv_cache(2))
        fused, fusions = compiled_logits(model, passes, ids, positions)
        unfused, plain = compiled_logits(model, UNFUSED, ids, positions)
    assert {p: n for p, n in fusions.items() if p in (QK, KV)} == fired
    assert not {QK, KV} & set(plain)
    torch.testing.assert_close(fused, unfused, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused, eager, atol=1e-4, rtol=1e-4)


def test_fusion_thresholds_count_the_tokens_of_a_sequence_trace() -> None:
    """Piecewise compilation of the reference models counts sequences: a threshold of 256
    tokens is 256 one-token sequences, 42 six-token ones, none of 300 tokens each."""
    passes = ir_passes.PassConfig(qk_norm_rope_max_tokens=64)
    assert passes_per_length(passes, 1) is passes
    six = passes_per_length(passes, 6)
    assert (six.rope_kvcache_max_tokens, six.qk_norm_rope_max_tokens) == (42, 10)
    assert six.fusion_on("fuse_rope_kvcache")
    assert six.fusion_on("enable_qk_norm_rope_fusion")
    long = passes_per_length(passes, 100)
    assert long.rope_kvcache_max_tokens == 2
    assert not long.fusion_on("enable_qk_norm_rope_fusion")
    assert not passes_per_length(passes, 300).fusion_on("fuse_rope_kvcache")
    off = ir_passes.PassConfig(level=1)
    assert passes_per_length(off, 6) is off  # no fusion with a threshold is on


def test_piecewise_ranges_split_at_the_rotary_thresholds_and_fuse_below(tmp_path: Any) -> None:
    """The Qwen3-style model compiled piecewise with the default single range: the rotary
    fusions' threshold (256 tokens) splits it, so a prefill of 6 tokens a sequence runs them
    in the range [1, 42] of sequences and leaves them out of [43, inf), and decode in [1, 256];
    the logits stay the eager model's."""
    model = LlamaModel(QWEN3_TINY, seed=3).eval()
    passes = ir_passes.PassConfig(force_fusion=True)
    config = ir_stack.Config(
        passes=passes, piecewise=CompilationConfig(cache_dir=tmp_path, cache=False)
    )
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(0, QWEN3_TINY.vocab_size, (2, 6), generator=gen)
    step = torch.randint(0, QWEN3_TINY.vocab_size, (2, 1), generator=gen)
    counters.reset()
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False):
        compiled = ir_stack.compile(model, config)
        cache, eager_cache = model.new_kv_cache(2), model.new_kv_cache(2)
        got = [compiled(ids, torch.arange(6).repeat(2, 1), cache).clone()]
        got.append(compiled(step, torch.full((2, 1), 6), cache).clone())
        expected = [model(ids, torch.arange(6).repeat(2, 1), eager_cache)]
        expected.append(model(step, torch.full((2, 1), 6), eager_cache))
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    rotary = {"fuse_rope_kvcache", "enable_qk_norm_rope_fusion"}
    enabled = counters.fusions_enabled
    assert rotary <= set(enabled["range-1-42"])
    assert rotary <= set(enabled["range-1-256"])
    assert not rotary & set(enabled["range-43-inf"])
    assert not rotary & set(enabled["range-257-inf"])
    applied = counters.fusions_applied
    # the two layers' pieces differ (the first starts at the embedding), so each compiles
    assert applied["range-1-42"][QK] == applied["range-1-256"][QK] == QWEN3_TINY.num_layers
    assert QK not in applied["range-43-inf"]
    assert QK not in applied["range-257-inf"]
