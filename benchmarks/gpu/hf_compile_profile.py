"""Where a compiled transformers model's GPU time goes: the kernels of stock ``torch.compile`` and
of ``ir_passes.compile`` in each of ``hf_llama_compile.COMPILED``'s ways (default priorities;
the op kernels first, without and with the residual add fusion), by device time a forward,
from ``torch.profiler``. The model and the ways are
``hf_llama_compile.py``'s; each is compiled without CUDA graphs, so that the profiler sees every
kernel (graph replays hide them), and timed over five forwards after five warm ones.

Run on the GPU machine from the repository root after ``source benchmarks/gpu/env.sh``, with
``benchmarks/gpu`` on ``PYTHONPATH``: ``python benchmarks/gpu/hf_compile_profile.py --family
qwen3_moe --layers 8 --shape prompt --out DIR`` writes ``hf-<family>-<shape>-kernels-<card>.md``.
"""

import argparse
import logging
from collections.abc import Callable
from pathlib import Path

import hf_llama_compile as models
import torch
import transformers
from torch.profiler import ProfilerActivity, profile

import ir_dispatch
import ir_passes
from ir_stack.bench.kernels import import_providers
from ir_stack.hf import convert_hf_model

logger = logging.getLogger("hf_compile_profile")

#: forwards profiled, after as many warm ones
FORWARDS = 5
#: ``--shape`` -> (batch, tokens), as in ``hf_llama_compile.SHAPES``
SHAPES = {"decode": (16, 1), "prompt": (1, 1024)}


def kernel_times(
    fn: Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor
) -> list[tuple[str, float, float]]:
    """``(kernel, µs a forward, launches a forward)`` of every kernel `fn` runs, longest first."""
    for _ in range(FORWARDS):
        fn(ids)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(FORWARDS):
            fn(ids)
        torch.cuda.synchronize()
    rows = [
        (event.key, event.self_device_time_total / FORWARDS, event.count / FORWARDS)
        for event in prof.key_averages()
        if event.self_device_time_total > 0
    ]
    return sorted(rows, key=lambda row: -row[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=sorted(models.FAMILIES), default="llama")
    parser.add_argument("--layers", type=int, default=None, help="default: the model's own")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="prompt")
    parser.add_argument("--top", type=int, default=20, help="kernels listed a way")
    parser.add_argument("--out", type=Path, default=None, help="directory for the markdown")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import_providers()
    _, _, config, title = models.FAMILIES[args.family]
    layers = args.layers or config["num_hidden_layers"]
    model = models.build(args.family, layers)
    gen = torch.Generator("cuda").manual_seed(1)
    ids = torch.randint(0, config["vocab_size"], SHAPES[args.shape], device="cuda", generator=gen)
    ways: dict[str, list[tuple[str, float, float]]] = {}
    with torch.no_grad():
        stock = torch.compile(models.forward_of(model), dynamic=False)
        ways["hf torch.compile"] = kernel_times(stock, ids)
        convert_hf_model(model)
        for name, fuse, priority in models.COMPILED:
            torch._dynamo.reset()
            with ir_dispatch.priority(**priority):
                compiled = ir_passes.compile(
                    models.forward_of(model), config=ir_passes.PassConfig(fuse=fuse), dynamic=False
                )
                ways[name] = kernel_times(compiled, ids)
            logger.info("%s: profiled", name)
    card = torch.cuda.get_device_name()
    lines = [
        f"# Kernels of a compiled transformers {title}, {layers} layers, bf16, "
        f"{args.shape} {SHAPES[args.shape]}, on an {card}",
        "",
        f"torch {torch.__version__}, transformers {transformers.__version__}; "
        f"`benchmarks/gpu/hf_compile_profile.py --family {args.family} --layers {layers} "
        f"--shape {args.shape}`; `torch.profiler` device time a forward (µs), no CUDA graphs.",
    ]
    for name, rows in ways.items():
        total = sum(us for _, us, _ in rows)
        lines += ["", f"## {name}: {total:.0f} µs of kernels a forward", ""]
        lines += ["| µs | launches | kernel |", "|---|---|---|"]
        for kernel, us, launches in rows[: args.top]:
            lines.append(f"| {us:.1f} | {launches:g} | `{kernel[:100]}` |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = f"hf-{args.family}-{args.shape}-kernels-{card.replace('NVIDIA ', '').split()[0]}"
        (args.out / f"{stem}.md").write_text(text)


if __name__ == "__main__":
    main()
