"""Without a GPU: the cost of Dynamo's guards on a transformers Llama's compiled decoding forward,
the original beside the converted (`convert_hf_model`). Every attribute a compiled forward
reads becomes a guard that Dynamo checks again at each call, so the conversion's own reads are
host time at every decoding step of transformers' compiled ``generate``.

The forward is compiled as transformers' ``generate`` calls it with a static cache (its inputs
taken from a real decoding step), with the eager backend: guards do not depend on the
backend. The guard manager of the compiled entry is then timed on the same inputs, and its
entries counted, per layer and in all. Run from the repository root:

    python benchmarks/cpu/hf_guards.py [--layers 16] [--calls 2000] [--out DIR]

``--out`` writes ``hf-guards-cpu.md``.
"""

import argparse
import copy
import gc
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import transformers

from ir_stack.hf import convert_hf_model


def build(layers: int) -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        max_position_embeddings=512,
    )
    return transformers.LlamaForCausalLM(config).eval()


def compiled_step(model: Any) -> tuple[Any, dict[str, Any]]:
    """The guard manager of `model`'s forward compiled on a decoding step's inputs, and those
    inputs as its frame sees them."""
    ids = torch.randint(0, 1000, (4, 16))
    compile_config = transformers.CompileConfig(
        fullgraph=True, dynamic=False, backend="eager", mode="default"
    )
    compile_config._compile_all_devices = True  # transformers compiles on GPUs only otherwise

    def step(model: Any, inputs: dict[str, Any]) -> Any:
        return model(**inputs)

    compiled = torch.compile(step, fullgraph=True, backend="eager")
    seen: dict[str, Any] = {}

    def generate() -> None:
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=3,
            min_new_tokens=3,
            do_sample=False,
            cache_implementation="static",
            compile_config=compile_config,
        )

    with torch.no_grad():
        generate()  # makes transformers' compiled forward, which the next call replaces once
        own = model._compiled_call

        def first_step_here(*args: Any, **inputs: Any) -> Any:
            if "inputs" not in seen:
                seen["inputs"] = inputs
                return compiled(model, inputs)
            return own(*args, **inputs)

        model._compiled_call = first_step_here
        generate()
        model._compiled_call = own
    # the newest entry first: this model's (one compiled step's code serves every model)
    entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(step.__code__)
    return entries[0].guard_manager, {"model": model, "inputs": seen["inputs"]}


def guard_entries(guard_manager: Any, layer: int) -> tuple[int, int]:
    """Guard entries in all, and those on layer `layer`'s modules."""
    lines = [line for line in str(guard_manager).splitlines() if "+- " in line]
    marker = f"_modules['layers']._modules['{layer}']"
    return len(lines), sum(marker in line for line in lines)


def measure(models: dict[str, Any], calls: int, layer: int) -> dict[str, dict[str, float]]:
    """Each model's guard check, timed in turns (with the garbage collector off) so that a
    drift of the host's speed reaches them alike."""
    compiled = {name: compiled_step(model) for name, model in models.items()}
    times: dict[str, list[int]] = {name: [] for name in models}
    with torch.no_grad():
        for name, (guard_manager, frame) in compiled.items():
            if not guard_manager.check(frame):
                raise RuntimeError(f"{name}: the compiled entry's guards fail on its own inputs")
        gc.disable()
        try:
            for _ in range(calls):
                for name, (guard_manager, frame) in compiled.items():
                    start = time.perf_counter_ns()
                    guard_manager.check(frame)
                    times[name].append(time.perf_counter_ns() - start)
        finally:
            gc.enable()
    rows = {}
    for name, (guard_manager, _) in compiled.items():
        total, per_layer = guard_entries(guard_manager, layer)
        rows[name] = {
            "median_us": statistics.median(times[name]) / 1e3,
            "min_us": min(times[name]) / 1e3,
            "entries": total,
            "layer_entries": per_layer,
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=None, help="directory for the markdown")
    args = parser.parse_args()
    original = build(args.layers)
    converted = copy.deepcopy(original)
    convert_hf_model(converted)
    layer = args.layers // 2
    rows = measure({"original": original, "converted": converted}, args.calls, layer)
    lines = [
        f"# Dynamo's guards on a compiled transformers Llama, {args.layers} layers — CPU",
        "",
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{platform.processor() or platform.machine()}; `benchmarks/cpu/hf_guards.py --layers "
        f"{args.layers} --calls {args.calls}`: the guard manager of the decoding forward "
        "(static cache, as transformers' `generate` compiles it) checked on its inputs.",
        "",
        "| model | guard check µs (median) | min | guard entries | on one layer |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['median_us']:.1f} | {row['min_us']:.1f} | {row['entries']:.0f} | "
            f"{row['layer_entries']:.0f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "hf-guards-cpu.md").write_text(text)


if __name__ == "__main__":
    main()
