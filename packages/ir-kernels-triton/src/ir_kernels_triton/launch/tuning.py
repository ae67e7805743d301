"""The launch table of the Triton provider: every launch choice that rests on a measurement.

The launchers and their rules (`norms.rules`, `norms.group`, `activations.gated`,
`quant.static`, `quant.dynamic`, `quant.group`, `rotary.kernel`, `rotary.qk_norm`,
`kv_cache.kernel`, `launch.programmatic`) say what each choice does and why; this module holds
the values, each with one line of rationale. The values come from sweeps of the provider's
launches on the GPUs named below (CUDA-graph replay, medians), except the row sizes of `Rows`,
which follow from the registers a program holds, and the entries marked not yet measured (the
kernels of the fused QK-norm and cache ops), which start from the nearest measured launch;
`benchmarks/tuning/tune_triton.py` sweeps them again on the card it runs on and prints the table
for that card's class.

Two kinds of entry:

- `COMMON` holds what every card measured shares: row blocks, warps, row splits, cluster sizes,
  register caps, L2-share thresholds. The launchers read it without asking the device, so a
  decode-size launch pays for no device query.
- A `DeviceClass` holds what differs between cards: the launches of ops streamed from DRAM,
  which depend on how many loads an SM must keep in flight, hence on the card's DRAM bandwidth
  per SM (`launch.device.dram_gbps_per_sm`). The launchers ask the card only for those
  launches and take the class `device_class` gives.

Only the warps of the norms change the order of a row's sum (so they follow the row width
alone); every other entry moves values between registers, caches and programs, or shares out
the rows, and leaves every bit of the results as it is.
"""

from dataclasses import dataclass

Launch = tuple[int, int]
"""A (block or groups a program, warps a program) pair."""


@dataclass(frozen=True)
class Rows:
    """How a row maps onto a program, in every kernel that reduces a row."""

    #: Widest row the single-pass kernels hold in registers; wider rows are looped in chunks.
    max_single_pass: int
    #: Chunk width of the looped kernels.
    loop_block: int
    #: Elements of a row block a warp takes (`launch.rows.warps_for`).
    elements_per_warp: int
    #: Most warps a program takes.
    max_warps: int


@dataclass(frozen=True)
class Norms:
    """The RMS-norm kernels (`norms.rules`)."""

    #: Rows up to which every variant loads its weight first and takes no register cap.
    few_rows: int
    #: Most warps of the quantizing variants' rows below their wide block.
    quant_warps: int
    #: Warps of the quantizing variants' wide rows.
    wide_quant_warps: int
    #: Row block from which the dynamic-fp8 norm takes `wide_quant_warps` and the quantizing
    #: variants load the weight early at any batch.
    wide_quant_block: int
    #: Row block from which the static-fp8 norm takes `wide_quant_warps`.
    wide_static_quant_block: int
    #: Elements of a row block a warp takes with a residual.
    residual_elements_per_warp: int
    #: Fewest warps a row takes with a residual.
    residual_min_warps: int
    #: Footprint (multiple of the L2 size) up to which the plain fused add past `few_rows` rows
    #: loads the weight after the reduction.
    late_weight_l2_share: float
    #: Register cap per thread of plain rms_norm past `few_rows` 16-bit rows.
    registers: int
    #: Footprint (multiple of the L2 size) above which, up to the L2 size, `registers` applies.
    registers_l2_share: float
    #: Register cap per thread of the plain fused add of wide 16-bit rows streamed from memory.
    residual_registers: int
    #: Row block from which `residual_registers` applies.
    residual_registers_block: int
    #: Footprint (multiple of the L2 size) above which `residual_registers` applies.
    residual_registers_l2_share: float
    #: Footprint (multiple of the L2 size) above which plain norms may read a row again after its
    #: sum (on a card whose class sets `DeviceClass.reload_block`).
    reload_l2_share: float
    #: Footprint (multiple of the L2 size) up to which, from the L2 size, the activations take
    #: the evict-first hint; `evict_first_l2_share_residual` with a residual.
    evict_first_l2_share: float
    evict_first_l2_share_residual: float
    #: Programs sharing a decode-size row.
    row_split: int
    #: Row block from which a row is split up to `wide_split_rows` rows, in two up to
    #: `wide_half_split_rows`.
    wide_split_block: int
    wide_split_rows: int
    wide_half_split_rows: int
    #: Row block from which, below `wide_split_block`, a row is split up to `split_rows` rows
    #: (`split_rows_fp8` with fp8 output), in two up to `half_split_rows`.
    split_block: int
    split_rows: int
    split_rows_fp8: int
    half_split_rows: int
    #: Programs a row of the static-fp8 norm without a residual at `split_block`, up to
    #: `half_split_rows` rows.
    static_split: int


@dataclass(frozen=True)
class Clusters:
    """Decode-size rows spread over a thread-block cluster (`launch.clusters`)."""

    #: Rows up to which a launch takes clusters.
    max_rows: int
    #: Blocks a cluster of a norm's row.
    norm_blocks: int
    #: Row widths (16-bit rows filling their block) whose norms may take a cluster.
    norm_widths: tuple[int, ...]
    #: The width whose fused adds and dynamic-fp8 norm take a cluster; narrower rows take one
    #: only where the split serves them badly.
    wide_norm_width: int
    #: Rows past which plain rms_norm of `wide_norm_width` takes a cluster.
    plain_norm_past_rows: int
    #: Blocks a cluster of a row of dynamic quantization, and warps a block.
    quant_blocks: int
    quant_block_warps: int
    #: Row widths whose dynamic quantization takes a cluster.
    quant_widths: frozenset[int]


@dataclass(frozen=True)
class Gates:
    """The flat kernels of the gated activations (`activations.gated.flat_config`), as
    (block, warps)."""

    #: Outputs up to which a gate favours latency (decode sizes).
    decode_outputs: int
    decode_launch: Launch
    #: Outputs up to which the silu gates past decode sizes take `silu_mid_launch`.
    silu_mid_outputs: int
    silu_mid_launch: Launch
    #: Past those, within the L2 or with fp8 output.
    launch: Launch
    #: Streamed from DRAM without fp8 output (where the device class sets no launch).
    streamed_silu: Launch
    streamed_gelu: Launch
    #: The gelu gates within the L2: up to `gelu_narrow_outputs`, up to `decode_outputs`, up to
    #: `gelu_mid_outputs`, and past them.
    gelu_narrow_outputs: int
    gelu_narrow_launch: Launch
    gelu_decode_launch: Launch
    gelu_mid_outputs: int
    gelu_mid_launch: Launch
    gelu_wide_launch: Launch


@dataclass(frozen=True)
class StaticQuant:
    """The flat kernel of static fp8 quantization (`quant.static.flat_config`), as (block,
    warps)."""

    #: Outputs up to which it favours latency (decode sizes).
    decode_outputs: int
    decode_launch: Launch
    #: Past those, within the L2 and streamed from DRAM.
    launch: Launch
    streamed_launch: Launch


@dataclass(frozen=True)
class RowBlocks:
    """The row-block kernels of the elementwise ops, for rows that are not contiguous
    (`launch.rows.pointwise_config`)."""

    #: Rows up to which a launch favours latency: blocks of at most `few_block` over
    #: `few_warps`.
    few_rows: int
    few_block: int
    few_warps: int
    #: Past those: blocks of at most `block`, over `warps`; `warps_fp8` with fp8 output,
    #: `warps_heavy` for the gates heavier to compute (gelu).
    block: int
    warps: int
    warps_fp8: int
    warps_heavy: int


@dataclass(frozen=True)
class GroupQuant:
    """Group fp8 quantization (`quant.group.group_quant_config`), as (groups a program,
    warps)."""

    #: Rows up to which `decode_launch` applies, then up to `mid_rows` `mid_launch`.
    decode_rows: int
    decode_launch: Launch
    mid_rows: int
    mid_launch: Launch
    #: Past those within the L2: rows of up to `narrow_groups` groups take `narrow_launch`,
    #: wider ones programs of `program_elements` elements.
    narrow_groups: int
    narrow_launch: Launch
    program_elements: int


@dataclass(frozen=True)
class Rotary:
    """The launch of a rotary kernel: the rotary embedding (`rotary.kernel`) and the heads a
    program of the QK-norm kernel (`rotary.qk_norm`) take `Common.rotary`, the fused rotary
    cache write (`kv_cache.kernel`) `Common.rotary_cache`."""

    #: Warps a program.
    warps: int
    #: Heads a program up to `few_tokens` tokens, then up to `mid_tokens`; past those, all of
    #: a token's heads.
    few_tokens: int
    few_heads: int
    mid_tokens: int
    mid_heads: int


@dataclass(frozen=True)
class QkNorm:
    """The QK-norm + rotary kernel (`rotary.qk_norm`). A head's sum of squares runs in the
    order of its tile's layout, so both entries follow the head size alone (the heads a
    program take `Rotary`'s rule: a program loops over its heads a tile at a time)."""

    #: Elements of a tile's pair halves (half the rotated part of each of its heads).
    tile_elements: int
    #: Warps a program.
    warps: int


@dataclass(frozen=True)
class KvCache:
    """The cache write (`kv_cache.kernel.write_kv_cache_kernel`; the fused rotary cache write
    takes `Common.rotary_cache`)."""

    #: Elements of a key or value row a program copies.
    block: int
    #: Warps a program.
    warps: int


@dataclass(frozen=True)
class Programmatic:
    """Programmatic dependent launch (`launch.programmatic`)."""

    #: Launches of at most this many threads are programmatic; larger ones launch plainly.
    max_threads: int


@dataclass(frozen=True)
class Common:
    """The entries every card measured shares."""

    rows: Rows
    norms: Norms
    clusters: Clusters
    gates: Gates
    static_quant: StaticQuant
    row_blocks: RowBlocks
    group_quant: GroupQuant
    rotary: Rotary
    rotary_cache: Rotary
    qk_norm: QkNorm
    kv_cache: KvCache
    programmatic: Programmatic


@dataclass(frozen=True)
class DeviceClass:
    """Launches of ops streamed from DRAM on the cards of one class: those of at least
    `min_gbps_per_sm` of DRAM bandwidth per SM (None: cards that report no bandwidth). None
    in an entry: the `COMMON` rule applies."""

    name: str
    min_gbps_per_sm: float | None
    #: (block, warps) of the gates without fp8 output.
    streamed_gates: Launch | None
    #: Row block from which plain rms_norm of 16-bit rows takes `Norms.registers`.
    streamed_norm_cap_block: int | None
    #: Row block from which the plain norms of 16-bit rows past `Norms.reload_l2_share` read
    #: a row again after its sum rather than hold it through the reduction.
    reload_block: int | None
    #: Elements a program of group quantization covers (whole rows up to it), taking the
    #: warps of its row block.
    streamed_group_elements: int | None
    #: (groups a program, warps) of group quantization, where `streamed_group_elements` is
    #: None.
    streamed_group_launch: Launch | None


COMMON = Common(
    rows=Rows(
        # 16 warps hold it at 32 float32 values a thread
        max_single_pass=16384,
        # a looped chunk of 8 warps at 16 values a thread
        loop_block=4096,
        # 16 values a thread: two 16-byte loads of 16-bit values
        elements_per_warp=512,
        # the widest row of `max_single_pass` needs no more
        max_warps=16,
    ),
    norms=Norms(
        # decode and small prefill batches: latency first, the weight issued before the sum
        few_rows=256,
        # H100 and H200: the quantizing norms fastest on at most 4 warps up to 4096 elements
        quant_warps=4,
        # H100 and H200: 8 warps from 8192 elements (4 left a single row slower)
        wide_quant_warps=8,
        # H100 and H200: the dynamic-fp8 norm's rows of 8192 on 8 warps, weight loaded first
        wide_quant_block=8192,
        # H100: the static-fp8 norm 1-6 % faster on 8 warps from 4096 at every batch
        wide_static_quant_block=4096,
        # H100: with a residual, 8 warps for 2048 and 16 from 4096, 5-15 % faster to 1024 rows
        residual_elements_per_warp=256,
        residual_min_warps=4,
        # H100: the fused add of 1024 x 4096 13 % faster with the weight loaded late
        late_weight_l2_share=2.0,
        # H100: rms_norm between a quarter of the L2 and the L2 about 6 % faster capped at 32
        registers=32,
        registers_l2_share=0.25,
        # H100: the fused add of 8192-wide rows streaming from memory 0.3-0.5 % faster at 48
        residual_registers=48,
        residual_registers_block=8192,
        residual_registers_l2_share=2.0,
        # H200: rms_norm 16384 x 8192 2 % and the fused add 4 % faster reading rows again
        reload_l2_share=4.0,
        # H100 (50 MB L2): fused add + fp8 just past the L2 5-11 % faster with the hint
        evict_first_l2_share=1.2,
        # H100: the plain fused add of 1.28 L2 sizes 1-3 % faster with it
        evict_first_l2_share_residual=1.3,
        # H100: four programs a decode row of 8192, 7-13 % faster than one
        row_split=4,
        # H100: 16 rows of 8192 faster split in four, 32 rows in two
        wide_split_block=8192,
        wide_split_rows=16,
        wide_half_split_rows=32,
        # H100: rows of 4096 split in four up to 8 rows (4 with fp8 output), two up to 16
        split_block=4096,
        split_rows=8,
        split_rows_fp8=4,
        half_split_rows=16,
        # H100: the static-fp8 norm of 1 x 4096 fastest on two programs (four slower)
        static_split=2,
    ),
    clusters=Clusters(
        # H200: measured from 1 to 16 rows, the decode sizes
        max_rows=16,
        # H200: eight blocks beat four (one warp a block for the dynamic-fp8 norm)
        norm_blocks=8,
        # H200: rows of 8192 gain wherever measured, rows of 4096 where the split serves badly
        norm_widths=(4096, 8192),
        # H200: at 4096 the split leads wherever it can serve the row
        wide_norm_width=8192,
        # H200: plain rms_norm level with the split up to 4 rows of 8192, ahead past them
        plain_norm_past_rows=4,
        # H200: dynamic quant of 8192 on eight one-warp blocks 5-7 % faster than one program
        quant_blocks=8,
        quant_block_warps=1,
        # H200: rows of 2048 and 4096 ran slower on any cluster
        quant_widths=frozenset({8192}),
    ),
    gates=Gates(
        # H100: up to 128K outputs, latency first
        decode_outputs=1 << 17,
        decode_launch=(512, 8),
        # H200 and H100: silu at 16 tokens of 14336 or 28672 fastest on 1024 over 8 warps
        silu_mid_outputs=1 << 19,
        silu_mid_launch=(1024, 8),
        # H100: the gates past decode sizes fastest on 1024 over 4 warps
        launch=(1024, 4),
        # H100: streamed silu 1-1.5 % faster on 1024 over 8 warps
        streamed_silu=(1024, 8),
        # H100: streamed gelu up to 1 % faster on 2048 over 8 warps
        streamed_gelu=(2048, 8),
        # H100: gelu of one token of 5632 fastest on 256 over 4 warps
        gelu_narrow_outputs=1 << 13,
        gelu_narrow_launch=(256, 4),
        # H100: gelu of one token of 14336 fastest on 512 over 8 warps in four sweeps
        gelu_decode_launch=(512, 8),
        # H100: gelu up to 1M outputs on 512 over 4 warps
        gelu_mid_outputs=1 << 20,
        gelu_mid_launch=(512, 4),
        # H100: gelu past 1M outputs within the L2 4 % faster at 16 outputs a thread
        gelu_wide_launch=(512, 1),
    ),
    static_quant=StaticQuant(
        # H100: up to 128K outputs, latency first
        decode_outputs=1 << 17,
        decode_launch=(512, 8),
        # H100: within the L2 up to 30 % faster than 1024 over 4 warps
        launch=(2048, 4),
        # H100: streamed from memory fastest on 8 warps
        streamed_launch=(2048, 8),
    ),
    row_blocks=RowBlocks(
        # H200: few rows spread over more, smaller programs
        few_rows=64,
        few_block=512,
        few_warps=4,
        # H200: past them, 2048-element blocks; 8 warps, 4 with fp8 output, 2 for gelu
        block=2048,
        warps=8,
        warps_fp8=4,
        warps_heavy=2,
    ),
    group_quant=GroupQuant(
        # H100: groups of 128, 8 groups over 4 warps (one 16-byte load a thread) to 16 rows
        decode_rows=16,
        decode_launch=(8, 4),
        # H100: 16 groups over 2 warps to 1024 rows, 10 % faster than 32 over 8
        mid_rows=1024,
        mid_launch=(16, 2),
        # H100: rows of up to 16 groups keep 8 over 4 warps past 1024 rows
        narrow_groups=16,
        narrow_launch=(8, 4),
        # H100: wider rows within the L2 fastest on 4096-element programs
        program_elements=4096,
    ),
    rotary=Rotary(
        # H100: the sweep ran on 4 warps
        warps=4,
        # H100: 4 heads a program to 64 tokens, 30 % faster than a token a program
        few_tokens=64,
        few_heads=4,
        # H100: 8 heads a program to 2048 tokens, a token's heads a program beyond
        mid_tokens=2048,
        mid_heads=8,
    ),
    rotary_cache=Rotary(
        # H100: the rotary's launch up to 64 tokens and past 2048
        warps=4,
        few_tokens=64,
        few_heads=4,
        mid_tokens=2048,
        # H100: 16 heads a program from 1024 to 2048 tokens, 10-15 % faster than 8: a program
        # that holds the key and value heads as well does more with a wider block
        mid_heads=16,
    ),
    qk_norm=QkNorm(
        # not yet measured: heads of 128 in tiles of eight, 8 values a thread over 4 warps
        tile_elements=512,
        warps=4,
    ),
    kv_cache=KvCache(
        # not yet measured: a key row of 8 heads of 128 in one program, a 16-byte access a
        # thread of 16-bit rows over 4 warps
        block=1024,
        warps=4,
    ),
    programmatic=Programmatic(
        # one wave of 1024 threads an SM on 128 SMs; larger grids on an H200 lost up to 1.6x
        max_threads=128 * 1024,
    ),
)

#: Cards whose driver reports no memory clock: the `COMMON` rules throughout.
UNKNOWN_BANDWIDTH = DeviceClass(
    name="unknown-bandwidth",
    min_gbps_per_sm=None,
    streamed_gates=None,
    streamed_norm_cap_block=None,
    reload_block=None,
    streamed_group_elements=None,
    streamed_group_launch=None,
)

#: The classes of cards that report their bandwidth, by the least DRAM bandwidth per SM (GB/s)
#: of each, ascending.
DEVICE_CLASSES: tuple[DeviceClass, ...] = (
    DeviceClass(
        # H100 SXM, about 25 GB/s per SM
        name="shallow-loads",
        min_gbps_per_sm=0.0,
        # H100: streamed gates keep the COMMON launches
        streamed_gates=None,
        # H100: no cap past the L2
        streamed_norm_cap_block=None,
        # H100: not measured; rows stay in registers
        reload_block=None,
        # H100: 8 groups over 4 warps, 0.5-1 % ahead at every width
        streamed_group_elements=None,
        streamed_group_launch=(8, 4),
    ),
    DeviceClass(
        # H200, about 37 GB/s per SM, half as much again to keep in flight; the floor lies
        # between the two cards
        name="deep-loads",
        min_gbps_per_sm=30.0,
        # H200: streamed silu of 16384 x 28672 4 % faster on 1024 over 4 warps, as Inductor
        streamed_gates=(1024, 4),
        # H200: rms_norm of 8192-wide rows past the L2 up to 2 % faster capped at 32
        streamed_norm_cap_block=8192,
        # H200: rms_norm 16384 x 8192 2 % and the fused add 4 % faster reading rows again
        reload_block=8192,
        # H200: 8 groups over 4 warps 8-10 % slower than whole rows of up to 8192 elements
        streamed_group_elements=8192,
        streamed_group_launch=None,
    ),
)


def device_class(gbps_per_sm: float | None) -> DeviceClass:
    """The class of a card of `gbps_per_sm` of DRAM bandwidth per SM (None: not reported):
    the last of `DEVICE_CLASSES` whose floor it reaches."""
    if gbps_per_sm is None:
        return UNKNOWN_BANDWIDTH
    chosen = DEVICE_CLASSES[0]
    for candidate in DEVICE_CLASSES:
        if candidate.min_gbps_per_sm is not None and gbps_per_sm >= candidate.min_gbps_per_sm:
            chosen = candidate
    return chosen
