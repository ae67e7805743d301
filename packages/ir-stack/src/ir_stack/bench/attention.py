"""Suite ``attention``: decode attention over a KV cache against the copy bandwidth and SDPA.

One query token a sequence attends over its sequence's cached keys and values, every sequence
at the same length, bf16, 32 query / 8 key-value heads of 64 and of 128, batches 1 to 128 and
contexts 512 to 32768 positions. Three candidates a shape:

- ``split-K``: ``torch.ops.ir_stack.decode_attention`` as the reference models call it (on a
  CUDA GPU the split-K Triton kernels of `ir_stack.models.decode_kernel`);
- ``split-K, batch-invariant``: the same with batch-invariant mode on (each sequence split as
  if it were alone, ``ir_dispatch.set_batch_invariant``);
- ``SDPA``: ``F.scaled_dot_product_attention`` on the same cache, the query heads of a key-value
  head taken as that head's query rows (one matrix of ``group`` rows, no mask: every position
  is attended), PyTorch choosing its backend.

Every candidate is first checked against float32 SDPA on the first sequences
(``max_abs_error``), then timed replayed in a CUDA graph (and plainly: ``us_plain``). GB/s
counts the minimum traffic (`traffic_bytes`: the attended keys and values read once, the query
read and the output written once); ``fraction_of_copy`` is that over the device-to-device copy
bandwidth measured in the same run. `TARGET_FRACTION` is the fraction the split-K kernel aims
for.

    ir-stack bench --only attention [--quick]
    python -m ir_stack.bench.attention --out DIR [--batches 1,8] [--contexts 512,8192]
        [--head-sizes 64,128]

Writes ``DIR/attention-<device>.json``, ``.md`` and ``.png`` (`ir_stack.bench.attention_report`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

import ir_dispatch

from . import common, results, timing
from .timing import TimeFn, gpu_time_fn

HEADS = 32
KV_HEADS = 8
HEAD_SIZES = (64, 128)
BATCHES = (1, 8, 32, 128)
CONTEXTS = (512, 2048, 8192, 32768)
QUICK_BATCHES = (1, 32)
QUICK_CONTEXTS = (512, 8192)
#: sequences whose output is checked against float32 SDPA (the reference needs float32
#: copies of their keys and values)
CHECKED_SEQUENCES = 4
#: the split-K kernel's aim, as a fraction of the copy bandwidth over the bytes it must move
TARGET_FRACTION = 0.7
COLUMNS = ("split-K", "split-K, batch-invariant", "SDPA")
KEY = ["head_size", "batch", "context", "column"]
METRICS = [results.Metric("us", "µs")]


@dataclasses.dataclass(frozen=True)
class Shape:
    """One row group: the head size, the sequences and the positions each attends over."""

    head_size: int
    batch: int
    context: int
    heads: int = HEADS
    kv_heads: int = KV_HEADS

    def __post_init__(self) -> None:
        common.require_positive_ints(
            "Shape", self, ("head_size", "batch", "context", "heads", "kv_heads")
        )
        if self.heads % self.kv_heads:
            raise ValueError(
                f"Shape.heads: got {self.heads} over {self.kv_heads} key-value heads; expected "
                "a multiple of them"
            )


@dataclasses.dataclass
class Inputs:
    """A decode step's attention arguments, as a reference model passes them."""

    query: Tensor  # [batch, heads * head_size]
    k_cache: Tensor  # [batch, context, kv_heads, head_size]
    v_cache: Tensor
    positions: Tensor  # [batch, 1]: the last position, every sequence
    out: Tensor  # [batch, heads * head_size]


def make_inputs(shape: Shape, device: torch.device, dtype: torch.dtype, seed: int) -> Inputs:
    """Random query and caches of `shape`; every sequence attends over all its positions."""
    gen = torch.Generator(device=device).manual_seed(seed)
    b, d = shape.batch, shape.head_size
    cache_shape = (b, shape.context, shape.kv_heads, d)
    return Inputs(
        query=torch.randn(b, shape.heads * d, generator=gen, device=device).to(dtype),
        k_cache=torch.randn(cache_shape, generator=gen, device=device).to(dtype),
        v_cache=torch.randn(cache_shape, generator=gen, device=device).to(dtype),
        positions=torch.full((b, 1), shape.context - 1, device=device, dtype=torch.int64),
        out=torch.empty(b, shape.heads * d, device=device, dtype=dtype),
    )


def traffic_bytes(inputs: Inputs) -> int:
    """Bytes a decode attention must move: every key and value attended read once, the query
    and the positions read once, the output written once."""
    x = inputs
    return sum(t.numel() * t.element_size() for t in (x.k_cache, x.v_cache, x.query, x.out)) + (
        x.positions.numel() * x.positions.element_size()
    )


def grouped_sdpa(query: Tensor, k_cache: Tensor, v_cache: Tensor, kv_heads: int) -> Tensor:
    """SDPA of one token a sequence: the query heads sharing a key-value head as that head's
    query rows, over the whole cache; ``[batch, heads * head_size]``."""
    b, d = k_cache.shape[0], k_cache.shape[3]
    q = query.reshape(b, kv_heads, -1, d)
    keys, values = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
    return F.scaled_dot_product_attention(q, keys, values).reshape(b, -1)


def candidates(shape: Shape, x: Inputs) -> dict[str, Callable[[], Any]]:
    """Each column's call; each writes its result into ``x.out``."""
    decode = torch.ops.ir_stack.decode_attention
    args = (x.query, x.k_cache, x.v_cache, x.positions, x.out)

    def invariant() -> None:
        previous = ir_dispatch.batch_invariant()
        ir_dispatch.set_batch_invariant(True)
        try:
            decode(*args)
        finally:
            ir_dispatch.set_batch_invariant(previous)

    return {
        "split-K": lambda: decode(*args),
        "split-K, batch-invariant": invariant,
        "SDPA": lambda: x.out.copy_(grouped_sdpa(x.query, x.k_cache, x.v_cache, shape.kv_heads)),
    }


def check(shape: Shape, x: Inputs, call: Callable[[], Any]) -> float:
    """The largest difference of `call`'s output for the first `CHECKED_SEQUENCES` sequences
    from float32 SDPA's."""
    n = min(shape.batch, CHECKED_SEQUENCES)
    expected = grouped_sdpa(
        x.query[:n].float(), x.k_cache[:n].float(), x.v_cache[:n].float(), shape.kv_heads
    )
    x.out.fill_(float("nan"))
    call()
    return float((x.out[:n].float() - expected).abs().max())


def bench_shape(
    shape: Shape, device: torch.device, dtype: torch.dtype, time_fn: TimeFn, seed: int = 0
) -> list[dict[str, Any]]:
    """Every candidate of `shape`, checked then timed: a row each."""
    x = make_inputs(shape, device, dtype, seed)
    traffic = traffic_bytes(x)
    rows = []
    for column, call in candidates(shape, x).items():
        try:
            error = check(shape, x, call)
            times = time_fn(call, traffic)
        except common.DEVICE_FAULTS:
            raise
        except Exception as err:  # an anchor that fails must not stop the run
            print(f"  {shape} {column}: {type(err).__name__}: {err}")
            continue
        rows.append(
            {
                "head_size": shape.head_size,
                "batch": shape.batch,
                "context": shape.context,
                "heads": shape.heads,
                "kv_heads": shape.kv_heads,
                "dtype": str(dtype).removeprefix("torch."),
                "bytes": traffic,
                "column": column,
                **times,
                "max_abs_error": error,
            }
        )
    return rows


def parse_sizes(option: str, text: str) -> list[int]:
    """``"1,8,32"`` -> ``[1, 8, 32]``; ValueError naming `option` for anything else."""
    try:
        sizes = [int(item) for item in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise ValueError(f"{option} {text!r}: expected positive sizes such as 1,8,32")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    """Run the grid; exit status 0 when every timing is finite, 2 without a GPU."""
    parser = common.parser("attention", (__doc__ or "").split("\n")[0])
    parser.add_argument("--batches", help=f"default: {BATCHES} ({QUICK_BATCHES} with --quick)")
    parser.add_argument("--contexts", help=f"default: {CONTEXTS} ({QUICK_CONTEXTS} with --quick)")
    parser.add_argument(
        "--head-sizes", default=",".join(map(str, HEAD_SIZES)), help="default: %(default)s"
    )
    a = parser.parse_args(argv)
    try:
        batches = (
            parse_sizes("--batches", a.batches)
            if a.batches
            else list(QUICK_BATCHES if a.quick else BATCHES)
        )
        contexts = (
            parse_sizes("--contexts", a.contexts)
            if a.contexts
            else list(QUICK_CONTEXTS if a.quick else CONTEXTS)
        )
        shapes = [
            Shape(d, b, c)
            for d in parse_sizes("--head-sizes", a.head_sizes)
            for b in batches
            for c in contexts
        ]
    except ValueError as error:
        parser.error(str(error))
    try:
        common.require_gpu("attention")
    except common.CannotRun as error:
        print(error)
        return common.CANNOT_RUN
    import ir_stack.models.attention  # noqa: F401  (registers torch.ops.ir_stack.decode_attention)

    device = results.current_device("cuda")
    result = results.new_result(
        "attention",
        f"Decode attention against the copy bandwidth and SDPA — {device.name}",
        device,
        {"batches": batches, "contexts": contexts, "head_sizes": a.head_sizes, "quick": a.quick},
        KEY,
        METRICS,
    )
    copy_gbps = timing.copy_bandwidth_gbps()
    result.facts = {
        "copy_gbps": copy_gbps,
        "heads": HEADS,
        "kv_heads": KV_HEADS,
        "target_fraction": TARGET_FRACTION,
    }
    print(f"{device.name}: copy {copy_gbps:.0f} GB/s")
    time_fn = gpu_time_fn(copy_gbps, a.quick)
    for shape in shapes:
        start = time.time()
        rows = bench_shape(shape, torch.device("cuda"), torch.bfloat16, time_fn, seed=shape.batch)
        result.rows += rows
        cells = " ".join(f"{r['column']}={r['us']:.2f}us" for r in rows)
        print(
            f"  d={shape.head_size} b={shape.batch} context={shape.context}: {cells} "
            f"({time.time() - start:.0f} s)",
            flush=True,
        )
        torch.cuda.empty_cache()
        results.save(result, a.out, render_too=False)  # a run cut short keeps what it timed
    path = results.save(result, a.out)
    print(f"attention: {path.with_suffix('.md')}")
    return 0 if result.rows and all(math.isfinite(r["us"]) for r in result.rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
