"""Probe: streamed silu gates in forms the flat kernel has not taken: cache hints and programs
that walk the whole tensor.

At shapes that stream from DRAM the provider's silu (`pointwise_kernels.flat_gated_kernel`,
1024 outputs over 4 warps on an H200) runs 0.1-1 % behind Liger at 5632-wide rows and Inductor
at wider ones (`benchmarks/results/kernels-triton-H200.md`). Rounds 2, 5 and 6 of
`triton-tuning-H200.log` swept its blocks and warps and Liger's row layout and arithmetic;
this probe tries what they left: L2 eviction hints on the loads (``evict_first``: each input
byte is read once), a streaming store (``.cs``), and a grid of a few programs an SM that
walk the tensor block by block, plainly or loading the next block before storing the current
one (registers double-buffered by hand). The arithmetic is the flat kernel's, so every form is
checked bitwise against the provider's output before it is timed. Times: fastest of
`--rounds` rotated rounds of CUDA-graph replays, µs, with the fraction of the copy bandwidth
measured in the same process; Liger and Inductor beside.

Usage (GPU machine, packages on `PYTHONPATH`, `benchmarks/kernels` on it too):
  python benchmarks/kernels/gated_stream_forms_probe.py [--rounds 3] [--shapes 4096x5632,...]
"""

import argparse
from functools import partial
from typing import Any

import torch
import triton
import triton.language as tl
from gated_streaming_probe import checked
from norm_split_h100 import fastest_of_rounds

from ir_kernels_triton import pointwise_kernels as pk
from ir_kernels_triton.platform import interpreting
from ir_spec import ops
from ir_stack.bench.kernels import anchors, copy_bandwidth

SHAPES = "4096x5632,16384x5632,1024x14336,4096x14336,16384x14336,1024x28672,4096x28672,16384x28672"


@triton.jit  # type: ignore[untyped-decorator]
def _load_block(  # type: ignore[no-untyped-def]
    x_ptr, blk, total, D: tl.constexpr, BLOCK: tl.constexpr, EVICT: tl.constexpr
):
    """Block `blk`'s flat output positions, their mask, and their gate and up values."""
    i = blk * BLOCK + tl.arange(0, BLOCK)
    src = x_ptr + (i // D) * D + i
    mask = i < total
    a = tl.load(src, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
    b = tl.load(src + D, mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
    return i, mask, a, b


@triton.jit  # type: ignore[untyped-decorator]
def _store_block(  # type: ignore[no-untyped-def]
    out_ptr,
    i,
    mask,
    a,
    b,
    STORE: tl.constexpr,
    STORE_EVICT: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """``silu(a) * b`` in the flat kernel's arithmetic, stored at `i` with the store's hints."""
    y = pk._gate(a, 0, INTERPRETED) * b  # 0: silu
    tl.store(
        out_ptr + i,
        y.to(out_ptr.dtype.element_ty),
        mask=mask,
        cache_modifier=STORE,
        eviction_policy=STORE_EVICT,
    )


@triton.jit  # type: ignore[untyped-decorator]
def stream_form_kernel(  # type: ignore[no-untyped-def]
    x_ptr,
    out_ptr,
    total,
    D: tl.constexpr,
    BLOCK: tl.constexpr,
    EVICT: tl.constexpr,
    STORE: tl.constexpr,
    STORE_EVICT: tl.constexpr,
    WALK: tl.constexpr,
    PREFETCH: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """``out = silu(x[:, :D]) * x[:, D:]`` over contiguous rows, by flat output position.
    `EVICT`: the loads' eviction policy; `STORE`, `STORE_EVICT`: the store's cache modifier and
    eviction policy; `WALK`: each program takes blocks pid, pid + programs, ...; `PREFETCH`:
    loads the next of its blocks before storing the current one."""
    pid = tl.program_id(0)
    if WALK:
        programs = tl.num_programs(0)
        blocks = tl.cdiv(total, BLOCK)
        if PREFETCH:
            i, mask, a, b = _load_block(x_ptr, pid, total, D, BLOCK, EVICT)
            for blk in range(pid + programs, blocks, programs):
                i2, mask2, a2, b2 = _load_block(x_ptr, blk, total, D, BLOCK, EVICT)
                _store_block(out_ptr, i, mask, a, b, STORE, STORE_EVICT, INTERPRETED)
                i, mask, a, b = i2, mask2, a2, b2
            _store_block(out_ptr, i, mask, a, b, STORE, STORE_EVICT, INTERPRETED)
        else:
            for blk in range(pid, blocks, programs):
                i, mask, a, b = _load_block(x_ptr, blk, total, D, BLOCK, EVICT)
                _store_block(out_ptr, i, mask, a, b, STORE, STORE_EVICT, INTERPRETED)
    else:
        i, mask, a, b = _load_block(x_ptr, pid, total, D, BLOCK, EVICT)
        _store_block(out_ptr, i, mask, a, b, STORE, STORE_EVICT, INTERPRETED)


def launch_form(
    x: torch.Tensor,
    out: torch.Tensor,
    block: int,
    warps: int,
    evict: str = "",
    store: str = "",
    store_evict: str = "",
    per_sm: int = 0,
    prefetch: bool = False,
) -> None:
    """One form over `x` into `out`: `per_sm` programs an SM walking the tensor (0: a program a
    block, as the provider launches)."""
    d = x.shape[-1] // 2
    total = x.shape[0] * d
    blocks = triton.cdiv(total, block)
    if per_sm:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        grid = (min(blocks, sms * per_sm),)
    else:
        grid = (blocks,)
    stream_form_kernel[grid](
        x,
        out,
        total,
        D=d,
        BLOCK=block,
        EVICT=evict,
        STORE=store,
        STORE_EVICT=store_evict,
        WALK=bool(per_sm),
        PREFETCH=prefetch,
        INTERPRETED=interpreting(),
        num_warps=warps,
    )


def forms(walk: bool = False) -> dict[str, dict[str, Any]]:
    """Label: `launch_form`'s keyword arguments. `walk`: also programs walking the tensor (a
    few an SM; the first run of this probe had them 3-30 % behind the provider)."""
    found: dict[str, dict[str, Any]] = {}
    for block, warps in ((1024, 4), (512, 2), (1024, 8), (2048, 8)):
        size = "" if (block, warps) == (1024, 4) else f"/{block}x{warps}"
        found[f"plain{size}"] = dict(block=block, warps=warps)
        found[f"cs{size}"] = dict(block=block, warps=warps, store=".cs")
        found[f"ef+cs{size}"] = dict(block=block, warps=warps, evict="evict_first", store=".cs")
    found["ef"] = dict(block=1024, warps=4, evict="evict_first")
    found["el+cs"] = dict(block=1024, warps=4, evict="evict_last", store=".cs")
    found["st-ef"] = dict(block=1024, warps=4, store_evict="evict_first")
    found["ef+st-ef"] = dict(block=1024, warps=4, evict="evict_first", store_evict="evict_first")
    if walk:
        for per_sm in (4, 8, 16):
            found[f"walk{per_sm}"] = dict(block=1024, warps=4, per_sm=per_sm)
            found[f"prefetch{per_sm}"] = dict(block=1024, warps=4, per_sm=per_sm, prefetch=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of timings (fastest kept)")
    parser.add_argument("--shapes", default=SHAPES, help="TOKENSxWIDTH,...")
    parser.add_argument("--walk", action="store_true", help="also time walking programs")
    args = parser.parse_args()
    copy = copy_bandwidth()
    print(f"copy {copy:.0f} GB/s; every form bitwise the provider's output")
    for shape in args.shapes.split(","):
        tokens, d = map(int, shape.split("x"))
        x = torch.randn(tokens, 2 * d, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(tokens, d, device="cuda", dtype=torch.bfloat16)
        traffic = 3 * x.numel() // 2 * x.element_size()
        runs = {
            k: v for k, v in anchors(ops.silu_and_mul, (x,)).items() if k in ("inductor", "liger")
        }
        for anchor in runs.values():
            anchor()
        pk.launch_gated(x, out, pk.ACT_SILU)
        expected = out.clone()
        runs["provider"] = partial(pk.launch_gated, x, out, pk.ACT_SILU)
        for label, kwargs in forms(args.walk).items():
            runs[label] = checked(label, partial(launch_form, x, out, **kwargs), out, expected)
        best = fastest_of_rounds(runs, args.rounds)
        ranked = sorted(best.items(), key=lambda kv: kv[1])
        cells = " ".join(f"{k}={t:.2f}/{traffic / (t * 1e-6) / 1e9 / copy:.3f}" for k, t in ranked)
        print(f"   silu_and_mul {tokens}x{d}: {cells}", flush=True)


if __name__ == "__main__":
    main()
