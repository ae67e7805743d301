"""The converted transformers models' workloads of the e2e and profile suites
(`ir_stack.bench.hf_steps`), on the CPU with tiny models: repeatable steps over a static cache
holding random positions, and every mode's logits those of the original model."""

from collections.abc import Callable
from typing import Any

import pytest
import torch

from ir_stack.bench import hf_steps
from ir_stack.bench.e2e import Workload

transformers = pytest.importorskip("transformers")

TinyTransformers = Callable[[str], Any]  # the conftest fixture
Tiny = Callable[..., tuple[Any, hf_steps.HFSetup]]
WORKLOADS = [
    Workload("decode b=1", 1, 1),
    Workload("decode b=2", 2, 1),
    Workload("prefill 8", 1, 8),
]
CONTEXT = 12


@pytest.fixture
def tiny(tiny_transformers: TinyTransformers) -> Tiny:
    """``(family, workloads)`` to the tiny model and its setup for `workloads`."""
    from ir_stack.bench.hf_families import convert

    def prepare(family: str, workloads: list[Workload] = WORKLOADS) -> tuple[Any, hf_steps.HFSetup]:
        model = tiny_transformers(family)
        setup = hf_steps.prepare(family, model, lambda m: convert(family, m), workloads, CONTEXT)
        return model, setup

    return prepare


def test_a_decode_step_repeats_and_reads_the_random_positions_of_its_cache(tiny: Tiny) -> None:
    _, setup = tiny("llama")
    step = hf_steps.make_mode(hf_steps.REFERENCE, setup)
    decode = WORKLOADS[0]
    with torch.no_grad():
        first = step(decode)
        assert first is not None
        first = first.clone()
        again = step(decode)
        cache = setup.caches[decode.name]
        assert cache.layers[0].keys.shape[-2] == CONTEXT + 1
        cache.layers[0].keys[:, :, : CONTEXT // 2].mul_(-1)  # other keys: other logits
        changed = step(decode)
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    assert changed is not None
    assert not torch.allclose(changed, first)


def test_the_original_and_the_converted_copy_stay_apart(tiny: Tiny) -> None:
    model, setup = tiny("qwen3")
    assert setup.converted is not model
    assert setup.conversion == {"norms": 9, "mlps": 2, "experts": 0, "attentions": 2}
    packages = {type(m).__module__.split(".")[0] for m in model.modules()}
    assert "ir_stack" not in packages, "the original keeps transformers' modules"
    assert "ir_stack" in {type(m).__module__.split(".")[0] for m in setup.converted.modules()}


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_every_mode_gives_the_original_models_logits(family: str, tiny: Tiny) -> None:
    """Stock torch.compile of the original and the ir_stack backend on the converted copy, on
    batched decode and a prefill; the full CUDA graph is reported as not run on the CPU."""
    workloads = WORKLOADS[1:]
    _, setup = tiny(family, workloads)
    rows, missing = hf_steps.run_modes(setup, hf_steps.MODES, iters=1)
    assert missing == {"full CUDA graph": "no CUDA graphs on the CPU"}
    assert {(r["mode"], r["workload"]) for r in rows} == {
        (mode, w.name) for mode in hf_steps.MODES[:3] for w in workloads
    }
    assert all(r["model"] == family and r["ms"] > 0 for r in rows)
    assert max(r["max_abs_error"] for r in rows) < 1e-4, rows


def test_the_models_are_named_by_their_checkpoints_shape() -> None:
    assert hf_steps.model_name("qwen3") == "transformers qwen3, Qwen3 1.7B shape"
    assert hf_steps.model_name("llama", 4) == "transformers llama, Llama 3.2 1B shape, 4 layers"


class _OlderRelease(torch.nn.Module):
    """A model of a transformers release that names the cache ``past_key_values`` and takes
    the positions it writes as ``cache_position`` (5.1x)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        past_key_values: Any = None,
        cache_position: torch.Tensor | None = None,
        use_cache: bool = False,
    ) -> Any:
        self.calls.append({"cache": past_key_values, "where": cache_position})
        return type("Output", (), {"logits": input_ids.float()})()


def test_an_older_release_gets_the_cache_and_the_positions_it_writes() -> None:
    model = _OlderRelease()
    forward = hf_steps.forward_of(model)
    cache = object()
    ids = torch.zeros(2, 3, dtype=torch.long)
    forward(ids, ids, cache, 12)
    (call,) = model.calls
    assert call["cache"] is cache
    assert call["where"].tolist() == [12, 13, 14]
