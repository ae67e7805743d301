"""Suite ``kernels``: every catalog op, every provider, against the copy bandwidth and the anchors.

For each op and shape (bf16; tokens x hidden, the gated ops at their intermediate sizes) it
times, in one process: each provider's implementation, Inductor's kernel for the op's native
function (compiled per shape), ``F.rms_norm`` where it applies and Liger-Kernel where it
applies and is installed. Each is timed replayed in a CUDA graph and plainly
(`ir_stack.bench.timing`). A row holds microseconds, GB/s of the minimum traffic (bytes the
op must read plus bytes it must write) and that as a fraction of the device-to-device copy
bandwidth measured in the same run. The run also times an empty Triton kernel (and the cuda
provider's, where loaded) replayed in a graph: the floor at decode sizes. Every candidate of a
shape runs once before any is timed, and ``--repeat N`` rotates the order in which they are
timed, so that no candidate is favoured by when it runs.

    ir-stack bench --only kernels [--quick]
    python -m ir_stack.bench.kernels --out DIR [--ops a,b] [--tokens ...] [--hidden ...]

Writes ``DIR/kernels-<device>.json``, ``.md`` and ``.png`` (`ir_stack.bench.kernel_report`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
import triton

import ir_kernels_triton
from ir_spec import SampleSpec, ops
from ir_spec.testing import sample_inputs

from . import common, results, timing

TOKENS = [1, 16, 128, 1024, 4096, 16384]
HIDDEN = [2048, 4096, 8192]
QUICK_TOKENS = [1, 16, 1024, 16384]
QUICK_HIDDEN = [4096]
INTERMEDIATE = {2048: 5632, 4096: 14336, 8192: 28672}
GATED = {"silu_and_mul", "gelu_and_mul", "silu_and_mul_static_quant_fp8"}
KEY = ["op", "provider", "tokens", "hidden"]
METRICS = [results.Metric("us_graph", "µs")]


@triton.jit
def _empty_kernel() -> None:
    pass


def empty_triton_kernel_us() -> float:
    """Replayed time of an empty Triton kernel: the floor of a kernel at decode sizes."""
    return timing.cuda_graph_us(lambda: _empty_kernel[(1,)](), 50).median_us


def empty_cuda_kernel_us() -> float | None:
    """Replayed time of the cuda provider's empty kernel (``torch.ops.ir_cuda.empty_kernel``),
    its own floor; None where that library is not loaded."""
    try:
        op = torch.ops.ir_cuda.empty_kernel
    except (AttributeError, RuntimeError):
        return None
    hint = torch.empty(1, device="cuda")
    return timing.cuda_graph_us(lambda: op(hint), 50).median_us


def min_traffic_bytes(op: Any, args: tuple[Any, ...], outs: tuple[torch.Tensor, ...]) -> int:
    """Bytes the op must move: every input it reads (only the gathered rows of a rotary cache),
    every output it writes, and of a KV cache it stores into (`IrOp.mutates`) only the slots
    its tokens write."""
    names = list(op.signature.parameters)
    total = 0
    for name, value in zip(names, args, strict=True):
        if not isinstance(value, torch.Tensor):
            continue
        if name in op.mutates:
            slots = args[names.index("slot_mapping")]
            slot_bytes = value[0, 0].numel() * value.element_size()
            total += int((slots >= 0).sum()) * slot_bytes
        elif name == "cos_sin_cache":
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


def _bound(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], Any]:
    return lambda: fn(*args)


#: `timing.gpu_time_fn`'s fields under the kernels schema's names, which its report and the
#: stored results read
_SCHEMA_NAMES = {
    "us": "us_graph",
    "us_p20": "us_graph_p20",
    "us_p80": "us_graph_p80",
    "gbps": "gbps_graph",
}


def timed_row(fn: Callable[[], Any], traffic: int, copy_gbps: float, quick: bool) -> dict[str, Any]:
    """One candidate's times (replayed and plain, µs) and bandwidth, as `timing.gpu_time_fn`
    measures them, under the kernels schema's names."""
    measured = timing.gpu_time_fn(copy_gbps, quick)(fn, traffic)
    del measured["copy_gbps"]  # a fact of the whole result here
    return {_SCHEMA_NAMES.get(name, name): value for name, value in measured.items()}


def bench_op(
    name: str,
    providers: Sequence[str],
    tokens: Sequence[int],
    hidden: Sequence[int],
    copy_gbps: float,
    quick: bool,
    rotation: int = 0,
) -> list[dict[str, Any]]:
    """Every provider and anchor of op `name` at every shape; one row each.

    Every candidate of a shape runs once (Inductor compiles) before any is timed: kernels
    timed right after Inductor's compile ran faster at L2-sized shapes than the same kernels
    timed before it. `rotation` starts the timing at a later candidate (repeated runs rotate,
    so each candidate is timed at several positions and the spread shows what the order alone
    moves)."""
    op = getattr(ops, name)
    rows: list[dict[str, Any]] = []
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
            outs = () if outs is None else outs if isinstance(outs, tuple) else (outs,)
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
            shape_rows: list[dict[str, Any]] = []
            for label, fn in ready[start:] + ready[:start]:
                try:
                    times = timed_row(fn, traffic, copy_gbps, quick)
                except Exception as err:  # an anchor that fails must not stop the run
                    print(f"  {name} {label} t={t} h={width}: {type(err).__name__}: {err}")
                    continue
                shape_rows.append(
                    {"op": name, "provider": label, "tokens": t, "hidden": width}
                    | {"dtype": "bfloat16", "bytes": traffic, "run": rotation, **times}
                )
            if shape_rows:
                best = min(shape_rows, key=lambda r: float(r["us_graph"]))
                cells = " ".join(
                    f"{r['provider']}={r['us_graph']:.2f}us/{r['fraction_of_copy']:.2f}"
                    for r in shape_rows
                )
                print(f"  {name:36s} t={t:6d} h={width:6d} best={best['provider']:10s} {cells}")
            rows += shape_rows
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the grid; exit status 0 when every timing is finite, 2 without a GPU."""
    parser = common.parser("kernels", (__doc__ or "").split("\n")[0])
    parser.add_argument("--ops", default=",".join(o.name for o in ops))
    parser.add_argument("--providers", default="triton,cuda")
    parser.add_argument("--tokens", help=f"default: {TOKENS} ({QUICK_TOKENS} with --quick)")
    parser.add_argument("--hidden", help=f"default: {HIDDEN} ({QUICK_HIDDEN} with --quick)")
    parser.add_argument(
        "--programmatic-launch",
        action="store_true",
        help="launch the Triton provider's kernels as programmatic dependent launches "
        "(ir_kernels_triton.set_programmatic_launch)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the whole grid this many times, run k timing each shape's candidates from "
        "the k-th on (run-to-run spread)",
    )
    a = parser.parse_args(argv)
    names = a.ops.split(",")
    unknown = [n for n in names if not hasattr(ops, n)]
    if unknown:
        parser.error(f"--ops: unknown {unknown}; known: {', '.join(o.name for o in ops)}")
    if a.repeat < 1:
        parser.error(f"--repeat {a.repeat}: expected 1 or more")
    try:
        common.require_gpu("kernels")
    except common.CannotRun as error:
        print(error)
        return common.CANNOT_RUN
    tokens = (
        [int(t) for t in a.tokens.split(",")] if a.tokens else (QUICK_TOKENS if a.quick else TOKENS)
    )
    hidden = (
        [int(h) for h in a.hidden.split(",")] if a.hidden else (QUICK_HIDDEN if a.quick else HIDDEN)
    )
    lift_recompile_limits()
    print("providers:", common.load_providers())
    ir_kernels_triton.set_programmatic_launch(a.programmatic_launch)
    device = results.current_device("cuda")
    result = results.new_result(
        "kernels",
        f"Kernels against the copy bandwidth and the anchors — {device.name}",
        device,
        {"ops": names, "providers": a.providers.split(","), "tokens": tokens, "hidden": hidden}
        | {"quick": a.quick, "repeat": a.repeat, "programmatic_launch": a.programmatic_launch},
        KEY,
        METRICS,
    )
    copy_gbps = timing.copy_bandwidth_gbps()
    result.facts = {
        "copy_gbps": copy_gbps,
        "empty_triton_kernel_us_graph": empty_triton_kernel_us(),
        "empty_cuda_kernel_us_graph": empty_cuda_kernel_us(),
        "programmatic_launch": {"triton": a.programmatic_launch},
    }
    print(f"{device.name}: copy {copy_gbps:.0f} GB/s; {result.facts}")
    for run in range(a.repeat):
        for name in names:
            start = time.time()
            result.rows += bench_op(
                name, a.providers.split(","), tokens, hidden, copy_gbps, a.quick, rotation=run
            )
            results.save(result, a.out, render_too=False)  # a run cut short keeps what it timed
            print(f"run {run} {name}: {time.time() - start:.0f} s", flush=True)
    path = results.save(result, a.out)
    print(f"kernels: {path.with_suffix('.md')}")
    return 0 if result.rows and all(math.isfinite(r["us_graph"]) for r in result.rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
