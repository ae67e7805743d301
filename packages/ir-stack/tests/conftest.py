"""Each test starts with Dynamo's caches empty: the tests compile the same model forward many
times, and Dynamo's per-code-object recompile limit counts across tests. `bench_record` builds
rows of the ``kernels`` suite for the report tests; `tiny_transformers` builds small randomly
initialised transformers models."""

from collections.abc import Callable
from typing import Any

import pytest
import torch

BenchRecord = Callable[..., dict[str, Any]]

#: The sizes of `tiny_transformers`' models: two layers, grouped-query attention, heads of 16.
TINY_TRANSFORMERS = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 128,
    "max_position_embeddings": 64,
}


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


@pytest.fixture
def bench_record() -> BenchRecord:
    """A builder of one row of the ``kernels`` suite (a provider at a shape, one run), as
    `ir_stack.bench.kernels` writes it: ``(op, provider, tokens, hidden, us, frac=0.5)``."""

    def record(
        op: str, provider: str, tokens: int, hidden: int, us: float, frac: float = 0.5
    ) -> dict[str, Any]:
        return {
            "op": op,
            "provider": provider,
            "tokens": tokens,
            "hidden": hidden,
            "us_graph": us,
            "us_plain": us + 1,
            "fraction_of_copy": frac,
            "gbps_graph": frac * 1000,
            "run": 0,
        }

    return record


@pytest.fixture
def tiny_transformers() -> Callable[[str], Any]:
    """A builder of a transformers causal LM of `TINY_TRANSFORMERS`' sizes by family name
    (``"llama"``, ``"qwen3"``), in eval mode, seeded, its norm weights drawn from [0.5, 1.5]
    so that a norm applied wrongly shows; skips where transformers is not installed."""
    transformers = pytest.importorskip("transformers")
    classes = {"llama": "Llama", "qwen3": "Qwen3"}

    def build(family: str) -> Any:
        prefix = classes[family]
        torch.manual_seed(0)
        config = getattr(transformers, f"{prefix}Config")(**TINY_TRANSFORMERS)
        model = getattr(transformers, f"{prefix}ForCausalLM")(config).eval()
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("norm.weight"):
                    param.uniform_(0.5, 1.5)
        return model

    return build
