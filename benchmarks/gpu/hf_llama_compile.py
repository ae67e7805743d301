"""A transformers Llama of Llama 3.2 1B's shape, or with ``--family gemma3`` a Gemma 3 of Gemma 3
1B's, ``--family phi3`` a Phi-3 of Phi-3 mini's, ``--family qwen3_moe`` a Qwen3 MoE of Qwen3
30B-A3B's (128 experts, 8 a token), ``--family gpt_oss`` a GPT-OSS of gpt-oss-20b's (32
experts, 4 a token, which stay; eager attention, for its sinks), ``--family llama4`` a Llama 4
of Llama 4 Scout's (16 experts, every layer routed; a NoPE layer in four), ``--family
gemma4`` a Gemma 4 of transformers' default text config (a full-attention layer in six, of
heads twice as wide; per-layer inputs), ``--family lfm2`` an LFM2 of LFM2 1.2B's (six
attention layers among ten short convolutions, which stay), ``--family glm4_moe_lite`` a
GLM-4.7 Flash (latent attention, which stays; 64 experts, 4 a token), ``--family lfm3`` an
LFM3 of LFM3 1.7B's (transformers 5.24: attention layers, their output gated a head, among
short convolutions), ``--family gemma3n`` a Gemma 3n of transformers' default text config
(E4B's: four AltUp streams, sparse-activation MLPs in the first ten layers, which stay, KV
sharing in the last layers), ``--family qwen2_5_vl`` Qwen2.5-VL's language model of Qwen2.5-VL
3B's shape, run on text prompts (random weights, bf16),
on the GPU: forward latency in six ways, and two more where Liger-Kernel patches the family, in
one process:

- ``hf eager``: the model as transformers runs it;
- ``hf torch.compile``: stock ``torch.compile`` of that model with Inductor's CUDA graphs (as
  ``mode="reduce-overhead"``), what a user would otherwise run;
- ``ir eager``: after ``convert_hf_model`` (the IR ops on the kernels selected for the GPU),
  and ``ir eager, plans off`` the same with the Triton kernels' launch plans turned off;
- ``ir compile``: ``ir_passes.compile`` of the converted model (Inductor's CUDA graphs too),
  default priorities: compiled, the simple ops run as Inductor's code;
- ``ir compile, kernels, no add fusion`` / ``ir compile, kernels``: the same with the op
  kernels ahead of Inductor's code, without and with the fusion of each residual add and the
  norm after it into ``fused_add_rms_norm``;
- ``liger eager`` / ``liger torch.compile``: a copy of the original model with Liger-Kernel's
  patches for its family (its Triton RMSNorm, gated MLP and rope; its loss kernels off, which
  inference does not run), eagerly and under the stock ``torch.compile`` above: what a
  transformers user would otherwise reach for to put faster kernels in the model. Left out,
  and said so, where ``liger_kernel`` is not installed or has no patch for the family.

Each way runs a batch of one-token sequences (decode-sized rows, no KV cache) and one prompt;
times are ``triton.testing.do_bench`` medians in µs, and every way's logits are compared with
``hf eager``'s. Run on the GPU machine from the repository root after ``source
benchmarks/gpu/env.sh``; ``--out DIR`` writes ``hf-<family>-compile-<card>.json`` and ``.md``
(``hf-<family>-eager-<card>.*`` with ``--eager-only``, which runs the eager ways only);
``--skip WAY`` leaves a way out (Liger's eager warm-up alone takes minutes on a MoE model).
"""

import argparse
import copy
import importlib.metadata
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
import triton.testing

import ir_dispatch
import ir_passes
from ir_kernels_triton import launch_plans
from ir_kernels_triton.plans import ALL_PLANS
from ir_stack.bench.kernels import import_providers
from ir_stack.hf import convert_hf_model

logger = logging.getLogger("hf_llama_compile")

#: Llama 3.2 1B's shape; vocabulary cut to keep the logits small beside the layers
LLAMA_1B = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
}
#: Gemma 3 1B's shape (five sliding-window layers to one global, ropes of base 10^4 and 10^6);
#: vocabulary cut as for Llama
GEMMA3_1B = {
    "hidden_size": 1152,
    "intermediate_size": 6912,
    "num_hidden_layers": 26,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "sliding_window": 512,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
    },
}
#: Phi-3 mini (4k)'s shape: one qkv and one gate-up projection; vocabulary cut as for Llama
PHI3_MINI = {
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "pad_token_id": 0,
    "eos_token_id": 1,
}
#: Qwen2.5-VL 3B's language model (its rope of three positions a token, computed at each call
#: by the converted model too); vocabulary cut as for Llama. The vision tower, which a text
#: prompt does not run, is one block
QWEN2_5_VL_3B = {
    "hidden_size": 2048,
    "intermediate_size": 11008,
    "num_hidden_layers": 36,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
    "tie_word_embeddings": True,
}
#: Qwen3 30B-A3B's shape: 128 routed experts of width 768, 8 a token (transformers' grouped
#: matrix products); vocabulary cut as for Llama
QWEN3_30B_A3B = {
    "hidden_size": 2048,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rope_theta": 1000000.0,
}
#: gpt-oss-20b's shape (sliding-window and full layers in turn, attention sinks; its yarn rope
#: and 128K positions the config's defaults); vocabulary cut as for Llama
GPT_OSS_20B = {
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_local_experts": 32,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "sliding_window": 128,
    "vocab_size": 32000,
}
#: Llama 4 Scout's text shape (its 10M-position llama3 rope replaced by a plain one over 8K
#: positions: the kernels' work is the same); vocabulary cut as for Llama
LLAMA4_SCOUT = {
    "hidden_size": 5120,
    "intermediate_size": 8192,
    "intermediate_size_mlp": 16384,
    "num_local_experts": 16,
    "num_experts_per_tok": 1,
    "num_hidden_layers": 48,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
}
#: transformers' default Gemma 4 text config (hidden 2304, 8 heads of 256, 512 in the
#: full-attention layers, per-layer inputs of 256), both vocabularies cut as for Llama
GEMMA4_DEFAULT = {"vocab_size": 32000, "vocab_size_per_layer_input": 32000}
#: LFM2 1.2B's shape: six attention layers among ten short-convolution ones (which stay), MLPs
#: of width 8192 (12288 adjusted by its config); vocabulary cut as for Llama
LFM2_1_2B = {
    "hidden_size": 2048,
    "intermediate_size": 12288,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "full_attn_idxs": [2, 5, 8, 10, 12, 14],
}
#: GLM-4.7 Flash's shape (transformers' default MoE Lite config: latent attention, which stays;
#: a dense first layer, then 64 routed experts of width 1536, 4 a token, and a shared one);
#: vocabulary cut as for Llama
GLM4_7_FLASH = {"vocab_size": 32000, "num_hidden_layers": 47, "max_position_embeddings": 8192}
#: LFM3 1.7B's shape (transformers' default LFM3 config: 11 attention layers, full and sliding
#: in turn, among 13 short convolutions); vocabulary cut as for Llama, its special
#: tokens moved inside it
LFM3_1_7B = {
    "vocab_size": 32000,
    "max_position_embeddings": 8192,
    "num_hidden_layers": 24,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
#: Gemma 3n E4B's shape (transformers' default Gemma 3n text config: 35 layers, the MLPs of the
#: first ten sparse, the last fifteen reusing earlier keys and values); both vocabularies cut
#: as for Llama
GEMMA3N_E4B = {
    "vocab_size": 32000,
    "vocab_size_per_layer_input": 32000,
    "max_position_embeddings": 8192,
    "num_hidden_layers": 35,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
#: family -> (config class, model class, shape, name in titles)
FAMILIES: dict[str, tuple[str, str, dict[str, Any], str]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", LLAMA_1B, "Llama, 1B shape"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", GEMMA3_1B, "Gemma 3, 1B shape"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", PHI3_MINI, "Phi-3 mini shape"),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        QWEN3_30B_A3B,
        "Qwen3 MoE, 30B-A3B shape",
    ),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", GPT_OSS_20B, "GPT-OSS, 20B shape"),
    "llama4": ("Llama4TextConfig", "Llama4ForCausalLM", LLAMA4_SCOUT, "Llama 4, Scout shape"),
    "gemma4": (
        "Gemma4TextConfig",
        "Gemma4ForCausalLM",
        GEMMA4_DEFAULT,
        "Gemma 4, default text config",
    ),
    "lfm2": ("Lfm2Config", "Lfm2ForCausalLM", LFM2_1_2B, "LFM2, 1.2B shape"),
    "glm4_moe_lite": (
        "Glm4MoeLiteConfig",
        "Glm4MoeLiteForCausalLM",
        GLM4_7_FLASH,
        "GLM-4.7 Flash shape",
    ),
    "lfm3": ("Lfm3Config", "Lfm3ForCausalLM", LFM3_1_7B, "LFM3, 1.7B shape"),
    "gemma3n": ("Gemma3nTextConfig", "Gemma3nForCausalLM", GEMMA3N_E4B, "Gemma 3n, E4B shape"),
    "qwen2_5_vl": (
        "Qwen2_5_VLConfig",
        "Qwen2_5_VLForConditionalGeneration",
        QWEN2_5_VL_3B,
        "Qwen2.5-VL, 3B shape, text prompts",
    ),
}
#: families whose routed experts stay as they are (GPT-OSS's clamp their gate)
EXPERTS_STAY = {"gpt_oss"}
#: families whose sparse-activation MLPs stay (Gemma 3n's first layers')
SPARSE_MLPS_STAY = {"gemma3n"}
#: families whose latent attention stays, with the model's rotary module
ATTENTION_STAYS = {"glm4_moe_lite"}
#: families whose model is a vision-language one (its text config apart, its language model
#: converted)
VISION_LANGUAGE = {"qwen2_5_vl"}
SHAPES = {"decode 16 x 1": (16, 1), "prompt 1 x 1024": (1, 1024)}
#: Inductor's CUDA graphs (what ``mode="reduce-overhead"`` turns on; ``ir_passes.compile``
#: passes its hooks as options, which torch.compile does not take beside a mode)
GRAPHS: dict[str, str | int | bool | Callable[..., Any]] = {"triton.cudagraphs": True}
#: the op kernels ahead of Inductor's code for the ops a converted model calls
KERNELS = {
    op: ["triton", "cuda", "native"]
    for op in (
        "rms_norm",
        "fused_add_rms_norm",
        "silu_and_mul",
        "gelu_and_mul",
        "rotary_embedding",
    )
}
#: (name, fuse, priority) of each compiled way of the converted model
COMPILED: list[tuple[str, bool, dict[str, list[str]]]] = [
    ("ir compile", True, {}),
    ("ir compile, kernels, no add fusion", False, KERNELS),
    ("ir compile, kernels", True, KERNELS),
]
#: the ways `--skip` may leave out (all but ``hf eager``, the reference of the logits)
SKIPPABLE = (
    "hf torch.compile",
    "ir eager, plans off",
    "ir eager",
    *(name for name, _, _ in COMPILED),
    "liger eager",
    "liger torch.compile",
)


def build(family: str, layers: int) -> Any:
    torch.manual_seed(0)
    config_name, model_name, shape, _ = FAMILIES[family]
    options: dict[str, Any] = {**shape, "num_hidden_layers": layers}
    if family == "gemma3":  # every sixth layer global
        options["layer_types"] = [
            "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)
        ]
    if family == "lfm2":  # the attention layers among the first `layers`
        options["full_attn_idxs"] = [i for i in shape["full_attn_idxs"] if i < layers]
    if family == "lfm3":  # the default config's first `layers` layer types
        lfm3: Any = transformers.Lfm3Config()  # transformers types these as optional
        options["layer_types"] = lfm3.layer_types[:layers]
    if family == "gemma3n":  # the default config's first `layers` layers, sharing in proportion
        default: Any = transformers.Gemma3nTextConfig()
        options["layer_types"] = default.layer_types[:layers]
        options["activation_sparsity_pattern"] = default.activation_sparsity_pattern[:layers]
        options["intermediate_size"] = default.intermediate_size[:layers]
        shared = default.num_kv_shared_layers * layers // default.num_hidden_layers
        options["num_kv_shared_layers"] = shared
    if family == "glm4_moe_lite":  # a dense first layer, as the config's default
        options["mlp_layer_types"] = ["dense"] + ["sparse"] * (layers - 1)
    if family == "gpt_oss":
        options["layer_types"] = [
            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)
        ]
    if family in VISION_LANGUAGE:
        vision = {"depth": 1, "out_hidden_size": shape["hidden_size"]}
        config = getattr(transformers, config_name)(text_config=options, vision_config=vision)
    else:
        config = getattr(transformers, config_name)(**options)
    # GPT-OSS's sinks need eager attention (transformers gives it no sdpa)
    config._attn_implementation = "eager" if family == "gpt_oss" else "sdpa"
    with torch.device("cuda"):
        model = getattr(transformers, model_name)(config).to(torch.bfloat16).eval()
    # not ones (Gemma 3's: not zeros, its norms scale by 1 + w), so that a norm applied
    # wrongly would show
    low, high = (-0.5, 0.5) if family == "gemma3" else (0.5, 1.5)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(low, high)
    return model


def liger_copy(model: Any) -> tuple[Any | None, str]:
    """A copy of `model` with Liger-Kernel's patches for its family, or None and why not.

    Liger patches some functions of the family's transformers module too (its rope), not only
    the copy: take the copy's ways after the ways of every other model.
    """
    try:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except ImportError as error:
        return None, f"liger_kernel is not installed ({error})"
    model_type = model.config.model_type
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        return None, f"Liger-Kernel has no patch for model type {model_type!r}"
    patched = copy.deepcopy(model)
    # inference computes logits: no loss kernels (the fused one would not return them)
    _apply_liger_kernel_to_instance(patched, cross_entropy=False, fused_linear_cross_entropy=False)
    return patched, f"liger-kernel {importlib.metadata.version('liger-kernel')}"


def forward_of(model: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    def forward(ids: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = model(ids, use_cache=False).logits
        return logits

    return forward


def measure(
    name: str, fn: Callable[[torch.Tensor], torch.Tensor], inputs: dict[str, torch.Tensor]
) -> dict[str, Any]:
    """Warm `fn` up on every shape (compiling, where it compiles), then time each shape."""
    start = time.perf_counter()
    logits = {shape: fn(ids).clone() for shape, ids in inputs.items()}
    for ids in inputs.values():  # reduce-overhead records its graphs on the later calls
        for _ in range(3):
            fn(ids)
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - start
    times = {
        shape: 1e3 * float(triton.testing.do_bench(lambda ids=ids: fn(ids), warmup=50, rep=300))
        for shape, ids in inputs.items()
    }
    logger.info("%s: warm-up %.0f s, %s", name, warm_s, times)
    return {"name": name, "warmup_s": warm_s, "us": times, "logits": logits}


def command_line(args: argparse.Namespace) -> str:
    """The options that shaped this run, as they would be typed (``--out`` aside)."""
    words = [f"--family {args.family}"]
    if args.layers:
        words.append(f"--layers {args.layers}")
    if args.eager_only:
        words.append("--eager-only")
    words += [f'--skip "{way}"' for way in args.skip]
    return " ".join(words)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="directory for JSON and markdown")
    parser.add_argument("--family", choices=sorted(FAMILIES), default="llama")
    parser.add_argument("--layers", type=int, default=None, help="default: the model's own")
    parser.add_argument("--eager-only", action="store_true", help="only the eager ways")
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=SKIPPABLE,
        metavar="WAY",
        help="leave out this way (repeatable; `hf eager`, the reference, always runs): "
        + ", ".join(SKIPPABLE),
    )
    args = parser.parse_args()
    skip = set(args.skip)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import_providers()  # run from source, the packages have no entry points
    _, _, config, title = FAMILIES[args.family]
    layers = args.layers or config["num_hidden_layers"]
    model = build(args.family, layers)
    gen = torch.Generator("cuda").manual_seed(1)
    inputs = {
        shape: torch.randint(0, config["vocab_size"], size, device="cuda", generator=gen)
        for shape, size in SHAPES.items()
    }
    runs = []
    # no compiled graph from an earlier run's cache: the passes' reports below are this run's
    with (
        torch.no_grad(),
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        runs.append(measure("hf eager", forward_of(model), inputs))
        if not args.eager_only and "hf torch.compile" not in skip:
            stock = torch.compile(forward_of(model), options=GRAPHS, dynamic=False)
            runs.append(measure("hf torch.compile", stock, inputs))
            torch._dynamo.reset()
        liger_ways = {"liger eager"} if args.eager_only else {"liger eager", "liger torch.compile"}
        if liger_ways <= skip:  # no copy, and no patch of the family's module
            liger, liger_note = None, "left out (`--skip`)"
        else:
            liger, liger_note = liger_copy(model)  # before the conversion changes the model
        logger.info("Liger ways: %s", liger_note)
        # a vision-language model converts through its language model
        text_model = model.model.language_model if args.family in VISION_LANGUAGE else model
        conversion = convert_hf_model(text_model)
        staying = conversion.skipped
        if args.family in EXPERTS_STAY:  # only its experts may stay
            staying = {p: why for p, why in staying.items() if not p.endswith(".experts")}
        if args.family in SPARSE_MLPS_STAY:  # only its sparse-activation MLPs may stay
            staying = {p: why for p, why in staying.items() if not p.endswith(".mlp")}
        if args.family in ATTENTION_STAYS:  # only its rotary module may stay
            staying = {p: why for p, why in staying.items() if not p.endswith("rotary_emb")}
        assert not staying, conversion.skipped
        if "ir eager, plans off" not in skip:
            with launch_plans(False):
                runs.append(measure("ir eager, plans off", forward_of(model), inputs))
        if "ir eager" not in skip:
            runs.append(measure("ir eager", forward_of(model), inputs))
        # the Triton launches the converted model made eagerly, by launcher
        planned = {name: len(plans) for name, plans in ALL_PLANS.items() if len(plans)}
        reports = {}
        for name, fuse, priority in [] if args.eager_only else COMPILED:
            if name in skip:
                continue
            torch._dynamo.reset()
            with ir_dispatch.priority(**priority):
                compiled = ir_passes.compile(
                    forward_of(model),
                    config=ir_passes.PassConfig(fuse=fuse),
                    options=GRAPHS,
                    dynamic=False,
                )
                runs.append(measure(name, compiled, inputs))
            report = ir_passes.last_report()
            reports[name] = {
                "fusions": dict(report.fusions) if report else {},
                "selected": {op: sorted(set(p.values())) for op, p in report.selected_impls.items()}
                if report
                else {},
            }
        if liger is not None:
            if "liger eager" not in skip:
                runs.append(measure("liger eager", forward_of(liger), inputs))
            if not args.eager_only and "liger torch.compile" not in skip:
                torch._dynamo.reset()
                compiled = torch.compile(forward_of(liger), options=GRAPHS, dynamic=False)
                try:  # a third party's kernels under Dynamo: a failure is a result too
                    runs.append(measure("liger torch.compile", compiled, inputs))
                except Exception as error:
                    logger.exception("liger torch.compile failed")
                    liger_note += f"; its torch.compile failed: {type(error).__name__}: {error}"
    reference = runs[0]["logits"]
    for run in runs:
        logits = run.pop("logits")
        run["max_abs_diff_vs_hf_eager"] = {
            s: float((logits[s].float() - reference[s].float()).abs().max()) for s in SHAPES
        }
    card = torch.cuda.get_device_name().replace("NVIDIA ", "").split()[0]
    stem = f"hf-{args.family}-{'eager' if args.eager_only else 'compile'}"
    result = {
        "card": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "family": args.family,
        "layers": layers,
        "config": config,
        "runs": runs,
        "passes": reports,
        "liger": liger_note,
        "skipped_ways": sorted(skip),
        "eager_launch_plans": planned,
        "converted": {
            part: len(getattr(conversion, part))
            for part in ("norms", "mlps", "experts", "attentions")
        },
    }
    lines = [
        f"# transformers {title}, {layers} layers, bf16, on an {result['card']}",
        "",
        f"torch {torch.__version__}, transformers {transformers.__version__}; "
        f"`benchmarks/gpu/hf_llama_compile.py {command_line(args)}`; "
        "`triton.testing.do_bench` medians, µs.",
        "",
        "| way | " + " | ".join(SHAPES) + " | max abs diff of logits vs hf eager | warm-up s |",
        "|---|" + "---|" * (len(SHAPES) + 2),
    ]
    for run in runs:
        diffs = ", ".join(f"{d:.3g}" for d in run["max_abs_diff_vs_hf_eager"].values())
        times = " | ".join(f"{run['us'][s]:.1f}" for s in SHAPES)
        lines.append(f"| {run['name']} | {times} | {diffs} | {run['warmup_s']:.0f} |")
    lines.append("")
    lines.append(f"- converted: {result['converted']}")
    lines.append(f"- Liger ways: {liger_note}")
    if skip:
        lines.append(f"- left out (`--skip`): {', '.join(sorted(skip))}")
    lines.append(f"- ir eager: Triton launch plans by launcher {planned}")
    for name, summary in reports.items():
        lines.append(f"- {name}: fusions {summary['fusions']}, kernels {summary['selected']}")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{stem}-{card}.json").write_text(json.dumps(result, indent=2))
        (args.out / f"{stem}-{card}.md").write_text(text)


if __name__ == "__main__":
    main()
