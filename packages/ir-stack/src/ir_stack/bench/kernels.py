"""Kernel benchmark: provider kernels against the memory-bandwidth ceiling and the anchors.

For each op and shape (bf16; tokens x hidden, the gated ops at their intermediate sizes) it
times, in one process: our providers, Inductor's kernel for the native function (compiled per
shape), ``F.rms_norm`` where it applies and Liger-Kernel where it applies (if importable). Each
is timed by replaying a CUDA graph (``triton.testing.do_bench_cudagraph``) and plainly
(``do_bench``). It reports microseconds, GB/s of minimum memory traffic (bytes the op must read
plus bytes it must write) and that as a fraction of the device-to-device copy bandwidth measured
in the same run (1 GiB copy, bytes read + written). It also times an empty Triton kernel
replayed in a graph, the floor for decode sizes. Every candidate of a shape runs once before
any is timed, and ``--repeat N`` rotates the order in which they are timed, so no candidate is
favoured by when it runs.

Usage (on a GPU): ``ir-stack bench --only kernels`` or ``python -m ir_stack.bench.kernels --out
DIR [--ops a,b] [--quick]``. Results: ``DIR/kernels-<card>.json``, one record per (op, provider,
shape), written after each op; `ir_stack.bench.kernel_report` turns it into a table and a plot.
"""

import argparse
import json
import math
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.testing import do_bench, do_bench_cudagraph

from ir_kernels_cuda.build import PROGRAMMATIC_NAMESPACE, BuildUnavailable
from ir_kernels_triton.launch import await_previous_grid, launch_options
from ir_kernels_triton.launch import programmatic_launch as triton_programmatic_launch
from ir_kernels_triton.launch import set_programmatic_launch as triton_setting
from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs

PROVIDER_PACKAGES = ("ir_kernels_triton", "ir_kernels_cuda.impls")


def import_providers() -> list[str]:
    """Import the provider packages present (entry points need an installed distribution)."""
    import importlib

    found = []
    for name in PROVIDER_PACKAGES:
        try:
            importlib.import_module(name)
            found.append(name)
        except ImportError as err:
            print(f"provider package {name} not importable: {err}")
    return found


TOKENS = [1, 16, 128, 1024, 4096, 16384]
HIDDEN = [2048, 4096, 8192]
INTERMEDIATE = {2048: 5632, 4096: 14336, 8192: 28672}
GATED = {"silu_and_mul", "gelu_and_mul", "silu_and_mul_static_quant_fp8"}
QUANTILES = [0.2, 0.5, 0.8]


@triton.jit
def _empty_kernel(PDL: tl.constexpr = False) -> None:
    await_previous_grid(PDL)


def copy_bandwidth() -> float:
    """GB/s of a 1 GiB device-to-device copy, bytes read + written."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)

    ms = float(do_bench(copy, warmup=50, rep=400))
    return 2 * (1 << 30) / (ms * 1e-3) / 1e9


def replayed_us(fn: Callable[[], Any], rep_ms: int) -> float:
    """`fn`'s CUDA-graph replay time in µs: the median of ``do_bench_cudagraph``'s replays (its
    default, the mean, moves with one slow replay), as `timed` and the probes take it."""
    return float(do_bench_cudagraph(fn, rep=rep_ms, return_mode="median")) * 1e3


def empty_kernel_us(programmatic: bool = False) -> float:
    """Replayed time of an empty Triton kernel (`replayed_us`): the floor for decode sizes.
    `programmatic`: launched as the provider's kernels are when their programmatic launch is on
    (where the GPU and Triton have it; plainly elsewhere)."""
    options: dict[str, bool] = {}
    if programmatic:
        with triton_programmatic_launch(True):
            options = launch_options(torch.empty(1, device="cuda"), (1,), 4)

    def launch() -> None:
        _empty_kernel[(1,)](**options)

    return replayed_us(launch, 50)


def empty_cuda_kernel_us(programmatic: bool = False) -> float | None:
    """Replayed time of an empty CUDA kernel (``torch.ops.ir_cuda.empty_kernel``;
    `replayed_us`), the cuda provider's decode floor; with `programmatic`, that of the
    programmatic build (``torch.ops.ir_cuda_programmatic``). None where that library is not
    loaded."""
    try:
        op = getattr(torch.ops, PROGRAMMATIC_NAMESPACE if programmatic else "ir_cuda").empty_kernel
    except (AttributeError, RuntimeError):
        return None
    hint = torch.empty(1, device="cuda")
    return replayed_us(lambda: op(hint), 50)


def set_programmatic_launch(enabled: bool) -> dict[str, bool]:
    """Programmatic dependent launch on or off in every provider that has it here
    (`--programmatic-launch`); returns what each provider now does."""
    triton_setting(enabled)
    applied = {"triton": enabled}
    try:
        # (imported here: it loads the cuda provider, which a Triton-only run need not build)
        from ir_kernels_cuda.launch import set_programmatic_launch as cuda_setting

        cuda_setting(enabled)
        applied["cuda"] = enabled
    except BuildUnavailable as exc:  # no GPU, toolkit or Hopper: the cuda column launches plainly
        if enabled:
            print(f"cuda: programmatic launch unavailable: {exc}")
    return applied


def min_traffic_bytes(op: Any, args: tuple[Any, ...], outs: tuple[torch.Tensor, ...]) -> int:
    """Bytes the op must move: every input it reads (only the gathered rows of a rotary cache)
    and every output it writes."""
    names = list(op.signature.parameters)
    total = 0
    for name, value in zip(names, args, strict=True):
        if not isinstance(value, torch.Tensor):
            continue
        if name == "cos_sin_cache":
            positions = args[names.index("positions")]
            total += positions.numel() * value.shape[-1] * value.element_size()
        else:
            total += value.numel() * value.element_size()
    return total + sum(o.numel() * o.element_size() for o in outs)


def anchors(op: Any, args: tuple[Any, ...]) -> dict[str, Callable[[], Any]]:
    """The functions users would otherwise run for this op and arguments."""
    compiled: Callable[..., Any] = torch.compile(op.native, dynamic=False, fullgraph=True)
    found: dict[str, Callable[[], Any]] = {"inductor": lambda: compiled(*args)}
    if op.name == "rms_norm":
        x, w, eps, _ = args
        found["F.rms_norm"] = lambda: F.rms_norm(x, (x.shape[-1],), w, eps)
    try:
        if op.name == "rms_norm":
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction

            x, w, eps, _ = args
            found["liger"] = lambda: LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama", False)
        elif op.name == "fused_add_rms_norm":
            from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

            x, r, w, eps, _ = args
            found["liger"] = lambda: LigerFusedAddRMSNormFunction.apply(x, r, w, eps)
        elif op.name == "silu_and_mul":
            from liger_kernel.ops.swiglu import LigerFusedGateUpSiLUMulFunction

            (x,) = args
            found["liger"] = lambda: LigerFusedGateUpSiLUMulFunction.apply(x)
    except ImportError:
        pass
    return found


def _bound(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], Any]:
    return lambda: fn(*args)


def lift_recompile_limits() -> None:
    """Let Dynamo recompile without limit: the Inductor anchor compiles once per shape."""
    for option in (
        "recompile_limit",
        "cache_size_limit",
        "accumulated_recompile_limit",
        "accumulated_cache_size_limit",
    ):
        if hasattr(torch._dynamo.config, option):
            setattr(torch._dynamo.config, option, 100000)


def _runs(fn: Callable[[], Any], label: str) -> bool:
    """Call `fn` once (compiling it if needed); False, with the error printed, if it fails."""
    try:
        fn()
    except Exception as err:  # an anchor that fails must not stop the run
        print(f"  {label}: {type(err).__name__}: {err}")
        return False
    return True


def timed(fn: Callable[[], Any], quick: bool) -> dict[str, float]:
    """Median and 20/80 % quantiles of `fn`, replayed in a CUDA graph and plainly (µs)."""
    fn()
    torch.cuda.synchronize()
    graph = do_bench_cudagraph(fn, rep=10 if quick else 25, quantiles=QUANTILES)
    plain = do_bench(fn, warmup=5, rep=10 if quick else 25, quantiles=QUANTILES)
    return {
        "us_graph": graph[1] * 1e3,
        "us_graph_p20": graph[0] * 1e3,
        "us_graph_p80": graph[2] * 1e3,
        "us_plain": plain[1] * 1e3,
        "us_plain_p20": plain[0] * 1e3,
        "us_plain_p80": plain[2] * 1e3,
    }


def bench_op(
    name: str,
    providers: list[str],
    tokens: list[int],
    hidden: list[int],
    copy_gbps: float,
    quick: bool,
    rotation: int = 0,
) -> list[dict[str, Any]]:
    """Every provider and anchor of op `name` at every shape; one record each.

    Every candidate of a shape runs once (Inductor compiles) before any is timed: on an H100,
    kernels timed right after Inductor's compile ran up to 10 % faster at L2-sized shapes than
    the same kernels timed before it. `rotation` starts the timing at a later candidate
    (repeated runs rotate, so each candidate is timed at several positions and the spread
    shows what the order alone moves)."""
    op = getattr(ops, name)
    records: list[dict[str, Any]] = []
    for h in hidden:
        width = INTERMEDIATE[h] if name in GATED else h
        for t in tokens:
            spec = SampleSpec(
                batch_shape=(t,),
                hidden_size=width,
                dtype=torch.bfloat16,
                device="cuda",
                seed=t + width,
            )
            args = sample_inputs(op, spec)
            outs = op.native(*args)
            outs = outs if isinstance(outs, tuple) else (outs,)
            traffic = min_traffic_bytes(op, args, outs)
            candidates: dict[str, Callable[[], Any]] = {}
            for p in providers:
                impl = op.impls.get(p)
                if impl is not None and impl.supported and impl.accepts(args):
                    candidates[p] = _bound(impl.fn, args)
            candidates.update(anchors(op, args))
            ready = [(label, fn) for label, fn in candidates.items() if _runs(fn, label)]
            torch.cuda.synchronize()
            start = rotation % len(ready) if ready else 0
            for label, fn in ready[start:] + ready[:start]:
                try:
                    stats = timed(fn, quick)
                except Exception as err:  # an anchor that fails must not stop the run
                    print(f"  {name} {label} t={t} h={width}: {type(err).__name__}: {err}")
                    continue
                gbps = traffic / (stats["us_graph"] * 1e-6) / 1e9
                records.append(
                    {
                        "op": name,
                        "provider": label,
                        "tokens": t,
                        "hidden": width,
                        "dtype": "bfloat16",
                        "bytes": traffic,
                        **stats,
                        "gbps_graph": gbps,
                        "fraction_of_copy": gbps / copy_gbps,
                        "gbps_plain": traffic / (stats["us_plain"] * 1e-6) / 1e9,
                    }
                )
            best = min(
                (r for r in records if r["tokens"] == t and r["hidden"] == width),
                key=lambda r: float(r["us_graph"]),
                default=None,
            )
            if best is not None:
                print(
                    f"  {name:36s} t={t:6d} h={width:6d} best={best['provider']:10s} "
                    + " ".join(
                        f"{r['provider']}={r['us_graph']:.2f}us/{r['fraction_of_copy']:.2f}"
                        for r in records
                        if r["tokens"] == t and r["hidden"] == width
                    ),
                    flush=True,
                )
    return records


def main(argv: Sequence[str] | None = None) -> int:
    """Run the grid; exit code 0 when every timing is finite."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ops", default=",".join(o.name for o in ops))
    parser.add_argument("--providers", default="triton,cuda")
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--hidden", default=",".join(map(str, HIDDEN)))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tag", default="")
    parser.add_argument(
        "--programmatic-launch",
        action="store_true",
        help="launch the providers' kernels as programmatic dependent launches (each then "
        "overlaps the one before, itself: see benchmarks/gpu/programmatic_launch.py)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the whole grid this many times, run k timing each shape's candidates from "
        "the k-th on (run-to-run spread)",
    )
    a = parser.parse_args(argv)
    lift_recompile_limits()
    torch.backends.cuda.matmul.allow_tf32 = True
    print("providers:", import_providers())
    card = torch.cuda.get_device_name()
    copy_gbps = copy_bandwidth()
    programmatic = set_programmatic_launch(a.programmatic_launch)
    empty_us = empty_kernel_us()
    empty_cuda_us = empty_cuda_kernel_us()
    print(f"{card}: copy {copy_gbps:.0f} GB/s, empty Triton kernel replayed {empty_us:.2f} us")
    meta = {
        "card": card,
        "copy_gbps": copy_gbps,
        "empty_triton_kernel_us_graph": empty_us,
        "empty_cuda_kernel_us_graph": empty_cuda_us,
        "programmatic_launch": programmatic,
        "empty_triton_kernel_programmatic_us_graph": empty_kernel_us(True),
        "empty_cuda_kernel_programmatic_us_graph": empty_cuda_kernel_us(True),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "quick": a.quick,
    }
    slug = card.replace(" ", "-").replace("/", "-")
    path = a.out / f"kernels-{slug}{a.tag}.json"
    a.out.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    for run in range(a.repeat):
        for name in a.ops.split(","):
            start = time.time()
            new = bench_op(
                name,
                a.providers.split(","),
                [int(t) for t in a.tokens.split(",")],
                [int(h) for h in a.hidden.split(",")],
                copy_gbps,
                a.quick,
                rotation=run,
            )
            records += [{**r, "run": run} for r in new]
            path.write_text(json.dumps({"meta": meta, "records": records}, indent=1))
            print(f"run {run} {name}: {time.time() - start:.0f} s", flush=True)
    return 0 if records and all(math.isfinite(r["us_graph"]) for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
