"""Rows spread over a thread-block cluster: the launch, and the exchange of partials between
the blocks of a row through distributed shared memory.

A wide decode-size row is bound by what one SM moves. The norms' split (`norms.rules.split_for`)
shares it among programs that each load the whole row for its sum, which cannot serve a row
written in place (one program's stores would overwrite what another still reads) and costs the
shared loads. On a cluster, the blocks of a row each load only their part of it and exchange
their partials (`norms.cluster_kernel`, `quant.dynamic.cluster_quant_kernel`).

The exchange is inline PTX: each block sends its partial to every block of the cluster with
``st.async``, completing bytes on the receiver's mbarrier, and waits on its own; the mbarrier
and slots are a shared array the kernel's PTX declares (`EXCHANGE_SYMBOL`), apart from
Triton's own shared memory (a kernel of one warp a block has none to borrow). The partials are
combined in the order of the one-program kernel's reduction tree (`combine_asm`), so a row
keeps its bits. Where a block holds several warps, each warp may send its own partial sum
(`warp_sum_asm`): the block's part of the tree is then written in the exchange's PTX, so no
block reduction runs.

Triton builds no reduction across the blocks of a cluster (``num_ctas`` > 1 fails in its CTA
planning), so a kernel is compiled for one block and its compiled launch metadata is changed
to ask Triton's C launcher for clusters (`launch_on_clusters`). That rests on a Triton
internal, so clusters launch only with the Triton versions they were run on (`CLUSTER_TRITON`),
on compute capability 9.0+, never in the interpreter or under programmatic launch (the
launchers' rules check the last); elsewhere rows take the split or one program.
"""

import logging
from typing import Any

import torch
import triton
import triton.language as tl

from .device import interpreting, sm90_or_newer, triton_version

logger = logging.getLogger(__name__)

#: Blocks a cluster the exchange is written for (a launch may ask for any that divides the
#: row's warps).
CLUSTER_SIZES = (2, 4, 8)

#: Triton versions (major, minor) whose launch metadata and shared-memory layout the cluster
#: launch was run on; other versions take the split.
CLUSTER_TRITON = frozenset({(3, 6)})

#: The exchange's shared memory, declared in the kernel's PTX by `_begin_exchange`: its
#: mbarrier (8 bytes), then from byte 16 one slot a block (at most 8 bytes, at most 8 blocks) or
#: one a warp (`warp_sum_asm`: 4 bytes, at most 16 warps).
EXCHANGE_SYMBOL = "ir_cluster_exchange"
EXCHANGE_BYTES = 80


def cluster_launches(t: torch.Tensor) -> bool:
    """Whether rows of `t` may be spread over clusters: on a GPU of compute capability 9.0+,
    with a Triton of `CLUSTER_TRITON`, not in the interpreter."""
    if interpreting() or not t.is_cuda or triton_version() not in CLUSTER_TRITON:
        return False
    return sm90_or_newer(t.device.index if t.device.index is not None else 0)


def combine_asm(clusters: int, pair: bool, peak: bool = False, sum_to: str = "$0") -> str:
    """PTX that loads the `clusters` slots (`pair`: a sum and a peak each) from ``slots`` into
    ``v0, v1, ...`` and adds the sums in the one-program tree's order, the butterfly's last
    steps: for d = clusters / 2, ..., 1, slot i takes slot i + d for i < d (the peaks by
    a maximum that keeps a NaN, ``max.NaN``); the row's sum goes to `sum_to` (its peak to $1).
    `peak`: one value a slot, a peak, combined by that maximum."""
    if pair and peak:
        raise ValueError("combine_asm: pair=True and peak=True; a slot holds a pair or a peak")
    per_slot = 2 if pair else 1
    words = [f"v{i}" for i in range(clusters * per_slot)]
    lines = []
    for start in range(0, len(words), 4):
        chunk = words[start : start + 4]
        vector = {2: ".v2", 4: ".v4"}[len(chunk)]
        lines.append(f"ld.shared{vector}.f32 {{{', '.join(chunk)}}}, [slots+{4 * start}];")
    sums, peaks = words[::per_slot], words[1::2]
    step = clusters // 2
    while step:
        for i in range(step):
            combine = "max.NaN" if peak else "add"
            lines.append(f"{combine}.f32 {sums[i]}, {sums[i]}, {sums[i + step]};")
            if pair:
                lines.append(f"max.NaN.f32 {peaks[i]}, {peaks[i]}, {peaks[i + step]};")
        step //= 2
    lines.append(f"mov.f32 {sum_to}, {sums[0]};")
    if pair:
        lines.append(f"mov.f32 $1, {peaks[0]};")
    return "\n    ".join(lines)


def _send_and_wait_asm(
    clusters: int, sender: str, slot: str, width: int, expected: int, values: str, label: str
) -> str:
    """PTX both exchanges share, in registers their callers declare: each thread whose `sender`
    register (its thread or lane index) is below `clusters` sends `values` (`width` bytes: one
    or two float32) to slot `slot` (a register) of block `sender`, completing bytes on that
    block's mbarrier; thread 0 expects `expected` bytes on this block's; every thread then waits
    for them (at `label`). The cluster barrier waited on first was arrived at by
    `_begin_exchange`: every block has started, so its mbarrier and slots exist."""
    vector = ".v2" if width == 8 else ""
    send = f"st.async.shared::cluster.mbarrier::complete_tx::bytes{vector}.f32"
    return f"""mov.u32 bar, {EXCHANGE_SYMBOL};
    add.u32 slots, bar, 16;
    setp.lt.u32 writer, {sender}, {clusters};
    setp.eq.u32 lead, tid, 0;
    barrier.cluster.wait.aligned;
    @lead mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], {expected};
    mad.lo.u32 mine, {slot}, {width}, slots;
    @writer mapa.shared::cluster.u32 peer, mine, {sender};
    @writer mapa.shared::cluster.u32 peerbar, bar, {sender};
    @writer {send} [peer], {values}, [peerbar];
    {label}:
    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [bar], 0;
    @!done bra {label};"""


def _exchange_asm(clusters: int, pair: bool, peak: bool = False) -> str:
    """PTX of one exchange in a cluster of `clusters` (2, 4 or 8): thread t < `clusters` sends this
    block's partial (`pair`: its sum and peak; `peak`: its peak alone) to slot `rank` of block
    t, completing bytes on block t's mbarrier; thread 0 expects all slots' bytes on this
    block's; every thread waits for them and combines the slots in the one-program tree's
    order (`combine_asm`). The mbarrier
    and slots are `EXCHANGE_SYMBOL`, which `_begin_exchange` declares: a kernel of one warp a
    block has no shared memory of Triton's to borrow."""
    width = 8 if pair else 4
    values = "{$2, $3}" if pair else "$1"
    exchange = _send_and_wait_asm(
        clusters, "tid", "rank", width, width * clusters, values, "EXCHANGE_WAIT"
    )
    return f"""{{
    .reg .b32 tid, rank, bar, slots, mine, peer, peerbar;
    .reg .pred writer, lead, done;
    .reg .f32 v<16>;
    mov.u32 tid, %tid.x;
    mov.u32 rank, %cluster_ctarank;
    {exchange}
    {combine_asm(clusters, pair, peak)}
    }}"""


def warp_sum_asm(clusters: int, row_warps: int, pack: int) -> str:
    """PTX of the inverse RMS of a row whose blocks hold several warps each, without a block
    reduction: every warp sends its own partial (`sum_by_warps`). Operands: ``$0 ..`` the
    `pack` outputs, then `pack` copies each of x (the thread's values, in register order),
    the variance size and epsilon (as float32). The thread's values are squared and summed in
    a chain, the first square rounded and the rest fused multiply-adds, then reduced by a
    butterfly over the lanes (shuffles 16, 8, ..., 1), as Triton 3.6 compiles ``tl.sum(x *
    x)``: the warp's node of the one-program tree. Lane t < `clusters` of local warp v sends it
    to slot ``rank + clusters * v`` (the warp's index in one program a row) of block t, the
    bytes completing on block t's mbarrier; each block waits for its `row_warps` slots and adds
    them in the tree's order (`combine_asm`). Every output is then ``rsqrt(sum / n + eps)`` in
    the one-program kernel's instructions (``div.full``, ``add``, ``rsqrt.approx.ftz``)."""
    if clusters not in CLUSTER_SIZES or row_warps % clusters or row_warps * 4 > EXCHANGE_BYTES - 16:
        raise ValueError(
            f"warp_sum_asm: clusters={clusters}, row_warps={row_warps}: expected a cluster of "
            f"{CLUSTER_SIZES} dividing the row's warps, at most {(EXCHANGE_BYTES - 16) // 4} warps"
        )
    x = [f"${pack + k}" for k in range(pack)]
    n, eps = f"${2 * pack}", f"${3 * pack}"
    chain = [f"mul.f32 acc, {x[0]}, {x[0]};"]
    chain += [f"fma.rn.f32 acc, {v}, {v}, acc;" for v in x[1:]]
    for lanes in (16, 8, 4, 2, 1):
        chain.append(f"shfl.sync.bfly.b32 other, acc, {lanes}, 31, -1;")
        chain.append("add.f32 acc, acc, other;")
    outputs = "\n    ".join(f"mov.f32 ${k}, inv;" for k in range(pack))
    body = "\n    ".join(chain)
    return f"""{{
    .reg .b32 tid, lane, warp, rank, bar, slots, mine, peer, peerbar;
    .reg .pred writer, lead, done;
    .reg .f32 acc, other, total, inv, v<{row_warps}>;
    {body}
    mov.u32 tid, %tid.x;
    and.b32 lane, tid, 31;
    shr.u32 warp, tid, 5;
    mov.u32 rank, %cluster_ctarank;
    mad.lo.u32 warp, warp, {clusters}, rank;
    {_send_and_wait_asm(clusters, "lane", "warp", 4, 4 * row_warps, "acc", "WARP_SUM_WAIT")}
    {combine_asm(row_warps, False, sum_to="total")}
    div.full.f32 inv, total, {n};
    add.f32 inv, inv, {eps};
    rsqrt.approx.ftz.f32 inv, inv;
    {outputs}
    }}"""


def sum_by_warps(clusters: int, row_warps: int, block: int) -> dict[str, str]:
    """`norms.cluster_kernel.cluster_norm_kernel`'s keyword arguments that have each warp of a
    row of `block` send its partial sum (`warp_sum_asm`) where a block holds several warps (its
    own reduction would add them through shared memory behind a block barrier first), else none
    (the block's `tl.sum`, then the exchange). The dynamic-fp8 norm keeps its form: its rows
    take one warp a block."""
    if row_warps // clusters < 2:
        return {}
    pack = block // (32 * row_warps)
    constraints = ",".join(["=f"] * pack + ["f"] * (3 * pack))
    return dict(SUM_ASM=warp_sum_asm(clusters, row_warps, pack), SUM_CONSTRAINTS=constraints)


_BEGIN_ASM = tl.constexpr(
    f""".shared .align 16 .b8 {EXCHANGE_SYMBOL}[{EXCHANGE_BYTES}];
    {{
    .reg .b32 tid, bar;
    .reg .pred lead;
    mov.u32 tid, %tid.x;
    setp.eq.u32 lead, tid, 0;
    mov.u32 bar, {EXCHANGE_SYMBOL};
    @lead mbarrier.init.shared::cta.b64 [bar], 1;
    @lead fence.mbarrier_init.release.cluster;
    barrier.cluster.arrive.relaxed.aligned;
    mov.u32 $0, 0;
    }}"""
)
_SUM_2 = tl.constexpr(_exchange_asm(2, False))
_SUM_4 = tl.constexpr(_exchange_asm(4, False))
_PAIR_2 = tl.constexpr(_exchange_asm(2, True))
_PAIR_4 = tl.constexpr(_exchange_asm(4, True))
_SUM_8 = tl.constexpr(_exchange_asm(8, False))
_PAIR_8 = tl.constexpr(_exchange_asm(8, True))
_PEAK_2 = tl.constexpr(_exchange_asm(2, False, peak=True))
_PEAK_4 = tl.constexpr(_exchange_asm(4, False, peak=True))
_PEAK_8 = tl.constexpr(_exchange_asm(8, False, peak=True))


@triton.jit
def _begin_exchange(anchor):
    """Declare the exchange's shared array (`EXCHANGE_SYMBOL`, in the kernel's body: called
    once a kernel); thread 0 sets up this block's mbarrier (one arrival) for the cluster;
    every thread arrives on the cluster barrier, waited on before the first send (every block
    has started, so its shared memory exists)."""
    return tl.inline_asm_elementwise(
        _BEGIN_ASM, "=r,r", [anchor], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def exchange_one(partial, ASM: tl.constexpr):
    """One value a block through the exchange `ASM` (`_exchange_asm`'s form)."""
    return tl.inline_asm_elementwise(
        ASM, "=f,f", [partial], dtype=tl.float32, is_pure=False, pack=1
    )


@triton.jit
def exchange_pair(partial, peak, ASM: tl.constexpr):
    """A (sum, peak) pair a block through the exchange `ASM` (`_exchange_asm`'s form)."""
    return tl.inline_asm_elementwise(
        ASM, "=f,=f,f,f", [partial, peak], dtype=(tl.float32, tl.float32), is_pure=False, pack=1
    )


@triton.jit
def _row_sum(partial, S: tl.constexpr):
    """The row's sum of squares from each block's `partial`."""
    return exchange_one(partial, _SUM_2 if S == 2 else (_SUM_4 if S == 4 else _SUM_8))


@triton.jit
def _row_sum_and_peak(partial, peak, S: tl.constexpr):
    """`_row_sum`, and the row's peak |x * w| from each block's `peak`."""
    return exchange_pair(partial, peak, _PAIR_2 if S == 2 else (_PAIR_4 if S == 4 else _PAIR_8))


@triton.jit
def _row_peak(peak, S: tl.constexpr):
    """The row's peak from each block's `peak` (a maximum: exact in any order)."""
    return exchange_one(peak, _PEAK_2 if S == 2 else (_PEAK_4 if S == 4 else _PEAK_8))


def _ask_for_clusters(compiled: Any, clusters: int) -> bool:
    """Make every launch of `compiled` (Triton's cached kernel, launched only from here) one of
    clusters of `clusters` blocks: its packed launch metadata is (warps, blocks a cluster,
    dynamic shared bytes), which Triton's C launcher reads. False where the kernel is not in
    that form (then it is not launched)."""
    packed = getattr(compiled, "packed_metadata", None)
    if not (isinstance(packed, tuple) and len(packed) == 3):
        return False
    warps, ctas, shared = packed
    if ctas not in (1, clusters):
        return False
    compiled.packed_metadata = (warps, clusters, shared)
    return True


def launch_on_clusters(
    kernel: Any, rows: int, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any | None:
    """`kernel` (a kernel built on this module's exchange) over `rows` rows, in clusters of
    ``kwargs["S"]`` blocks a row, with `args` and `kwargs` (its constexprs and ``num_warps``);
    returns the compiled kernel, or None, launching nothing, where Triton's compiled kernel is
    not in the form `_ask_for_clusters` knows."""
    grid = (rows,)  # the launcher multiplies it by the blocks a cluster
    compiled = kernel.warmup(*args, grid=grid, **kwargs)
    if hasattr(compiled, "result"):
        compiled = compiled.result()
    if not _ask_for_clusters(compiled, kwargs["S"]):
        logger.warning(
            "%s: Triton %s compiled a kernel whose launch metadata is not "
            "(warps, blocks a cluster, shared bytes); rows are not spread",
            kernel.fn.__name__,
            triton.__version__,
        )
        return None
    return kernel[grid](*args, **kwargs)
