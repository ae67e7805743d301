"""Suite ``startup``: seconds from compiling the reference model to the first outputs of every
workload (the ``e2e`` suite's decode batches and prefill), with empty caches and with warm ones.

Ways: ``ir_stack.compile`` (piecewise; the decode steps captured as CUDA graphs on a GPU) and
stock ``torch.compile`` of the same model written in plain PyTorch. Each way runs twice, each
time in a fresh process: cold, with empty compile caches (ir-piecewise's, Inductor's and
Triton's), then warm, with the caches the cold run filled (ir-piecewise loads its saved traces
and pieces, and Dynamo does not run). A row holds the seconds and the compile counters that
say where the time went.

    ir-stack bench --only startup [--model tiny|1b] [--quick]
    python -m ir_stack.bench.startup --out DIR [--ways ir_stack.compile] [--batches 1,8]

Writes ``DIR/startup-<device>.json``, ``.md`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ir_piecewise import counters

from ..compiler import compile as ir_stack_compile
from . import common, results
from .results import Result

WAYS = ("ir_stack.compile", "torch.compile")
KEY = ["model", "way", "cache"]
METRICS = [results.Metric("seconds", "s")]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from .e2e import add_model_args, resolve_sizes

    parser = common.parser("startup", (__doc__ or "").split("\n")[0])
    add_model_args(parser)
    parser.add_argument("--ways", default=",".join(WAYS), help="default: %(default)s")
    parser.add_argument("--worker", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.iters = 1  # (the sizes' check reads it; start-up times one call a workload)
    unknown = set(args.ways.split(",")) - set(WAYS)
    if unknown:
        parser.error(f"--ways: unknown {sorted(unknown)}; expected some of {list(WAYS)}")
    resolve_sizes(parser, args)
    return args


def first_outputs(args: argparse.Namespace) -> dict[str, Any]:
    """In this process: compile the model `args.worker` says, run every workload once; the
    seconds it took and the counters of the compilation."""
    from ir_piecewise import CUDAGraphMode

    from .e2e import IR_STACK_GRAPHS, build_model, build_setup, piecewise_config

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        common.load_providers()
    setup = build_setup(args, device)
    model = build_model(setup, plain_torch=args.worker == "torch.compile")
    graphs = IR_STACK_GRAPHS["ir_stack"] if device.type == "cuda" else CUDAGraphMode.NONE
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad():
        if args.worker == "ir_stack.compile":
            forward: Any = ir_stack_compile(model, piecewise_config(graphs, args.cache))
        else:
            forward = torch.compile(model)
        for w in setup.workloads:
            ids, positions = setup.inputs[w.name]
            forward(ids, positions, setup.cache_for(w))
        if device.type == "cuda":
            torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    inductor = torch._dynamo.utils.counters["inductor"]
    if args.worker == "ir_stack.compile":
        found = counters.as_dict()
        return {
            "seconds": seconds,
            "compilations": found["num_backend_compilations"],
            "cache_hits": found["num_cache_hits"],
            "traces_loaded": found.get("num_traces_loaded", 0),
        }
    return {
        "seconds": seconds,
        "compilations": int(inductor["fxgraph_cache_miss"]),
        "cache_hits": int(inductor["fxgraph_cache_hit"]),
        "traces_loaded": None,
    }


def model_args(args: argparse.Namespace) -> list[str]:
    """The options that rebuild the same model and workloads in a worker process."""
    words = ["--model", args.model, "--batches", args.batches]
    words += ["--prefill", str(args.prefill), "--context", str(args.context)]
    return words + (["--fp8"] if args.fp8 else [])


def cold_and_warm(args: argparse.Namespace, way: str, root: Path) -> list[dict[str, Any]]:
    """Two fresh processes of `way` sharing cache directories under `root`: cold, then warm."""
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "TRITON_CACHE_DIR": str(root / "triton"),
    }
    command = [sys.executable, "-m", "ir_stack.bench.startup", "--worker", way]
    command += ["--cache", str(root / "ir-piecewise"), *model_args(args)]
    rows = []
    for cache in ("cold", "warm"):
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{way}, {cache} start: the worker failed:\n{done.stderr[-4000:]}")
        measured = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(
            {
                "model": args.model + (" fp8" if args.fp8 else ""),
                "way": way,
                "cache": cache,
                **measured,
            }
        )
        print(f"{way:>18} {cache}: {measured['seconds']:.1f} s {measured}", flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite (or, with the hidden ``--worker``, one start in this process)."""
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(first_outputs(args)))
        return 0
    device = results.current_device()
    result = results.new_result(
        "startup",
        f"Start-up: the {args.model} reference model compiled, cold and warm caches",
        device,
        {"model": args.model, "batches": args.batches, "prefill": args.prefill}
        | {"context": args.context, "ways": args.ways.split(",")},
        KEY,
        METRICS,
    )
    with tempfile.TemporaryDirectory(prefix="ir-stack-startup-") as tmp:
        for way in args.ways.split(","):
            result.rows += cold_and_warm(args, way, Path(tmp) / way)
    path = results.save(result, args.out)
    print(path.with_suffix(".md").read_text())
    return 0


def markdown(result: Result) -> str:
    """Per model and way: cold and warm seconds, the compilations and cache hits of each, and
    how much faster the warm start is."""
    method = (
        "Seconds from the compile call to the first outputs of every workload (decode batches "
        f"{result.params.get('batches')}, prefill {result.params.get('prefill')} tokens), each "
        "start in a fresh process: cold with empty compile caches, warm with the caches the "
        "cold start filled. Compilations: Inductor's (ir-piecewise's backend compilations for "
        "`ir_stack.compile`, its FX graph cache misses for `torch.compile`)."
    )
    lines = results.header(result, method)
    cells = {(r["model"], r["way"], r["cache"]): r for r in result.rows}
    pairs = list(dict.fromkeys((r["model"], r["way"]) for r in result.rows))
    rows = []
    for model, way in pairs:
        cold, warm = cells.get((model, way, "cold")), cells.get((model, way, "warm"))

        def text(r: dict[str, Any] | None) -> str:
            if r is None:
                return "-"
            loaded = f", {r['traces_loaded']} traces loaded" if r.get("traces_loaded") else ""
            return (
                f"{r['seconds']:.1f} s ({r['compilations']} compilations, "
                f"{r['cache_hits']} cache hits{loaded})"
            )

        faster = f"{cold['seconds'] / warm['seconds']:.1f}x" if cold and warm else "-"
        rows.append((model, way, text(cold), text(warm), faster))
    lines += results.table(["model", "way", "cold", "warm", "warm faster by"], rows)
    lines += [f"{note}\n" for note in result.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


def plot(result: Result, out: Path) -> None:
    """Cold and warm seconds per model and way, side by side (PNG)."""
    import matplotlib.pyplot as plt

    pairs = list(dict.fromkeys((r["model"], r["way"]) for r in result.rows))
    seconds = {(r["model"], r["way"], r["cache"]): r["seconds"] for r in result.rows}
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.6 * len(pairs)))
    for offset, cache in ((-0.2, "cold"), (0.2, "warm")):
        ax.barh(
            [i + offset for i in range(len(pairs))],
            [seconds.get((m, w, cache), 0.0) for m, w in pairs],
            height=0.4,
            label=cache,
        )
    ax.set_yticks(range(len(pairs)), [f"{m}: {w}" for m, w in pairs], fontsize=8)
    ax.set_xlabel("seconds to the first outputs")
    ax.set_title(result.device.name, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
