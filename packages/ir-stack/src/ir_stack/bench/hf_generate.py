"""The ``hf`` suite's generate ways: transformers' ``generate`` with a static KV cache, its
decoding steps compiled with CUDA graphs (what transformers does on a GPU by itself for a
static cache), in one process:

- ``hf eager``, ``ir eager``: a dynamic cache, nothing compiled, before and after
  ``convert_hf_model``;
- ``hf static, compiled``: the original model, the decoding forward compiled
  ``fullgraph=True`` with ``mode="reduce-overhead"`` (transformers' own ``CompileConfig``);
- ``ir static, compiled``: the same after ``convert_hf_model`` (default priorities);
- ``ir static, compiled, passes + kernels``: the same with the IR passes installed in Inductor
  (each residual add fused with the norm after it) and the op kernels ahead of Inductor's code,
  Inductor's CUDA graphs on.

Each way generates `new` greedy tokens after a prompt of `prompt` tokens; after warm-up
generations of both lengths timed (compiling and recording graphs), the decoding time a token
is ``(t(new + 1 tokens) - t(1 token)) / new`` and the prompt's time ``t(1 token)``, medians of
`rounds` rounds in which the ways take turns (the original and two converted copies of it, so
that each compiled way keeps its graphs). The first token's logits are compared with ``hf
eager``'s, and the tokens with the same model's eager way's.
"""

from __future__ import annotations

import copy
import statistics
import time
from typing import Any

import torch

import ir_dispatch
import ir_passes

from .hf import GRAPHS

#: each way, and the model it runs: one a compiled way, as transformers keeps the last
#: compiled forward on the model
WAYS: list[dict[str, Any]] = [
    {"name": "hf eager", "model": "hf", "static": False, "passes": False},
    {"name": "hf static, compiled", "model": "hf", "static": True, "passes": False},
    {"name": "ir eager", "model": "ir", "static": False, "passes": False},
    {"name": "ir static, compiled", "model": "ir", "static": True, "passes": False},
    {
        "name": "ir static, compiled, passes + kernels",
        "model": "ir passes",
        "static": True,
        "passes": True,
    },
]


def compile_config(passes: bool) -> Any:
    """transformers' compile configuration: its default mode, or Inductor's CUDA graphs with
    the IR passes (torch.compile takes no options beside a mode)."""
    import transformers

    if not passes:
        return transformers.CompileConfig(fullgraph=True, dynamic=False, mode="reduce-overhead")
    options = {**GRAPHS, **ir_passes.inductor_options()}
    return transformers.CompileConfig(fullgraph=True, dynamic=False, mode=None, options=options)


def generate(model: Any, ids: torch.Tensor, new: int, way: dict[str, Any], **options: Any) -> Any:
    """`model.generate` as `way` says; `way["compile_config"]` is one object for all its calls
    (transformers compiles again for a configuration unequal to the last)."""
    kwargs: dict[str, Any] = {"max_new_tokens": new, "min_new_tokens": new, "do_sample": False}
    if way["static"]:
        kwargs["cache_implementation"] = "static"
        kwargs["compile_config"] = way["compile_config"]
    else:
        kwargs["disable_compile"] = True
    return model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs, **options)


def timed(model: Any, ids: torch.Tensor, new: int, way: dict[str, Any]) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    generate(model, ids, new, way)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def warm_up(model: Any, ids: torch.Tensor, new: int, way: dict[str, Any]) -> dict[str, Any]:
    """Compile and record `way`'s graphs for both lengths timed (a static cache is as long as
    the prompt and the new tokens, so each length is a graph of its own); the first token's
    logits and the tokens generated."""
    way["compile_config"] = compile_config(way["passes"]) if way["static"] else None
    start = time.perf_counter()
    out = generate(model, ids, new + 1, way, return_dict_in_generate=True, output_logits=True)
    for length in (new + 1, 1, 1):
        generate(model, ids, length, way)
    warm_s = time.perf_counter() - start
    print(f"generate, {way['name']}: warm in {warm_s:.0f} s", flush=True)
    return {
        "warmup_s": warm_s,
        "tokens": out.sequences[:, ids.shape[1] : ids.shape[1] + new],
        "prompt_logits": out.logits[0].float(),
    }


def generate_rows(
    family: str,
    layers: int,
    batch: int,
    prompt: int,
    new: int,
    rounds: int,
    kernels: dict[str, list[str]],
) -> list[dict[str, Any]]:
    """Each way's row at one batch size: µs a token, its range, the prompt's time, the first
    token's logits against hf eager's, and how many leading tokens match its eager way's."""
    from .hf_families import FAMILIES, build, convert

    original = build(family, layers)
    models = {"hf": original, "ir": copy.deepcopy(original), "ir passes": copy.deepcopy(original)}
    for name in ("ir", "ir passes"):
        convert(family, models[name])
    gen = torch.Generator("cuda").manual_seed(1)
    vocab = FAMILIES[family][2]["vocab_size"]
    ids = torch.randint(0, vocab, (batch, prompt), device="cuda", generator=gen)
    prompt_s: dict[str, list[float]] = {way["name"]: [] for way in WAYS}
    whole_s: dict[str, list[float]] = {way["name"]: [] for way in WAYS}
    warm: dict[str, dict[str, Any]] = {}
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False):
        for way in WAYS:
            with ir_dispatch.priority(**(kernels if way["passes"] else {})):
                warm[way["name"]] = warm_up(models[way["model"]], ids, new, way)
        # the ways take turns, so that a drift of the host's speed reaches them alike
        for _ in range(rounds):
            for way in WAYS:
                with ir_dispatch.priority(**(kernels if way["passes"] else {})):
                    model = models[way["model"]]
                    prompt_s[way["name"]].append(timed(model, ids, 1, way))
                    whole_s[way["name"]].append(timed(model, ids, new + 1, way))
    reference = warm["hf eager"]["prompt_logits"]
    eager_tokens = {way["model"]: warm[way["name"]]["tokens"] for way in WAYS if not way["static"]}
    rows = []
    for way in WAYS:
        name = way["name"]
        a_token = [(w - p) / new for w, p in zip(whole_s[name], prompt_s[name], strict=True)]
        own_eager = eager_tokens[way["model"].split()[0]]
        same = (warm[name]["tokens"] == own_eager).int().cumprod(-1).sum(-1).tolist()
        diff = (warm[name]["prompt_logits"] - reference).abs().max() / reference.abs().max()
        rows.append(
            {
                "family": family,
                "way": name,
                "workload": f"generate b={batch}",
                "us": 1e6 * statistics.median(a_token),
                "us_low": 1e6 * min(a_token),
                "us_high": 1e6 * max(a_token),
                "prompt_ms": 1e3 * statistics.median(prompt_s[name]),
                "first_logits_rel_diff": float(diff),
                "leading_tokens_as_eager": f"{min(same)}-{max(same)} of {new}",
                "warmup_s": warm[name]["warmup_s"],
                "layers": layers,
            }
        )
    return rows
