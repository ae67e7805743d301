"""The reference model: decode consistent with prefill; eager native == dispatched ==
compiled (ir_stack.compile) on CPU."""

import torch

import ir_dispatch
import ir_stack
from ir_spec import ops
from ir_stack.models import TINY, LlamaModel


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
