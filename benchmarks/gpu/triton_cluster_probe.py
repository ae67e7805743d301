"""What a thread-block cluster would buy Triton's decode-size norms, with the row's bits kept.

Until round 12, provider `triton` shared a decode-size row among `SPLIT` programs that each
load the whole row for its sum (`ir_kernels_triton.norm_rules.split_for`); four shapes stayed
over the issue's 1 µs line that way (the fused adds at 16 x 8192, the dynamic-fp8 norm at 1
and 16 x 8192). Triton 3.6 builds no reduction across the blocks of a cluster (`num_ctas` > 1
fails in its CTA planning), and an exchange through global memory ran slower
(`triton_exchange_probe.py`).

This probe compiles a kernel for one block (`num_ctas=1`) and launches it as clusters of `S`
blocks a row: the compiled kernel's launch metadata is changed to ask Triton's C launcher for
`S` blocks a cluster (a Triton 3.6 internal). Block `c`
of a row takes the elements that warps `c, c + S, c + 2S, ...` hold in the one-program kernel
of that row width (the same elements per thread, in the same register order), so its own
reduction (in-thread chain, lane butterfly, warp butterfly) computes exactly a node of the
one-program kernel's reduction tree. The blocks then exchange those partials through
distributed shared memory in inline PTX and finish the tree in the one-program order:
`(p0 + p2) + (p1 + p3)` for four, `p0 + p1` for two, and for eight
`((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7))`. So a row's outputs are the provider's
bits, which the probe checks bitwise. Two exchanges (`cS` and `mS` in the output):

- `cS`: `st.shared::cluster` into each peer, then a cluster barrier (release / acquire);
- `mS`: `st.async` into each peer, completing bytes on the peer's mbarrier, which each block
  waits on (no cluster-wide barrier after the sends; the mbarrier and slots are a shared array
  the kernel's PTX declares, since round 14; until then they sat in Triton's dynamic shared
  memory past what the kernel used, which a kernel of one warp a block does not declare).

Since round 12 the provider itself spreads the fused adds and the dynamic-fp8 norm this way
(`ir_kernels_triton.cluster_norm`, whose exchange the `mS` variants use), so `triton` is the
provider's op as it now runs and `split` the provider with clusters off (``launch_norm(...,
cluster=1)``): the split, as before. For the fused add, `triton-inplace` and
`one-program-inplace` are the same two in place (a row written in place is never split), beside
`mS-inplace`. The JSONs of rounds 11 and 12 predate the change: their `triton` and
`triton-inplace` are the split and the one program.

`--timing-variants` adds each cluster without its exchange (wrong outputs, timing only),
launched as clusters (`cS-no-exchange`) and plainly (`pS-no-exchange`): the floor an exchange
adds to. Timed beside an empty Triton kernel by CUDA-graph replay in rotated rounds; the
fastest round is printed. Results: `triton-tuning-H200.log` rounds 11, 12 and 14 (eight
blocks; since then `triton` is the provider at eight).

Usage (GPU machine, ``source benchmarks/gpu/env.sh``, ``benchmarks/gpu`` on ``PYTHONPATH``):
  python benchmarks/gpu/triton_cluster_probe.py [--shapes OP:TOKENSxWIDTH,...]
    [--clusters 2,4,8] [--rounds 7] [--timing-variants] [--json OUT]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from probe_tools import (
    bf16_inputs,
    fastest_line,
    launch_empty_kernel,
    norm_variant,
    time_rotated,
    write_results,
)

from ir_kernels_triton.cluster_norm import (
    _begin_exchange,
    _row_sum,
    _row_sum_and_peak,
    combine_asm,
    exchange_one,
    exchange_pair,
    sum_and_max,
)
from ir_kernels_triton.fp8 import quantize, round_to_dtype
from ir_kernels_triton.norm_kernels import launch_norm
from ir_kernels_triton.norm_rules import QUANT_DYNAMIC, QUANT_STATIC, norm_warps

DEFAULT_SHAPES = (
    "fused_add_rms_norm:16x8192,fused_add_rms_norm:1x8192,"
    "fused_add_rms_norm_static_quant_fp8:16x8192,rms_norm_dynamic_quant_fp8:1x8192,"
    "rms_norm_dynamic_quant_fp8:16x8192,rms_norm:16x8192,rms_norm:1x8192"
)


@triton.jit
def _cluster_arrive(anchor):
    """Arrive (relaxed) on the cluster barrier: the wait before the first remote store then
    knows every block of the cluster has started (its shared memory exists)."""
    return tl.inline_asm_elementwise(
        "barrier.cluster.arrive.relaxed.aligned; mov.u32 $0, 0;",
        "=r,r",
        [anchor],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )


def _barrier_exchange_asm(clusters: int, pair: bool) -> str:
    """PTX of the cluster-barrier exchange (`cS`): thread t < `clusters` stores this block's
    partial (`pair`: its sum and peak) in slot `rank` of block t's buffer with
    ``st.shared::cluster``; a release / acquire cluster barrier; then every block adds its slots
    in the one-program tree's order (`cluster_norm.combine_asm`), as the provider's exchange
    does after its mbarrier."""
    width = 8 if pair else 4
    store = (
        "st.shared::cluster.v2.f32 [peer], {$2, $3};"
        if pair
        else "st.shared::cluster.f32 [peer], $1;"
    )
    return f"""{{
    .shared .align 16 .f32 xch[{2 * clusters if pair else clusters}];
    .reg .b32 tid, rank, slots, mine, peer;
    .reg .pred writer;
    .reg .f32 v<16>;
    mov.u32 tid, %tid.x;
    mov.u32 rank, %cluster_ctarank;
    setp.lt.u32 writer, tid, {clusters};
    mov.u32 slots, xch;
    mul.lo.u32 mine, rank, {width};
    add.u32 mine, slots, mine;
    barrier.cluster.wait.aligned;
    @writer mapa.shared::cluster.u32 peer, mine, tid;
    @writer {store}
    barrier.cluster.arrive.release.aligned;
    barrier.cluster.wait.acquire.aligned;
    {combine_asm(clusters, pair)}
    }}"""


_BARRIER_SUM_2 = tl.constexpr(_barrier_exchange_asm(2, False))
_BARRIER_SUM_4 = tl.constexpr(_barrier_exchange_asm(4, False))
_BARRIER_PAIR_2 = tl.constexpr(_barrier_exchange_asm(2, True))
_BARRIER_PAIR_4 = tl.constexpr(_barrier_exchange_asm(4, True))
_BARRIER_SUM_8 = tl.constexpr(_barrier_exchange_asm(8, False))
_BARRIER_PAIR_8 = tl.constexpr(_barrier_exchange_asm(8, True))


@triton.jit
def _cluster_total(partial, S: tl.constexpr):
    """The row's sum through the cluster-barrier exchange."""
    return exchange_one(
        partial, _BARRIER_SUM_2 if S == 2 else (_BARRIER_SUM_4 if S == 4 else _BARRIER_SUM_8)
    )


@triton.jit
def _cluster_total_and_peak(partial, peak, S: tl.constexpr):
    """`_cluster_total`, and the row's peak."""
    return exchange_pair(
        partial,
        peak,
        _BARRIER_PAIR_2 if S == 2 else (_BARRIER_PAIR_4 if S == 4 else _BARRIER_PAIR_8),
    )


@triton.jit
def cluster_norm_kernel(
    x_ptr,
    x_stride,
    r_ptr,
    r_stride,
    w_ptr,
    out_ptr,
    out_stride,
    res_ptr,
    res_stride,
    scale_ptr,
    scale_out_ptr,
    variance_size,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    QUANT: tl.constexpr,
    BLOCK: tl.constexpr,
    ROW_WARPS: tl.constexpr,
    S: tl.constexpr,
    EXCHANGE: tl.constexpr = 1,
    CLUSTER_LAUNCH: tl.constexpr = True,
):
    # EXCHANGE: 1 through a cluster barrier, 2 through an mbarrier (the provider's), 0
    # (timing only, wrong outputs) none, each block taking its own partial for the row's;
    # CLUSTER_LAUNCH only keeps the plain launch's compiled kernel apart
    pid = tl.program_id(0)
    row = (pid // S).to(tl.int64)
    rank = pid % S
    if EXCHANGE == 1:
        _cluster_arrive(pid)
    elif EXCHANGE == 2:
        _begin_exchange(pid)
    act_dtype = x_ptr.dtype.element_ty
    VEC: tl.constexpr = 128 // act_dtype.primitive_bitwidth
    SPAN: tl.constexpr = 32 * VEC  # a warp's elements in one access
    LOCAL: tl.constexpr = ROW_WARPS // S  # this block's warps
    i = tl.arange(0, BLOCK // S)
    # local warp v of repeat k holds what warp rank + S * v holds in the one-program kernel
    offs = (i // (SPAN * LOCAL)) * (SPAN * ROW_WARPS) + (rank + S * ((i // SPAN) % LOCAL)) * SPAN
    offs = tl.max_contiguous(tl.multiple_of(offs + i % SPAN, VEC), VEC)
    x = tl.load(x_ptr + row * x_stride + offs).to(tl.float32)
    if QUANT == 1:
        scale = tl.load(scale_ptr)
    w = tl.load(w_ptr + offs).to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(r_ptr + row * r_stride + offs).to(tl.float32)
        s = (x + r).to(act_dtype)
        tl.store(res_ptr + row * res_stride + offs, s)
        x = s.to(tl.float32)
    sq = x * x
    if QUANT == 2:
        xw = x * w
        part, part_peak = tl.reduce((sq, tl.abs(xw)), 0, sum_and_max)
        if EXCHANGE == 1:
            total, peak = _cluster_total_and_peak(part, part_peak, S)
        elif EXCHANGE == 2:
            total, peak = _row_sum_and_peak(part, part_peak, S)
        else:
            total, peak = part, part_peak
    else:
        total = tl.sum(sq, axis=0)
        if EXCHANGE == 1:
            total = _cluster_total(total, S)
        elif EXCHANGE == 2:
            total = _row_sum(total, S)
    inv_rms = tl.rsqrt(total / variance_size + eps)
    if QUANT == 2:
        y = xw * inv_rms
    else:
        y = x * inv_rms
        y = y * w
    if QUANT == 0:
        tl.store(out_ptr + row * out_stride + offs, y.to(out_ptr.dtype.element_ty))
    else:
        y = round_to_dtype(y, act_dtype, False)
        if QUANT == 2:
            amax = (peak * inv_rms).to(act_dtype).to(tl.float32)
            scale = tl.maximum(amax / 448.0, 1.0 / (448.0 * 512.0))
            tl.store(scale_out_ptr + row, scale, mask=rank == 0)
        q = quantize(y, 1.0 / scale, False)
        tl.store(out_ptr + row * out_stride + offs, q.to(out_ptr.dtype.element_ty))


class ClusterProbe:
    """The cluster kernel for one op's sample inputs, its outputs allocated once (so that a CUDA
    graph replays the same launch)."""

    def __init__(
        self,
        name: str,
        args: tuple[Any, ...],
        clusters: int,
        exchange: int = 1,
        cluster_launch: bool = True,
        inplace: bool = False,
    ) -> None:
        self.quant, self.residual = norm_variant(name)
        self.scale = None
        if self.residual:
            self.x, self.r, self.w, self.eps = args[:4]
            if self.quant == QUANT_STATIC:
                self.scale = args[4]
        else:
            self.x, self.w, self.eps = args[:3]
            self.r = self.x
            if self.quant == QUANT_STATIC:
                self.scale = args[3]
        rows, hidden = self.x.shape
        self.rows, self.hidden, self.clusters = rows, hidden, clusters
        self.exchange = exchange
        self.warps = norm_warps(hidden, self.quant, self.residual)
        if self.warps % clusters:
            raise ValueError(f"clusters={clusters}: must divide the row's {self.warps} warps")
        dev = self.x.device
        out_dtype = torch.float8_e4m3fn if self.quant else self.x.dtype
        self.out = torch.empty(rows, hidden, dtype=out_dtype, device=dev)
        self.res = torch.empty_like(self.x)
        if inplace:
            # as `fused_add_rms_norm`'s in-place variant: the sum over the residual, the
            # output over x (each block reads only the elements it writes)
            if not self.residual or self.quant:
                raise ValueError(f"{name}: only fused_add_rms_norm runs in place")
            self.x, self.r = self.x.clone(), self.r.clone()
            self.out, self.res = self.x, self.r
        self.scale_out = torch.empty(rows, 1, dtype=torch.float32, device=dev)
        self.args = (
            self.x,
            self.x.stride(0),
            self.r,
            self.r.stride(0),
            self.w,
            self.out,
            self.out.stride(0),
            self.res,
            self.res.stride(0),
            self.scale if self.scale is not None else self.scale_out,
            self.scale_out,
            hidden,
            float(self.eps),
        )
        self.kwargs = dict(
            HAS_RESIDUAL=self.residual,
            QUANT=self.quant,
            BLOCK=hidden,
            ROW_WARPS=self.warps,
            S=clusters,
            EXCHANGE=exchange,
            CLUSTER_LAUNCH=cluster_launch,
            num_warps=self.warps // clusters,
        )
        self.grid = (rows,) if cluster_launch else (rows * clusters,)
        compiled = cluster_norm_kernel.warmup(*self.args, grid=self.grid, **self.kwargs)
        if hasattr(compiled, "result"):
            compiled = compiled.result()
        warps, ctas, shared = compiled.packed_metadata
        assert ctas in (1, clusters), compiled.packed_metadata
        if cluster_launch:
            # the launcher multiplies the grid by num_ctas and asks for clusters of that many
            # blocks (the compiled kernel is Triton's cached one: every launch of it runs so)
            compiled.packed_metadata = (warps, clusters, shared)
        self.compiled = compiled

    def __call__(self) -> Any:
        cluster_norm_kernel[self.grid](*self.args, **self.kwargs)
        if self.quant == QUANT_DYNAMIC:
            return self.out, self.scale_out
        return (self.out, self.res) if self.residual else self.out


def unclustered(
    name: str, args: tuple[Any, ...], inplace: bool = False, cluster: int = 1
) -> Callable[[], None]:
    """The provider's launch of these rows with clusters off (`launch_norm(..., cluster=1)`):
    the split, or one program a row in place, as before round 12 (the JSONs of rounds 11 and
    12 name it `triton` and `triton-inplace`); or, with `cluster`, on the provider's clusters
    of that many blocks whatever its rule says."""
    quant, residual = norm_variant(name)
    x = args[0].clone() if inplace else args[0]
    r = (args[1].clone() if inplace else args[1]) if residual else None
    w, eps = args[2 if residual else 1], args[3 if residual else 2]
    scale = args[-1] if quant == QUANT_STATIC else None
    rows = x.shape[0]
    if inplace:
        out, res = x, r
    else:
        out = torch.empty_like(x, dtype=torch.float8_e4m3fn if quant else x.dtype)
        res = torch.empty_like(x) if residual else None
    scale_out = torch.empty(rows, 1, device=x.device) if quant == QUANT_DYNAMIC else None
    return partial(
        launch_norm, x, w, eps, None, out, residual=r, residual_out=res, quant=quant,
        scale=scale, scale_out=scale_out, cluster=cluster,
    )  # fmt: skip


def _flat(value: Any) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def same_bits(got: list[torch.Tensor], provider: Any) -> bool:
    """Whether outputs `got` are provider `triton`'s outputs, bitwise (its scales reshaped)."""
    torch.cuda.synchronize()
    return all(
        torch.equal(g.view(torch.uint8), p.reshape(g.shape).contiguous().view(torch.uint8))
        for g, p in zip(got, _flat(provider), strict=True)
    )


def check(name: str, probe: ClusterProbe, provider: Any) -> bool:
    """The probe's outputs against provider `triton`'s, bitwise."""
    same = same_bits(_flat(probe()), provider)
    how = "same bits as" if same else "DIFFERS from"
    print(f"  {name} S={probe.clusters} exchange {probe.exchange}: {how} triton")
    return same


def probe_shape(
    name: str,
    tokens: int,
    width: int,
    clusters: list[int],
    rounds: int,
    timing_variants: bool = False,
) -> dict[str, Any]:
    op, args = bf16_inputs(name, tokens, width)
    impl = op.impls["triton"].fn
    provider = impl(*args)
    torch.cuda.synchronize()
    candidates: dict[str, Callable[[], Any]] = {
        "triton": partial(impl, *args),
        "split": unclustered(name, args),
        "empty": launch_empty_kernel,
    }
    same: dict[str, bool] = {}
    for s in clusters:
        for exchange, tag in ((1, f"c{s}"), (2, f"m{s}")):
            probe = ClusterProbe(name, args, s, exchange=exchange)
            same[tag] = check(name, probe, provider)
            candidates[tag] = probe
        if norm_warps(width, *norm_variant(name)) % s == 0:
            # the provider's own cluster kernel at this size (since round 75 its warps send
            # their partials themselves where a block holds several)
            forced = unclustered(name, args, cluster=s)
            forced()
            assert isinstance(forced, partial)
            got = (forced.args[4], forced.keywords["residual_out"], forced.keywords["scale_out"])
            bits = same_bits([t for t in got if t is not None], provider)
            same[f"prov{s}"] = bits
            print(f"  {name} provider S={s}: {'same bits as' if bits else 'DIFFERS from'} triton")
            candidates[f"prov{s}"] = forced
        if timing_variants:
            candidates[f"c{s}-no-exchange"] = ClusterProbe(name, args, s, exchange=0)
            candidates[f"p{s}-no-exchange"] = ClusterProbe(
                name, args, s, exchange=0, cluster_launch=False
            )
    if name == "fused_add_rms_norm" and "triton_inplace" in op.impls:
        # the in-place variant, which models call (`maybe_inplace`): the provider does not split
        # a row whose outputs overwrite its inputs, while a cluster's blocks each read only
        # the elements they write; each candidate works on clones of its own
        inplace = op.impls["triton_inplace"].fn
        x, r = args[0].clone(), args[1].clone()
        inplace(x, r, *args[2:])
        for s in clusters:
            probe = ClusterProbe(name, args, s, exchange=2, inplace=True)
            got = probe()
            torch.cuda.synchronize()
            bits = torch.equal(got[0], x) and torch.equal(got[1], r)
            same[f"m{s}-inplace"] = bits
            print(
                f"  {name} S={s} exchange 2 in place: {'same bits as' if bits else 'DIFFERS from'}"
                " triton_inplace"
            )
            candidates[f"m{s}-inplace"] = probe
        own = (args[0].clone(), args[1].clone())
        candidates["triton-inplace"] = partial(inplace, *own, *args[2:])
        candidates["one-program-inplace"] = unclustered(name, args, inplace=True)
    times = time_rotated(candidates, rounds)
    print(f"{name} {tokens}x{width}: {fastest_line(times)}", flush=True)
    return {"op": name, "tokens": tokens, "width": width, "same_bits": same, "times_us": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="OP:TOKENSxWIDTH,...")
    parser.add_argument("--clusters", default="2,4,8")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--timing-variants",
        action="store_true",
        help="also time each cluster without its exchange, launched as clusters and plainly",
    )
    a = parser.parse_args()
    import ir_kernels_triton  # noqa: F401  (registers provider triton)

    print("triton", triton.__version__, torch.cuda.get_device_name())
    clusters = [int(s) for s in a.clusters.split(",")]
    results = []
    for item in a.shapes.split(","):
        name, shape = item.split(":")
        tokens, width = (int(v) for v in shape.split("x"))
        results.append(probe_shape(name, tokens, width, clusters, a.rounds, a.timing_variants))
    write_results(a.json, results)


if __name__ == "__main__":
    main()
