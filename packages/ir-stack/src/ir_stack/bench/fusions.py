"""Suite ``fusions``: each rotary fusion against the ops it replaces and against Inductor.

Two tables, bf16, query and key heads of 128 (32 query / 8 key heads and 64 / 8), every
power-of-two token count from 1 to 16384:

- ``qk_norm_rope``: ``qk_norm_rotary_embedding`` (each provider) against the best unfused path
  (the per-head ``rms_norm`` of the query, of the key, then ``rotary_embedding``, each step on
  the provider fastest for it) and against Inductor's code of the native composition
  (``torch.compile`` of the fused op's native function, which is that composition);
- ``rope_kvcache``: ``rotary_embedding_write_kv_cache`` (each provider) against
  ``rotary_embedding`` then ``write_kv_cache`` (each on its fastest provider) and Inductor's
  code of the composition.

The inputs are what a model passes: query, key and value are slices of one packed ``qkv``
projection, positions random below 4096, the cos / sin table in bf16, the cache paged (blocks
of 16 slots, twice as many slots as tokens, distinct random slots). Every candidate is first
checked against the native composition (``max_abs_error``), then timed replayed in a CUDA
graph (and plainly: ``us_plain``). GB/s counts the minimum traffic (`traffic_bytes`: inputs read
once, outputs and the tokens' cache rows written once); ``fraction_of_copy`` is that over the
device-to-device copy bandwidth measured in the same run. A row a candidate: column ``fused``,
``unfused`` or ``inductor`` (the table's three columns), or ``step: <op>`` (one unfused step
on one provider, from which the unfused path takes the fastest).

    ir-stack bench --only fusions [--quick]
    python -m ir_stack.bench.fusions --out DIR [--tables qk_norm_rope] [--heads 32/8] [--tokens ...]

``--append`` keeps the rows of the existing result (same device) for the shapes not run now,
so the grid can run in parts (a table or a head count a run); each row keeps the copy
bandwidth of its own run (``copy_gbps``).

Writes ``DIR/fusions-<device>.json``, ``.md`` and ``.png`` (`ir_stack.bench.fusions_report`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ir_spec import IrOp, ops
from ir_spec.catalog.rotary import make_cos_sin_cache

from . import common, results, timing
from .fusions_report import STEP_PREFIX
from .timing import TimeFn, gpu_time_fn

TABLES = ("qk_norm_rope", "rope_kvcache")
TOKENS = [2**i for i in range(15)]  # 1 .. 16384
QUICK_TOKENS = [1, 16, 256, 4096, 16384]
HEADS = [(32, 8), (64, 8)]
HEAD_SIZE = 128
MAX_POSITION = 4096
BLOCK_SIZE = 16
EPSILON = 1e-6
COLUMNS = ("fused", "unfused", "inductor")
KEY = ["table", "heads", "kv_heads", "tokens", "column", "provider"]
METRICS = [results.Metric("us", "µs")]


@dataclasses.dataclass(frozen=True)
class Shape:
    """One row of a table: which table, the heads of the query and of the key, the tokens."""

    table: str
    heads: int
    kv_heads: int
    tokens: int
    head_size: int = HEAD_SIZE

    def __post_init__(self) -> None:
        if self.table not in TABLES:
            raise ValueError(f"Shape.table: got {self.table!r}; expected one of {TABLES}")
        common.require_positive_ints("Shape", self, ("heads", "kv_heads", "tokens", "head_size"))


@dataclasses.dataclass
class Candidate:
    """One way to compute a shape's result: its column, provider(s) and call (which returns
    the rotated query and key, and writes the cache where the table's op does)."""

    column: str
    provider: str
    call: Callable[[], Any]


@dataclasses.dataclass
class Inputs:
    """A shape's arguments, as a model passes them."""

    positions: Tensor
    query: Tensor
    key: Tensor
    value: Tensor
    q_weight: Tensor
    k_weight: Tensor
    cos_sin_cache: Tensor
    key_cache: Tensor
    value_cache: Tensor
    slot_mapping: Tensor


def make_inputs(shape: Shape, device: torch.device, dtype: torch.dtype, seed: int) -> Inputs:
    """Random inputs of `shape`: query, key and value slices of one ``qkv`` tensor."""
    gen = torch.Generator(device=device).manual_seed(seed)
    t, d = shape.tokens, shape.head_size
    q_size, kv_size = shape.heads * d, shape.kv_heads * d
    qkv = torch.randn(t, q_size + 2 * kv_size, generator=gen, device=device).to(dtype)
    query, key, value = qkv.split([q_size, kv_size, kv_size], dim=-1)
    blocks = -(-2 * t // BLOCK_SIZE)
    caches = [
        torch.randn(blocks, BLOCK_SIZE, shape.kv_heads, d, generator=gen, device=device).to(dtype)
        for _ in range(2)
    ]
    slots = torch.randperm(blocks * BLOCK_SIZE, generator=gen, device=device)[:t]
    return Inputs(
        positions=torch.randint(0, MAX_POSITION, (t,), generator=gen, device=device),
        query=query,
        key=key,
        value=value,
        q_weight=(1 + 0.1 * torch.randn(d, generator=gen, device=device)).to(dtype),
        k_weight=(1 + 0.1 * torch.randn(d, generator=gen, device=device)).to(dtype),
        cos_sin_cache=make_cos_sin_cache(MAX_POSITION, d).to(device=device, dtype=dtype),
        key_cache=caches[0],
        value_cache=caches[1],
        slot_mapping=slots,
    )


def traffic_bytes(shape: Shape, inputs: Inputs) -> int:
    """Bytes the table's op must move: query and key (and for ``rope_kvcache`` the value and
    the slots) read once, the positions and the table rows they pick read once, the norms'
    weights read once; query and key written once, and the tokens' key and value rows of the
    cache written once (never the rest of the cache)."""
    x = inputs
    total = rotary_bytes(x.positions, x.query, x.key, x.cos_sin_cache)
    if shape.table == "qk_norm_rope":
        return total + nbytes(x.q_weight, x.k_weight)
    # the value and the slots read; the key's and the value's rows written
    return total + nbytes(x.value, x.slot_mapping) + 2 * nbytes(x.key)


def nbytes(*tensors: Tensor) -> int:
    """The bytes of `tensors` (views count their own elements)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def rotary_bytes(positions: Tensor, query: Tensor, key: Tensor, cos_sin_cache: Tensor) -> int:
    """The minimum traffic of ``rotary_embedding``: positions, the table rows they pick, query
    and key read; query and key written."""
    rows = positions.numel() * cos_sin_cache.shape[-1] * cos_sin_cache.element_size()
    return nbytes(positions) + rows + 2 * nbytes(query, key)


def bound(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], Any]:
    """`fn` called with `args`."""
    return lambda: fn(*args)


def providers_of(op: IrOp, args: tuple[Any, ...]) -> dict[str, Callable[..., Any]]:
    """Every implementation of `op` that runs here and takes `args`, native included."""
    return {
        name: impl.fn for name, impl in op.impls.items() if impl.supported and impl.accepts(args)
    }


def fastest(
    name: str, op: IrOp, args: tuple[Any, ...], traffic: int, time_fn: TimeFn
) -> tuple[str, Callable[..., Any], list[dict[str, Any]]]:
    """The provider of `op` fastest on `args`, its implementation, and a row a provider."""
    rows = []
    best: tuple[float, str, Callable[..., Any]] | None = None
    for provider, fn in providers_of(op, args).items():
        try:
            times = time_fn(bound(fn, args), traffic)
        except common.DEVICE_FAULTS:
            raise
        except Exception as err:  # a provider that fails must not stop the run
            print(f"  step {name} {provider}: {type(err).__name__}: {err}")
            continue
        column = f"{STEP_PREFIX}{name}"
        rows.append({"column": column, "provider": provider, "bytes": traffic, **times})
        if best is None or times["us"] < best[0]:
            best = (times["us"], provider, fn)
    if best is None:
        raise RuntimeError(f"step {name}: no implementation of {op.name} ran")
    return best[1], best[2], rows


def inductor_candidate(op: IrOp, args: tuple[Any, ...]) -> Candidate:
    """Inductor's code of `op`'s native function (the composition a fused op stands for),
    compiled for these shapes and run once here, so that it compiles before anything of its
    shape is timed."""
    compiled = torch.compile(op.native, dynamic=False, fullgraph=True)
    try:
        compiled(*args)
    except common.DEVICE_FAULTS:
        raise
    except Exception as err:  # an anchor that fails must not stop the run; the check says so
        print(f"  inductor {op.name}: {type(err).__name__}: {err}")
    return Candidate("inductor", "inductor", bound(compiled, args))


def qk_norm_rope_candidates(
    inputs: Inputs, shape: Shape, time_fn: TimeFn
) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """The fused op on each provider, the best unfused path and Inductor's code, with the
    unfused steps' rows."""
    x = inputs
    t, d = shape.tokens, shape.head_size
    fused_op = ops.qk_norm_rotary_embedding
    weights = (x.q_weight, x.k_weight, EPSILON)
    args = (x.positions, x.query, x.key, *weights, d, x.cos_sin_cache, True)
    candidates = [
        Candidate("fused", p, bound(fn, args)) for p, fn in providers_of(fused_op, args).items()
    ]
    candidates.append(inductor_candidate(fused_op, args))
    q_args = (x.query.view(t, shape.heads, d), x.q_weight, EPSILON, None)
    k_args = (x.key.view(t, shape.kv_heads, d), x.k_weight, EPSILON, None)
    normed_q = ops.rms_norm.native(*q_args).view(t, -1)
    normed_k = ops.rms_norm.native(*k_args).view(t, -1)
    rotary_args = (x.positions, normed_q, normed_k, d, x.cos_sin_cache, True)
    q_bytes, k_bytes = (2 * nbytes(a[0]) + nbytes(a[1]) for a in (q_args, k_args))
    q_name, q_norm, q_rows = fastest("rms_norm query", ops.rms_norm, q_args, q_bytes, time_fn)
    k_name, k_norm, k_rows = fastest("rms_norm key", ops.rms_norm, k_args, k_bytes, time_fn)
    r_bytes = rotary_bytes(x.positions, normed_q, normed_k, x.cos_sin_cache)
    r_name, rotate, r_rows = fastest(
        "rotary_embedding", ops.rotary_embedding, rotary_args, r_bytes, time_fn
    )

    def unfused() -> Any:
        q = q_norm(*q_args).view(t, -1)
        k = k_norm(*k_args).view(t, -1)
        return rotate(x.positions, q, k, d, x.cos_sin_cache, True)

    names = f"rms_norm query={q_name}, rms_norm key={k_name}, rotary_embedding={r_name}"
    candidates.append(Candidate("unfused", names, unfused))
    return candidates, q_rows + k_rows + r_rows


def rope_kvcache_candidates(
    inputs: Inputs, shape: Shape, time_fn: TimeFn
) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """The fused op on each provider, rotary then cache write on their fastest providers,
    and Inductor's code of the composition, with the unfused steps' rows."""
    x = inputs
    d = shape.head_size
    fused_op = ops.rotary_embedding_write_kv_cache
    caches = (x.key_cache, x.value_cache, x.slot_mapping)
    args = (x.positions, x.query, x.key, x.value, d, x.cos_sin_cache, True, *caches)
    candidates = [
        Candidate("fused", p, bound(fn, args)) for p, fn in providers_of(fused_op, args).items()
    ]
    candidates.append(inductor_candidate(fused_op, args))
    rotary_args = (x.positions, x.query, x.key, d, x.cos_sin_cache, True)
    rotated_key = ops.rotary_embedding.native(*rotary_args)[1]
    write_args = (rotated_key, x.value, *caches)
    r_bytes = rotary_bytes(x.positions, x.query, x.key, x.cos_sin_cache)
    r_name, rotate, r_rows = fastest(
        "rotary_embedding", ops.rotary_embedding, rotary_args, r_bytes, time_fn
    )
    # key and value read and their rows written, the slots read
    w_bytes = 2 * nbytes(rotated_key, x.value) + nbytes(x.slot_mapping)
    w_name, write, w_rows = fastest(
        "write_kv_cache", ops.write_kv_cache, write_args, w_bytes, time_fn
    )

    def unfused() -> Any:
        query, key = rotate(*rotary_args)
        write(key, x.value, *caches)
        return query, key

    names = f"rotary_embedding={r_name}, write_kv_cache={w_name}"
    candidates.append(Candidate("unfused", names, unfused))
    return candidates, r_rows + w_rows


def check(shape: Shape, inputs: Inputs, candidate: Candidate) -> float:
    """The largest difference of `candidate`'s rotated query and key (and for
    ``rope_kvcache`` the cache rows it wrote) from the native composition's. The expected
    values are computed first: an in-place candidate rotates the query and key it is given."""
    x = inputs
    if shape.table == "qk_norm_rope":
        expected = ops.qk_norm_rotary_embedding.native(
            x.positions, x.query, x.key, x.q_weight, x.k_weight, EPSILON, shape.head_size,
            x.cos_sin_cache, True,
        )  # fmt: skip
    else:
        expected_q, expected_k = ops.rotary_embedding.native(
            x.positions, x.query, x.key, shape.head_size, x.cos_sin_cache, True
        )
        rows = (shape.tokens, shape.kv_heads, shape.head_size)
        expected = (expected_q, expected_k, expected_k.reshape(rows), x.value.reshape(rows).clone())
        for cache in (x.key_cache, x.value_cache):
            cache.view(-1, cache.shape[2], cache.shape[3])[x.slot_mapping] = 0
    got = list(candidate.call())
    if shape.table == "rope_kvcache":
        got += [
            c.view(-1, c.shape[2], c.shape[3])[x.slot_mapping] for c in (x.key_cache, x.value_cache)
        ]
    return max(
        float((a.float() - b.float()).abs().max()) if a.numel() else 0.0
        for a, b in zip(got, expected, strict=True)
    )


def bench_shape(
    shape: Shape, device: torch.device, dtype: torch.dtype, time_fn: TimeFn, seed: int = 0
) -> list[dict[str, Any]]:
    """Every candidate of `shape`: checked, then timed; one row each (and one a provider of
    each unfused step). Inductor compiles before anything of the shape is timed."""
    inputs = make_inputs(shape, device, dtype, seed)
    traffic = traffic_bytes(shape, inputs)
    build = qk_norm_rope_candidates if shape.table == "qk_norm_rope" else rope_kvcache_candidates
    candidates, step_rows = build(inputs, shape, time_fn)
    errors: dict[int, float] = {}
    for i, candidate in enumerate(candidates):
        try:
            errors[i] = check(shape, inputs, candidate)
        except common.DEVICE_FAULTS:
            raise
        except Exception as err:  # an anchor that fails must not stop the run
            print(f"  {shape} {candidate.column} {candidate.provider}: {type(err).__name__}: {err}")
    if device.type == "cuda":
        torch.cuda.synchronize()
    rows = []
    for i, candidate in enumerate(candidates):
        if i not in errors:
            continue
        try:
            times = time_fn(candidate.call, traffic)
        except common.DEVICE_FAULTS:
            raise
        except Exception as err:  # an anchor that fails must not stop the run
            print(f"  {shape} {candidate.column} {candidate.provider}: {type(err).__name__}: {err}")
            continue
        rows.append(
            {"column": candidate.column, "provider": candidate.provider, **times}
            | {"max_abs_error": errors[i]}
        )
    common_fields = {
        "table": shape.table,
        "heads": shape.heads,
        "kv_heads": shape.kv_heads,
        "tokens": shape.tokens,
        "head_size": shape.head_size,
        "dtype": str(dtype).removeprefix("torch."),
        "bytes": traffic,
    }
    return [{**common_fields, **row} for row in rows + step_rows]


def parse_heads(text: str) -> list[tuple[int, int]]:
    """``"32/8,64/8"`` -> ``[(32, 8), (64, 8)]``; ValueError for anything else."""
    pairs = []
    for item in text.split(","):
        heads, sep, kv_heads = item.partition("/")
        if not sep or not heads.isdigit() or not kv_heads.isdigit():
            raise ValueError(f"--heads {text!r}: expected query/key heads such as 32/8,64/8")
        pairs.append((int(heads), int(kv_heads)))
    return pairs


def kept_rows(path: Path, result: results.Result, shapes: list[Shape]) -> list[dict[str, Any]]:
    """The rows of the result at `path` (none if there is no file) whose shapes are not among
    `shapes`; ValueError where it was measured on another device."""
    if not path.exists():
        return []
    previous = results.load(path)
    if previous.device != result.device:
        raise ValueError(
            f"--append: {path} holds a run on {previous.device.name}; expected {result.device.name}"
        )
    ran = {(s.table, s.heads, s.kv_heads, s.tokens) for s in shapes}
    return [
        r for r in previous.rows if (r["table"], r["heads"], r["kv_heads"], r["tokens"]) not in ran
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tables; exit status 0 when every timing is finite, 2 without a GPU."""
    parser = common.parser("fusions", (__doc__ or "").split("\n")[0])
    parser.add_argument("--tables", default=",".join(TABLES), help=f"some of {TABLES}")
    parser.add_argument(
        "--heads", default="32/8,64/8", help="query/key heads (default %(default)s)"
    )
    parser.add_argument("--tokens", help=f"default: {TOKENS} ({QUICK_TOKENS} with --quick)")
    parser.add_argument(
        "--append",
        action="store_true",
        help="keep the existing result's rows (same device) of the shapes not run now",
    )
    a = parser.parse_args(argv)
    tables = a.tables.split(",")
    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        parser.error(f"--tables: unknown {unknown}; expected some of {list(TABLES)}")
    try:
        heads = parse_heads(a.heads)
        tokens = (
            [int(t) for t in a.tokens.split(",")]
            if a.tokens
            else (QUICK_TOKENS if a.quick else TOKENS)
        )
        shapes = [Shape(table, h, kv, t) for table in tables for h, kv in heads for t in tokens]
    except ValueError as error:
        parser.error(str(error))
    try:
        common.require_gpu("fusions")
    except common.CannotRun as error:
        print(error)
        return common.CANNOT_RUN
    from .kernels import lift_recompile_limits

    lift_recompile_limits()
    print("providers:", common.load_providers())
    device = results.current_device("cuda")
    result = results.new_result(
        "fusions",
        f"The rotary fusions against the unfused ops and Inductor — {device.name}",
        device,
        {"tables": tables, "heads": a.heads, "tokens": tokens, "quick": a.quick},
        KEY,
        METRICS,
    )
    try:
        result.rows = (
            kept_rows(a.out / f"{result.file_stem}.json", result, shapes) if a.append else []
        )
    except ValueError as error:
        print(error)
        return common.CANNOT_RUN
    copy_gbps = timing.copy_bandwidth_gbps()
    result.facts = {"copy_gbps": copy_gbps, "head_size": HEAD_SIZE, "max_position": MAX_POSITION}
    print(f"{device.name}: copy {copy_gbps:.0f} GB/s")
    time_fn = gpu_time_fn(copy_gbps, a.quick)
    for shape in shapes:
        start = time.time()
        rows = bench_shape(shape, torch.device("cuda"), torch.bfloat16, time_fn, seed=shape.tokens)
        result.rows += rows
        cells = " ".join(
            f"{r['column']}[{r['provider']}]={r['us']:.2f}us"
            for r in rows
            if r["column"] in COLUMNS
        )
        print(
            f"  {shape.table} {shape.heads}/{shape.kv_heads} t={shape.tokens}: {cells}", flush=True
        )
        print(f"  ({time.time() - start:.0f} s)", flush=True)
        results.save(result, a.out, render_too=False)  # a run cut short keeps what it timed
    path = results.save(result, a.out)
    print(f"fusions: {path.with_suffix('.md')}")
    return 0 if result.rows and all(math.isfinite(r["us"]) for r in result.rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
