"""The reference model: decode consistent with prefill; eager native == dispatched ==
compiled (ir_stack.compile) on CPU."""

import os
import subprocess
import sys

import pytest
import torch

import ir_dispatch
import ir_passes
import ir_stack
from ir_spec import ops
from ir_stack.models import TINY, LlamaConfig, LlamaModel
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
    torch.manual_seed(0)
    batch, slots, heads, kv_heads, head_dim, max_pos = 3, 5, 4, 2, 16, 40
    qkv = torch.randn(batch, (heads + 2 * kv_heads) * head_dim)
    q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    positions = torch.tensor([[0], [17], [39]])
    k_cache, v_cache = (torch.randn(slots, max_pos, kv_heads, head_dim) for _ in range(2))
    caches = [k_cache, v_cache, k_cache.clone(), v_cache.clone()]
    out_a, out_b = torch.empty_like(q), torch.empty_like(q)
    v = v.contiguous()
    torch.ops.ir_stack.attention(q, k, v, caches[0], caches[1], positions, out_a)
    torch.ops.ir_stack.decode_attention(q, k, v, caches[2], caches[3], positions, out_b)
    torch.testing.assert_close(out_b, out_a, atol=1e-5, rtol=1e-5)
    for before, after in ((caches[0], caches[2]), (caches[1], caches[3])):
        torch.testing.assert_close(before, after, atol=0, rtol=0)


def test_attention_ops_pass_opcheck() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 64), torch.randn(2, 32), torch.randn(2, 32)
    positions = torch.tensor([[3], [9]])
    for op in (torch.ops.ir_stack.attention, torch.ops.ir_stack.decode_attention):
        args = (q, k, v, torch.randn(3, 16, 2, 16), torch.randn(3, 16, 2, 16), positions)
        torch.library.opcheck(op, (*args, torch.empty_like(q)))


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
    fusions = ir_passes.last_report().fusions
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


@pytest.mark.parametrize("op_name", ["attention", "decode_attention"])
def test_rows_with_negative_positions_write_nothing(op_name: str) -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 64), torch.randn(3, 32), torch.randn(3, 32)
    k_cache, v_cache = torch.randn(4, 16, 2, 16), torch.randn(4, 16, 2, 16)
    before = (k_cache.clone(), v_cache.clone())
    out = torch.empty_like(q)
    positions = torch.tensor([[5], [-1], [7]])  # row 1 is padding
    getattr(torch.ops.ir_stack, op_name)(q, k, v, k_cache, v_cache, positions, out)
    for cache, old, new in ((k_cache, before[0], k), (v_cache, before[1], v)):
        torch.testing.assert_close(cache[1], old[1], atol=0, rtol=0)
        torch.testing.assert_close(cache[0, 5], new[0].view(2, 16), atol=0, rtol=0)
        torch.testing.assert_close(cache[2, 7], new[2].view(2, 16), atol=0, rtol=0)
        changed = (cache != old).any(dim=(2, 3)).nonzero().tolist()
        assert changed == [[0, 5], [2, 7]]
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("op_name", ["attention", "decode_attention"])
def test_padding_rows_past_the_last_slot_are_skipped(op_name: str) -> None:
    """A batch of 3 padded to a CUDA graph of 4 (position -1) over caches of 3 slots: the three
    sequences get what they get unpadded, the padding row zeros; the caches the same."""
    torch.manual_seed(0)
    q, k, v = torch.randn(4, 64), torch.randn(4, 32), torch.randn(4, 32)
    positions = torch.tensor([[5], [0], [7], [-1]])
    caches = [torch.randn(3, 16, 2, 16) for _ in range(2)]
    padded_caches = [c.clone() for c in caches]
    op = getattr(torch.ops.ir_stack, op_name)
    expected, out = torch.empty(3, 64), torch.full((4, 64), float("nan"))
    op(q[:3], k[:3], v[:3], *caches, positions[:3], expected)
    op(q, k, v, *padded_caches, positions, out)
    torch.testing.assert_close(out[:3], expected, atol=0, rtol=0)
    assert torch.equal(out[3], torch.zeros(64))
    for cache, padded in zip(caches, padded_caches, strict=True):
        assert torch.equal(cache, padded)
