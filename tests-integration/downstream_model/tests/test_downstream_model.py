"""The downstream library on ir-spec alone: its ops run their native functions, which match
plain PyTorch (outputs and gradients), and stock ``torch.compile`` compiles it. The
``downstream`` nox session runs this file with ir-spec and nothing else of the stack; the
``integration`` session runs it beside the whole stack, unchanged."""

import subprocess
import sys

import torch
from torch import Tensor, nn

from ir_downstream_example import TinyConfig, TinyLM

TOL = {"atol": 1e-5, "rtol": 1e-5}


def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(variance + eps) * weight.float()).to(x.dtype)


def _rotate(x: Tensor, positions: Tensor, cos_sin: Tensor, heads: int) -> Tensor:
    tokens, width = x.shape
    head = x.view(tokens, heads, width // heads)
    cos, sin = cos_sin[positions].chunk(2, dim=-1)
    cos, sin = cos[:, None], sin[:, None]
    x1, x2 = head.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).reshape(tokens, width)


def plain_forward(model: TinyLM, input_ids: Tensor) -> Tensor:
    """`model`'s forward written in plain PyTorch, from its own parameters."""
    c = model.config
    positions = torch.arange(input_ids.shape[0])
    hidden = model.embed(input_ids)
    residual = torch.zeros_like(hidden)
    for layer in model.layers:
        residual = hidden + residual
        h = _rms_norm(residual, layer.attn_norm, c.epsilon)
        q, k, v = layer.qkv(h).chunk(3, dim=-1)
        q, k = (_rotate(t, positions, model.cos_sin, c.heads) for t in (q, k))
        tokens = h.shape[0]
        qh, kh, vh = (t.reshape(tokens, c.heads, c.head_size).transpose(0, 1) for t in (q, k, v))
        attn = nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=True)
        residual = layer.o_proj(attn.transpose(0, 1).reshape(tokens, c.hidden)) + residual
        gate, up = layer.gate_up(_rms_norm(residual, layer.mlp_norm, c.epsilon)).chunk(2, dim=-1)
        hidden = layer.down(nn.functional.silu(gate) * up) * layer.residual_scale
    return model.lm_head(_rms_norm(hidden + residual, model.final_norm, c.epsilon))


def random_ids(tokens: int, config: TinyConfig) -> Tensor:
    return torch.randint(0, config.vocab_size, (tokens,))


def test_native_path_matches_plain_pytorch() -> None:
    model = TinyLM(seed=3).eval()
    with torch.no_grad():
        for tokens in (1, 7, 16):
            ids = random_ids(tokens, model.config)
            torch.testing.assert_close(model(ids), plain_forward(model, ids), **TOL)


def test_gradients_match_plain_pytorch() -> None:
    model = TinyLM(seed=4)
    ids = random_ids(9, model.config)
    target = torch.randn(9, model.config.vocab_size)
    (model(ids) * target).sum().backward()
    ir_grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    (plain_forward(model, ids) * target).sum().backward()
    assert set(ir_grads) == {name for name, _ in model.named_parameters()}
    for name, p in model.named_parameters():
        assert p.grad is not None
        torch.testing.assert_close(ir_grads[name], p.grad, atol=1e-4, rtol=1e-4, msg=name)


def test_stock_torch_compile_matches_eager() -> None:
    torch._dynamo.reset()
    model = TinyLM(seed=5).eval()
    compiled = torch.compile(model)
    with torch.no_grad():
        for tokens in (6, 11):
            ids = random_ids(tokens, model.config)
            torch.testing.assert_close(compiled(ids), model(ids), atol=1e-4, rtol=1e-4)
    torch._dynamo.reset()


def test_the_library_imports_ir_spec_alone() -> None:
    script = (
        "import sys, ir_downstream_example\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith('ir_')}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['ir_downstream_example', 'ir_spec']"
