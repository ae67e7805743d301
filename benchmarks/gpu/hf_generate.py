"""transformers' ``generate`` with a static KV cache, its decoding steps compiled with CUDA graphs
(what transformers does on a GPU by itself for a static cache), on a model of
``hf_llama_compile.py``'s families (Llama of Llama 3.2 1B's shape by default; random weights,
bf16), in five ways, in one process:

- ``hf eager``, ``ir eager``: a dynamic cache, nothing compiled, before and after
  ``convert_hf_model``;
- ``hf static, compiled``: the original model, the decoding forward compiled
  ``fullgraph=True`` with ``mode="reduce-overhead"`` (transformers' own ``CompileConfig``);
- ``ir static, compiled``: the same after ``convert_hf_model`` (default priorities);
- ``ir static, compiled, passes + kernels``: the same with the IR passes installed in Inductor
  (each residual add fused with the norm after it) and the op kernels ahead of Inductor's code,
  Inductor's CUDA graphs on.

Each way generates ``--new`` greedy tokens after a prompt of ``--prompt`` tokens, batch
``--batch``; after two warm-up generations (compiling and recording graphs), the decoding time
a token is ``(t(new + 1 tokens) - t(1 token)) / new``, each the median of five runs, and the
prompt's time is ``t(1 token)``. The first token's logits are compared with ``hf eager``'s, and
the tokens with the same model's eager way's. Run on the GPU machine
from the repository root after ``source benchmarks/gpu/env.sh``; ``--out DIR`` writes
``hf-<family>-generate-<card>.json`` and ``.md``.
"""

import argparse
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import transformers
from hf_llama_compile import FAMILIES, GRAPHS, KERNELS, build  # benchmarks/gpu/

import ir_dispatch
import ir_passes
from ir_stack.bench.kernels import import_providers
from ir_stack.models.hf import convert_hf_model

logger = logging.getLogger("hf_generate")


def compile_config(passes: bool) -> Any:
    """transformers' compile configuration: its default mode, or Inductor's CUDA graphs with
    the IR passes (torch.compile takes no options beside a mode)."""
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


def measure(model: Any, ids: torch.Tensor, new: int, way: dict[str, Any]) -> dict[str, Any]:
    torch._dynamo.reset()
    if hasattr(model, "_compiled_call"):  # transformers keeps the last compiled forward
        del model._compiled_call
    way["compile_config"] = compile_config(way["passes"]) if way["static"] else None
    start = time.perf_counter()
    out = generate(model, ids, new, way, return_dict_in_generate=True, output_logits=True)
    generate(model, ids, new, way)
    warm_s = time.perf_counter() - start
    prompt_s = [timed(model, ids, 1, way) for _ in range(5)]
    whole_s = [timed(model, ids, new + 1, way) for _ in range(5)]
    prompt = statistics.median(prompt_s)
    per_token = (statistics.median(whole_s) - prompt) / new
    logger.info("%s: prompt %.2f ms, %.1f µs a token", way["name"], 1e3 * prompt, 1e6 * per_token)
    return {
        "name": way["name"],
        "warmup_s": warm_s,
        "prompt_ms": 1e3 * prompt,
        "us_a_token": 1e6 * per_token,
        "tokens": out.sequences,
        "prompt_logits": out.logits[0].float(),
    }


WAYS = [
    {"name": "hf eager", "static": False, "passes": False, "converted": False},
    {"name": "hf static, compiled", "static": True, "passes": False, "converted": False},
    {"name": "ir eager", "static": False, "passes": False, "converted": True},
    {"name": "ir static, compiled", "static": True, "passes": False, "converted": True},
    {
        "name": "ir static, compiled, passes + kernels",
        "static": True,
        "passes": True,
        "converted": True,
    },
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="directory for JSON and markdown")
    parser.add_argument("--family", choices=sorted(FAMILIES), default="llama")
    parser.add_argument("--layers", type=int, default=None, help="default: the model's own")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=128)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import_providers()  # run from source, the packages have no entry points
    _, _, config, title = FAMILIES[args.family]
    layers = args.layers or config["num_hidden_layers"]
    model = build(args.family, layers)
    gen = torch.Generator("cuda").manual_seed(1)
    ids = torch.randint(
        0, config["vocab_size"], (args.batch, args.prompt), device="cuda", generator=gen
    )
    runs = []
    converted = False
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False):
        for way in WAYS:  # the original's ways first
            if way["converted"] and not converted:
                report = convert_hf_model(model)
                assert not report.skipped, report.skipped
                converted = True
            priority = KERNELS if way["passes"] else {}
            with ir_dispatch.priority(**priority):
                runs.append(measure(model, ids, args.new, way))
    ways = list(zip(WAYS, runs, strict=True))
    eager = {way["converted"]: run for way, run in ways if not way["static"]}
    reference_logits = runs[0]["prompt_logits"]
    for way, run in ways:
        own_eager = eager[way["converted"]]["tokens"][:, args.prompt :]
        same = (run["tokens"][:, args.prompt :] == own_eager).int().cumprod(-1).sum(-1)
        run["leading_tokens_as_eager"] = same.tolist()
        diff = (run["prompt_logits"] - reference_logits).abs().max()
        run["prompt_logits_diff_vs_hf_eager"] = float(diff / reference_logits.abs().max())
    for run in runs:
        del run["tokens"], run["prompt_logits"]
    card = torch.cuda.get_device_name().replace("NVIDIA ", "").split()[0]
    result = {
        "card": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "family": args.family,
        "layers": layers,
        "batch": args.batch,
        "prompt": args.prompt,
        "new": args.new,
        "runs": runs,
    }
    lines = [
        f"# transformers generate, {title}, {layers} layers, bf16, on an {result['card']}",
        "",
        f"torch {torch.__version__}, transformers {transformers.__version__}; "
        f"`benchmarks/gpu/hf_generate.py --family {args.family}`: batch {args.batch}, a "
        f"{args.prompt}-token prompt, {args.new} greedy tokens; medians of five runs.",
        "",
        "| way | µs a token | prompt ms | first token's logits vs hf eager | leading tokens as "
        "its eager way's | warm-up s |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        same = sorted(set(run["leading_tokens_as_eager"]))
        agree = f"all {args.new}" if same == [args.new] else f"{min(same)}-{max(same)}"
        lines.append(
            f"| {run['name']} | {run['us_a_token']:.1f} | {run['prompt_ms']:.2f} | "
            f"{run['prompt_logits_diff_vs_hf_eager']:.2%} | {agree} | {run['warmup_s']:.0f} |"
        )
    lines += [
        "",
        "The first token's logits: the largest difference from hf eager's over their largest "
        "magnitude. Leading tokens: for each sequence, the generated tokens that agree with "
        "the same model's eager way before the first that differs (random weights give "
        "near-uniform logits, where bf16 sums in another order flip near ties).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = f"hf-{args.family}-generate-{card}"
        (args.out / f"{stem}.json").write_text(json.dumps(result, indent=2))
        (args.out / f"{stem}.md").write_text(text)


if __name__ == "__main__":
    main()
