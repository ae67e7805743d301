"""A transformers Llama of Llama 3.1 8B's shape (its 128K-position rope; random weights, bf16)
split over two GPUs by accelerate, as ``from_pretrained(device_map=...)`` splits it: eager
forward latency of the model as transformers runs it, and after ``convert_hf_model`` with the
rotary cache handing the layers the rows of the call's tokens (``gather rows``, what a model
spanning devices converts to) or the whole table (``whole table``, what it converted to
before): accelerate moves each layer's arguments to the layer's device, so the whole table is
copied to every layer on the second GPU at every call.

Each way runs a batch of one-token sequences (decode-sized rows, no KV cache) and one prompt;
times are ``triton.testing.do_bench`` medians in µs, in the order listed (the gathered way twice,
first and last, to show drift), and every way's logits are compared with the unconverted
model's. Run on a machine of two GPUs from ``benchmarks/gpu`` after ``source env.sh`` in the
repository root; ``--out DIR`` writes ``hf-device-map-<card>.json`` and ``.md``.
"""

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import accelerate
import torch
import transformers
from hf_llama_compile import measure  # benchmarks/gpu/

from ir_stack.bench.kernels import import_providers
from ir_stack.hf import convert_hf_model
from ir_stack.hf.modules import IRRotaryCache

logger = logging.getLogger("hf_device_map")

#: the vocabulary, cut from Llama 3.1 8B's to keep the logits small
VOCAB = 32000
#: Llama 3.1 8B's shape and rope, with that vocabulary
LLAMA_8B: dict[str, Any] = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": VOCAB,
    "max_position_embeddings": 131072,
    "rope_parameters": {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}
#: rows x tokens a call
SHAPES = {"decode 16x1": (16, 1), "prompt 1x1024": (1, 1024)}


def build(layers: int) -> Any:
    """The model on the first GPU (its rope's frequencies in float32, as ``from_pretrained``
    leaves them), then split: the first half of the layers on GPU 0, the rest and the head on
    GPU 1."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{**LLAMA_8B, "num_hidden_layers": layers})
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda:0"):
            model = transformers.LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(default)
    device_map = {
        "model.embed_tokens": 0,
        "model.rotary_emb": 0,
        **{f"model.layers.{i}": int(i >= layers // 2) for i in range(layers)},
        "model.norm": 1,
        "lm_head": 1,
    }
    return accelerate.dispatch_model(model, device_map)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="directory for JSON and markdown")
    parser.add_argument("--layers", type=int, default=LLAMA_8B["num_hidden_layers"])
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if torch.cuda.device_count() < 2:
        raise SystemExit("hf_device_map.py: needs two CUDA devices")
    import_providers()  # run from source, the packages have no entry points
    model = build(args.layers)
    gen = torch.Generator("cuda").manual_seed(1)
    inputs = {
        shape: torch.randint(0, VOCAB, size, device="cuda:0", generator=gen)
        for shape, size in SHAPES.items()
    }

    def forward(ids: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = model(ids, use_cache=False).logits
        return logits

    runs = []
    with torch.no_grad():
        runs.append(measure("hf eager", forward, inputs))
        conversion = convert_hf_model(model)
        assert not conversion.skipped, conversion.skipped
        cache = model.model.rotary_emb
        assert isinstance(cache, IRRotaryCache)
        assert cache.gather_rows
        table_bytes = cache.cache_for().numel() * cache.cache_for().element_size()
        for gather, name in [(True, "ir eager, gather rows"), (False, "ir eager, whole table")]:
            cache.gather_rows = gather
            runs.append(measure(name, forward, inputs))
        cache.gather_rows = True
        runs.append(measure("ir eager, gather rows (again)", forward, inputs))
    reference = runs[0]["logits"]
    for run in runs:
        logits = run.pop("logits")
        run["max_abs_diff_vs_hf_eager"] = {
            s: float((logits[s].float() - reference[s].float()).abs().max()) for s in SHAPES
        }
    card = torch.cuda.get_device_name().replace("NVIDIA ", "").split()[0]
    result = {
        "card": torch.cuda.get_device_name(),
        "devices": torch.cuda.device_count(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
        "layers": args.layers,
        "config": LLAMA_8B,
        "table_bytes": table_bytes,
        "runs": runs,
    }
    lines = [
        f"# transformers Llama of Llama 3.1 8B's shape, {args.layers} layers, bf16, split over "
        f"two {result['card']} GPUs",
        "",
        f"torch {torch.__version__}, transformers {transformers.__version__}, accelerate "
        f"{accelerate.__version__}; `benchmarks/gpu/hf_device_map.py --layers {args.layers}`; "
        f"eager, `triton.testing.do_bench` medians, µs. Layers 0-{args.layers // 2 - 1} on GPU "
        f"0, the rest and the head on GPU 1; the rotary table: {table_bytes / 2**20:.0f} MiB.",
        "",
        "| way | " + " | ".join(SHAPES) + " | max abs diff of logits vs hf eager |",
        "|---|" + "---|" * (len(SHAPES) + 1),
    ]
    for run in runs:
        diffs = ", ".join(f"{d:.3g}" for d in run["max_abs_diff_vs_hf_eager"].values())
        times = " | ".join(f"{run['us'][s]:.1f}" for s in SHAPES)
        lines.append(f"| {run['name']} | {times} | {diffs} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"hf-device-map-{card}.json").write_text(json.dumps(result, indent=2))
        (args.out / f"hf-device-map-{card}.md").write_text(text)


if __name__ == "__main__":
    main()
