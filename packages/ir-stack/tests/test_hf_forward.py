"""`ir_stack.hf.forward.with_forward`: one module's forward changed through a subclass of its
own, which pickles, deep-copies and compiles without guards on the forward itself."""

import copy
import functools
import io

import pytest
import torch
import transformers
from torch import Tensor, nn

from ir_stack.hf import convert_hf_model
from ir_stack.hf.forward import forward_subclass, with_forward


class Scale(nn.Module):
    """A module whose forward the tests replace."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: Tensor) -> Tensor:
        return x * self.factor


def doubled(self: Scale, x: Tensor) -> Tensor:
    return x * self.factor * 2


def negated(self: Scale, x: Tensor) -> Tensor:
    return -x * self.factor


def test_only_the_module_takes_the_forward() -> None:
    changed, other = Scale(3.0), Scale(3.0)
    with_forward(changed, doubled)
    x = torch.randn(4)
    torch.testing.assert_close(changed(x), x * 6)
    torch.testing.assert_close(other(x), x * 3)
    assert type(other) is Scale
    assert isinstance(changed, Scale)
    assert type(changed).__name__ == "Scale"
    assert "forward" not in vars(changed)
    assert repr(changed) == repr(other)


def test_one_subclass_per_class_and_forward_and_a_second_change_starts_from_the_original() -> None:
    first, second = Scale(1.0), Scale(1.0)
    with_forward(first, doubled)
    with_forward(second, doubled)
    assert type(first) is type(second) is forward_subclass(Scale, doubled)
    with_forward(first, negated)
    assert type(first).__mro__[1] is Scale
    torch.testing.assert_close(first(torch.ones(2)), -torch.ones(2))


def test_an_instance_forward_is_replaced() -> None:
    module = Scale(1.0)
    module.forward = lambda x: x + 100  # type: ignore[method-assign]
    with_forward(module, doubled)
    torch.testing.assert_close(module(torch.ones(2)), 2 * torch.ones(2))


def _local() -> object:
    def forward(self: Scale, x: Tensor) -> Tensor:
        return x

    return forward


@pytest.mark.parametrize(
    "forward",
    [lambda self, x: x, _local(), functools.partial(doubled), Scale.forward, "forward"],
    ids=["lambda", "local", "partial", "method", "str"],
)
def test_rejects_what_pickle_cannot_find_by_name(forward: object) -> None:
    with pytest.raises(TypeError, match="argument 'forward'"):
        with_forward(Scale(1.0), forward)  # type: ignore[arg-type]


def test_pickles_and_deep_copies_with_its_forward() -> None:
    model = nn.Sequential(Scale(2.0), Scale(5.0))
    with_forward(model[0], doubled)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    for other in (loaded, copy.deepcopy(model)):
        assert type(other[0]) is type(model[0])
        assert type(other[1]) is Scale
        torch.testing.assert_close(other(torch.ones(3)), torch.full((3,), 20.0))


def test_a_compiled_converted_llama_guards_no_attention_forward() -> None:
    """Dynamo checks a converted attention layer's type, as for any module, and reads no
    ``forward`` of it (an instance attribute cost a dozen guards a layer at every call)."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    convert_hf_model(model)
    ids = torch.randint(0, 128, (1, 5))
    torch._dynamo.reset()

    def step(ids: Tensor) -> Tensor:
        return model(ids, use_cache=False).logits

    compiled = torch.compile(step, backend="eager", fullgraph=True)
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
        got = compiled(ids)
    torch.testing.assert_close(got, want)
    entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(step.__code__)
    guards = str(entries[0].guard_manager)
    assert "_modules['self_attn']" in guards
    assert "_modules['self_attn'].forward" not in guards
    assert "functools.partial" not in guards
