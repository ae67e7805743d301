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
``--batch``; after warm-up generations of both lengths timed (compiling and recording graphs),
the decoding time a token is ``(t(new + 1 tokens) - t(1 token)) / new`` and the prompt's time
``t(1 token)``, medians of ``--rounds`` rounds in which the ways take turns (the original and
two converted copies of it, so that each compiled way keeps its graphs). The first token's
logits are compared with ``hf eager``'s, and the tokens with the same model's eager way's. Run
on the GPU machine from ``benchmarks/gpu`` after ``source env.sh`` in the repository root;
``--out DIR`` writes ``hf-<family>-generate-b<batch>-<card>.json`` and ``.md``.
"""

import argparse
import copy
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
from ir_stack.hf import convert_hf_model

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
    logger.info("%s: warm in %.0f s", way["name"], warm_s)
    return {
        "name": way["name"],
        "warmup_s": warm_s,
        "tokens": out.sequences[:, ids.shape[1] : ids.shape[1] + new],
        "prompt_logits": out.logits[0].float(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="directory for JSON and markdown")
    parser.add_argument("--family", choices=sorted(FAMILIES), default="llama")
    parser.add_argument("--layers", type=int, default=None, help="default: the model's own")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import_providers()  # run from source, the packages have no entry points
    _, _, config, title = FAMILIES[args.family]
    layers = args.layers or config["num_hidden_layers"]
    original = build(args.family, layers)
    models = {"hf": original, "ir": copy.deepcopy(original), "ir passes": copy.deepcopy(original)}
    for name in ("ir", "ir passes"):
        report = convert_hf_model(models[name])
        assert not report.skipped, report.skipped
    gen = torch.Generator("cuda").manual_seed(1)
    ids = torch.randint(
        0, config["vocab_size"], (args.batch, args.prompt), device="cuda", generator=gen
    )
    prompt_s: dict[str, list[float]] = {way["name"]: [] for way in WAYS}
    whole_s: dict[str, list[float]] = {way["name"]: [] for way in WAYS}
    with torch.no_grad(), torch._inductor.config.patch(fx_graph_cache=False):
        runs = []
        for way in WAYS:
            with ir_dispatch.priority(**(KERNELS if way["passes"] else {})):
                runs.append(warm_up(models[way["model"]], ids, args.new, way))
        # the ways take turns, so that a drift of the host's speed reaches them alike
        for _ in range(args.rounds):
            for way in WAYS:
                with ir_dispatch.priority(**(KERNELS if way["passes"] else {})):
                    model = models[way["model"]]
                    prompt_s[way["name"]].append(timed(model, ids, 1, way))
                    whole_s[way["name"]].append(timed(model, ids, args.new + 1, way))
    for run in runs:
        name = run["name"]
        a_token = [(w - p) / args.new for w, p in zip(whole_s[name], prompt_s[name], strict=True)]
        run["us_a_token"] = 1e6 * statistics.median(a_token)
        run["us_a_token_range"] = [1e6 * min(a_token), 1e6 * max(a_token)]
        run["prompt_ms"] = 1e3 * statistics.median(prompt_s[name])
    ways = list(zip(WAYS, runs, strict=True))
    eager = {way["model"]: run for way, run in ways if not way["static"]}
    reference_logits = runs[0]["prompt_logits"]
    for way, run in ways:
        own_eager = eager[way["model"].split()[0]]["tokens"]
        same = (run["tokens"] == own_eager).int().cumprod(-1).sum(-1)
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
        "rounds": args.rounds,
        "runs": runs,
    }
    lines = [
        f"# transformers generate, {title}, {layers} layers, bf16, on an {result['card']}",
        "",
        f"torch {torch.__version__}, transformers {transformers.__version__}; "
        f"`benchmarks/gpu/hf_generate.py --family {args.family} --batch {args.batch}`: batch "
        f"{args.batch}, a {args.prompt}-token prompt, {args.new} greedy tokens; medians of "
        f"{args.rounds} rounds, the ways taking turns.",
        "",
        "| way | µs a token | its range | prompt ms | first token's logits vs hf eager | "
        "leading tokens as its eager way's | warm-up s |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        same = sorted(set(run["leading_tokens_as_eager"]))
        agree = f"all {args.new}" if same == [args.new] else f"{min(same)}-{max(same)}"
        low, high = run["us_a_token_range"]
        lines.append(
            f"| {run['name']} | {run['us_a_token']:.1f} | {low:.0f}-{high:.0f} | "
            f"{run['prompt_ms']:.2f} | {run['prompt_logits_diff_vs_hf_eager']:.2%} | {agree} | "
            f"{run['warmup_s']:.0f} |"
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
        stem = f"hf-{args.family}-generate-b{args.batch}-{card}"
        (args.out / f"{stem}.json").write_text(json.dumps(result, indent=2))
        (args.out / f"{stem}.md").write_text(text)


if __name__ == "__main__":
    main()
