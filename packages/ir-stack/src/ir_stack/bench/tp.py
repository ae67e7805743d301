"""Suite ``tp``: the tensor-parallel reference model end to end over N ranks (default 2),
decode steps and prefill, in every mode, each against the single-device model's logits.

The modes are the ``e2e`` suite's, run on `ir_stack.models.ParallelLlamaModel`: eager native
and with the selected kernels; stock ``torch.compile`` (and reduce-overhead) of the same
tensor-parallel model written in plain PyTorch, its all-reduces torch's functional
collectives; ``ir_stack.compile`` piecewise (``ir_stack piecewise``: CUDA graphs per piece) and
with ``FULL_AND_PIECEWISE`` (``ir_stack``: decode steps as one graph, collectives inside); and
the eager model captured whole per decode batch (``full CUDA graph``). Workloads and sizes are
``e2e``'s: decode batches 1, 8, 32 and 128 with 512 cached positions and a 2048-token prefill
for the 1B model on GPUs. Each rank times its own calls; the result holds rank 0's.

``--pass-variants`` compiles the ``ir_stack`` modes once per variant, a variant being pass
flags (``-O<level>``, ``--pass.<field>=<value>``) as ``ir-stack`` takes them; its modes are
named ``ir_stack [<flags>]``. So one run measures each fusion on and off:
``--pass-variants="--pass.enable_x=true;--pass.enable_x=false"`` (with ``=``: the value
starts with a dash). ``--pass-variants=tp-fusions`` names `TP_FUSION_VARIANTS`: the
all-reduce + norm fusion off and on, sequence parallelism, and sequence parallelism with the
GEMM + collective fusion, the last two from `SP_MIN_TOKENS` tokens (the prefill). A variant
with sequence parallelism on compiles the workloads' batch sizes as compile sizes: it runs on
static token counts only, which must divide among the ranks.

It starts its ranks itself (``ir-stack bench --only tp``: NCCL with one GPU a rank, gloo on
the CPU, where the CUDA-graph modes are left out), or is one of the processes of ``torchrun
--nproc-per-node N -m ir_stack.bench.tp --tp N --out DIR``.

Writes ``DIR/tp-<device>.json``, ``.md`` and ``.png`` (`ir_stack.bench.e2e_report`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import shlex
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from ir_piecewise import CompilationConfig, CUDAGraphMode

from ..compiler import compile as ir_stack_compile
from ..config import Config
from ..models import ParallelLlamaModel
from ..models.parallel import kv_heads_of, shard_sizes
from . import common, e2e, results, timing

MODES = e2e.MODES
#: the token count from which the ``tp-fusions`` variants run sequence parallelism
SP_MIN_TOKENS = 256
#: ``--pass-variants=tp-fusions``: each tensor-parallel fusion on and off
TP_FUSION_VARIANTS = ";".join(
    (
        "--pass.fuse_allreduce_rms=false",
        "--pass.fuse_allreduce_rms=true",
        f"--pass.enable_sp=true --pass.sp_min_token_num={SP_MIN_TOKENS}",
        f"--pass.fuse_gemm_comms=true --pass.sp_min_token_num={SP_MIN_TOKENS}",
    )
)
KEY = ["model", "mode", "workload"]
METRICS = [results.Metric("ms", "ms")]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = common.parser("tp", (__doc__ or "").split("\n")[0])
    e2e.add_model_args(parser)
    parser.add_argument("--tp", type=int, default=2, help="ranks (default: %(default)s)")
    parser.add_argument("--iters", type=int, help="timed calls a workload (default: by model)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument(
        "--pass-variants",
        default="",
        help="';'-separated pass flags, one compilation of the ir_stack modes each, given "
        "as --pass-variants=FLAGS, or tp-fusions: each tensor-parallel fusion on and off "
        "(default: the pass configuration in force)",
    )
    args = parser.parse_args(argv)
    unknown = set(args.modes.split(",")) - set(MODES)
    if unknown:
        parser.error(f"--modes: unknown {sorted(unknown)}; expected some of {list(MODES)}")
    if args.tp < 1:
        parser.error(f"--tp {args.tp}: expected a positive number of ranks")
    e2e.resolve_sizes(parser, args)
    try:
        shard_sizes(e2e.model_config(args), args.tp)
        if args.pass_variants == "tp-fusions":
            args.pass_variants = TP_FUSION_VARIANTS
        args.variants = [
            (flags.strip(), Config.load(shlex.split(flags)))
            for flags in args.pass_variants.split(";")
        ]
    except ValueError as error:
        parser.error(str(error))
    return args


def variant_mode(mode: str, flags: str) -> str:
    """The name of `mode` compiled with pass `flags` (the mode itself for no flags)."""
    return f"{mode} [{flags}]" if flags else mode


def base_mode(name: str) -> str:
    """The mode of a row's mode name (``ir_stack [-O0]`` -> ``ir_stack``)."""
    return name.split(" [", 1)[0]


def local_caches(full: e2e.KVCache, first: int, count: int) -> e2e.KVCache:
    """A rank's KV caches: heads ``first .. first + count`` of the whole model's."""
    return [
        (k[:, :, first : first + count].contiguous(), v[:, :, first : first + count].contiguous())
        for k, v in full
    ]


def run_rank(rank: int, world: int, args: argparse.Namespace) -> None:
    """One rank: build the models, time every mode; rank 0 writes the result."""
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if torch.cuda.is_available()
        else (torch.device("cpu"))
    )
    if device.type == "cuda":
        common.load_providers()
    setup = e2e.build_setup(args, device)
    config = setup.config
    with torch.no_grad():
        single = e2e.build_model(setup)
        reference: dict[str, Tensor] = {}
        with e2e.native_only():
            for w in setup.workloads:
                ids, positions = setup.inputs[w.name]
                reference[w.name] = single(ids, positions, setup.cache_for(w)).float()
    del single
    first, count = kv_heads_of(config, world, rank)
    setup.decode_cache = local_caches(setup.decode_cache, first, count)
    setup.prefill_cache = local_caches(setup.prefill_cache, first, count)
    model = ParallelLlamaModel(config, device=device).to(setup.dtype).eval()
    modes = [m for m in args.modes.split(",") if device.type == "cuda" or "CUDA graph" not in m]
    plain = None
    if any("torch.compile" in m for m in modes):
        plain = ParallelLlamaModel(config, plain_torch=True, device=device).to(setup.dtype).eval()
    label = args.model + (" fp8" if args.fp8 else "") + f" TP={world}"
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ir-stack-tp-") as cache, torch.no_grad():
        for mode in modes:
            variants = args.variants if mode.startswith("ir_stack") else [("", None)]
            for flags, variant in variants:
                name = variant_mode(mode, flags)
                started = time.perf_counter()
                call = make_mode(mode, variant, model, plain, setup, Path(cache) / str(rank))
                for w in setup.workloads:
                    ids, positions = setup.inputs[w.name]
                    step = functools.partial(call, w, ids, positions, setup.cache_for(w))
                    with e2e.native_only() if mode == "eager native" else contextlib.nullcontext():
                        out = step()
                        if out is None:
                            continue
                        ms = timing.mean_ms(step, device, args.iters)
                    error = float((out.float() - reference[w.name]).abs().max())
                    row = {"model": label, "mode": name, "workload": w.name, "batch": w.batch}
                    row |= {"tokens": w.tokens, "ms": ms, "max_abs_error": error}
                    rows.append(row)
                    if rank == 0:
                        print(f"{name:>40} {w.name:>14} {ms:9.3f} ms  err {error:.3g}", flush=True)
                if rank == 0:
                    print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
    if rank == 0:
        write_result(args, device, world, label, rows)


def make_mode(
    mode: str,
    variant: Config | None,
    model: ParallelLlamaModel,
    plain: ParallelLlamaModel | None,
    setup: e2e.Setup,
    cache_dir: Path,
) -> Callable[[e2e.Workload, Tensor, Tensor, e2e.KVCache], Tensor | None]:
    """A function running one workload in `mode`; the ``ir_stack`` modes compile with the
    pass configuration of `variant` (None: the one in force)."""
    if not mode.startswith("ir_stack"):
        namespace = argparse.Namespace(cache=cache_dir)
        return e2e.make_mode(mode, model, plain, setup, namespace)
    graphs = e2e.IR_STACK_GRAPHS[mode] if setup.device.type == "cuda" else CUDAGraphMode.NONE
    passes = variant.passes if variant else Config().passes
    # sequence parallelism splits static token counts: compile the workloads' batch sizes
    sizes = sorted({w.batch for w in setup.workloads}) if passes.fusion_on("enable_sp") else []
    piecewise = CompilationConfig(
        cudagraph_mode=graphs, cache_dir=cache_dir, compile_sizes=tuple(sizes)
    )
    config = Config(passes=passes, piecewise=piecewise)
    forward = ir_stack_compile(model, config)
    return lambda w, ids, pos, cache: forward(ids, pos, cache)


def write_result(
    args: argparse.Namespace,
    device: torch.device,
    world: int,
    label: str,
    rows: list[dict[str, Any]],
) -> None:
    dtype = "bfloat16" if device.type == "cuda" else "float32"
    result = results.new_result(
        "tp",
        f"Tensor parallel end to end: the {label} reference model, {dtype}",
        results.current_device(device.type),
        {"model": label, "batches": args.batches, "prefill": args.prefill}
        | {"context": args.context, "iters": args.iters, "tp": world},
        KEY,
        METRICS,
    )
    result.facts = {
        "config": dataclasses.asdict(e2e.model_config(args)),
        "dtype": dtype,
        "timed_with": "CUDA events" if device.type == "cuda" else "perf_counter",
        "backend": dist.get_backend(),
        "pass_variants": [flags for flags, _ in args.variants],
        "errors_against": "the single-device model's eager native",
    }
    result.rows = sorted(rows, key=lambda r: MODES.index(base_mode(r["mode"])))
    result.notes = [f"{world} ranks ({dist.get_backend()}); the times are rank 0's."]
    path = results.save(result, args.out)
    print(results.render(result, path).read_text())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite (see the module's docstring)."""
    args = parse_args(argv)
    return common.run_ranks("tp", run_rank, args)


if __name__ == "__main__":
    raise SystemExit(main())
